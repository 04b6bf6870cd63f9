"""Finding the pod's node wherever a recovery left it: the place record, then every zone.

A capacity failover moves the slice to another zone (``capacity.Capacity`` sets the
provider's zone). ``Whereabouts`` writes each move to the durable place record
(``record.place``) as it happens, and a provider starts from the recorded zone: so a
restarted console, a script, ``phantom status`` or a second console look where the node is.
When the node is not where the record says (no record yet, or a stale one: a console killed
between a create and the write), the provider asks every configured zone and adopts the
node it finds there, so it never waits for a node that exists elsewhere and never makes the
recovery create a second one.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

from google.api_core import exceptions as gexc
from google.cloud import tpu_v2

from console.services.model import HostState
from console.services.record.place import PlaceRecord

if TYPE_CHECKING:
    from console.services.backends.tpu_vm.tpu import GcpTpuProvider

log = logging.getLogger(__name__)

# A node in one of these is (or is becoming) the pod: preferred over one that is going.
_UP = {
    HostState.READY,
    HostState.CREATING,
    HostState.STARTING,
    HostState.RESTARTING,
    HostState.REPAIRING,
}


class Whereabouts:
    """Where the pod's node is: the record of it, and the zones it may be in."""

    def __init__(
        self, record: PlaceRecord, zones: Sequence[str], *, queued_resource: str = ""
    ) -> None:
        self.record = record
        self.zones = tuple(zones)
        self.queued_resource = queued_resource  # its name, when the node comes from one
        self._zone = ""  # last zone written by (or read into) this process

    def first_zone(self, configured: str) -> str:
        """Where to look first: the recorded zone when it is one of ours, else ``configured``."""
        place = self.record.load()
        if place is not None and place.zone and place.zone in self.zones:
            self._zone = place.zone
            if place.zone != configured:
                log.info("%s: the place record says zone %s", self.record.pod, place.zone)
            return place.zone
        return configured

    def moved(self, zone: str) -> None:
        """The node is in ``zone`` now (created there, or found there)."""
        if zone and zone != self._zone:
            self._zone = zone
            self.record.save(zone=zone, queued_resource=self.queued_resource)

    def head(self, host: str, address: str) -> None:
        self.record.save(head_host=host, head_address=address)

    async def find(self, provider: GcpTpuProvider) -> tuple[str, tpu_v2.Node] | None:
        """The node in another configured zone than the provider's (one that is up first),
        or None when there is none. API errors count as "not there": the caller's own
        GetNode already said what it could."""
        found: list[tuple[str, tpu_v2.Node]] = []
        for zone in self.zones:
            if zone == provider.zone:
                continue
            name = f"projects/{provider.project}/locations/{zone}/nodes/{provider.node_name}"
            try:
                node = await provider.client.get_node(name=name, timeout=provider.call_timeout_s)
            except gexc.NotFound:
                continue
            except (gexc.GoogleAPIError, OSError) as exc:
                log.info("looking for %s in %s: %s", provider.node_name, zone, exc)
                continue
            found.append((zone, node))
        if not found:
            return None
        found.sort(key=lambda zn: tpu_v2.Node.State(zn[1].state).name not in _UP)
        return found[0]


def attach(provider: GcpTpuProvider, record: PlaceRecord) -> None:
    """Give ``provider`` the pod's place record: it starts from the recorded zone, writes
    every move, and looks in every configured zone when the node is not where it looks."""
    cap = provider.capacity
    zones = cap.zones if cap is not None else (provider.zone,)
    queued = cap.qr_id if cap is not None and cap.cfg.acquire == "queued-resource" else ""
    where = Whereabouts(record, zones, queued_resource=queued)
    provider.zone = where.first_zone(provider.zone)
    provider.whereabouts = where
