"""Getting a preempted slice back: stockouts, zone failover and queued resources.

On a real spot pod the recreate is the hard part: the zone may have no capacity
(RESOURCE_EXHAUSTED, "There is no more capacity in the zone ..."), a PREEMPTED node holds
its zone's quota until deleted, and a retry after a half-failed create can leak a second
node. So ``Capacity.reacquire``:

* deletes the lost node first (frees the quota), wherever it is;
* lists every configured zone before every create: a node of ours that is up (an earlier
  try that worked after all) is adopted, one that is not is deleted, so two nodes never
  exist for one pod;
* on a stockout, tries again by the ``[capacity]`` strategy: ``eager-failover`` tries the
  other zones at once (the preempted zone last), then waits; ``same-zone`` retries the zone
  ``zone_retries`` times with backoff before moving on; ``risk-aware`` tries them as
  eager-failover does, but calmest first by the journal's preemption rates
  (``ledger.rates.risk_order``), and reports the order with its reason (``on_order``);
* with ``acquire = "queued-resource"``: resets the SUSPENDED queued resource in its zone,
  or deletes it and queues a new one in the next zone, and waits for ACTIVE.

Every try is reported to ``on_attempt`` (the backend journals it and shows "waiting for
capacity in ZONE (attempt N, next try in S s)" on the recovery step). The provider's zone
follows the slice, so the rest of the loop (endpoints, host keys, Ray, tunnel, jobs) runs
against the new zone's VMs.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from google.api_core import exceptions as gexc
from google.cloud import tpu_v2
from google.rpc import code_pb2

from console.config import CapacityConfig
from console.services.errors import BackendError
from console.services.ledger.rates import RiskOrder, ZoneRate, risk_order
from console.services.model import HostState

if TYPE_CHECKING:
    from console.services.backends.tpu_vm.tpu import GcpTpuProvider

log = logging.getLogger(__name__)

# A node in one of these states is (or is becoming) the pod: adopt it, never create another.
UP_STATES = {
    HostState.READY,
    HostState.CREATING,
    HostState.STARTING,
    HostState.RESTARTING,
    HostState.REPAIRING,
}
_QR = tpu_v2.QueuedResourceState.State
_STOCKOUT_WORDS = ("no more capacity", "resource_exhausted", "resource pool exhausted")


@dataclass(frozen=True)
class Attempt:
    """One try to get the slice: where, the how-many-th, and what came of it."""

    zone: str
    attempt: int
    ok: bool
    reason: str
    next_zone: str = ""
    next_try_s: float = 0.0

    @property
    def text(self) -> str:
        if self.ok:
            return f"got the slice in {self.zone} (attempt {self.attempt})"
        if self.next_try_s > 0:
            return (
                f"waiting for capacity in {self.next_zone} (attempt {self.attempt}, next try "
                f"in {self.next_try_s:.0f} s): {self.zone}: {self.reason}"
            )
        return f"no capacity in {self.zone} (attempt {self.attempt}: {self.reason}); trying {self.next_zone} now"

    def to_json(self) -> dict[str, Any]:
        return {
            "zone": self.zone,
            "attempt": self.attempt,
            "ok": self.ok,
            "reason": self.reason,
            "next_zone": self.next_zone,
            "next_try_s": round(self.next_try_s, 1),
        }


class CapacityError(BackendError):
    """The slice could not be had within ``timeout_s`` (or the API refused for good)."""


def is_stockout(exc: BaseException) -> bool:
    """RESOURCE_EXHAUSTED however it arrives: a direct call's ResourceExhausted, or an
    operation's error (api_core raises a plain GoogleAPICallError carrying the rpc Status)."""
    if isinstance(exc, gexc.ResourceExhausted):
        return True
    if isinstance(exc, gexc.GoogleAPICallError):
        for err in exc.errors or ():
            if getattr(err, "code", None) == code_pb2.RESOURCE_EXHAUSTED:
                return True
    return any(w in str(exc).lower() for w in _STOCKOUT_WORDS)


def schedule(cfg: CapacityConfig, zones: tuple[str, ...], lost: str) -> Iterator[tuple[str, bool]]:
    """Endless (zone, wait_after_failure) tries by the strategy, starting from the zone the
    slice was lost in. A wait comes after the last try of a round; moving zones is at once."""
    rest = [z for z in zones if z != lost]
    if cfg.failover in ("eager-failover", "risk-aware"):
        # risk-aware: ``zones`` come ranked already (``risk_order``), the lost one included
        if cfg.failover == "risk-aware":
            order = list(zones)
        else:
            order = [*rest, lost] if lost in zones else list(zones)
        while True:
            for i, zone in enumerate(order):
                yield zone, i == len(order) - 1
    else:
        order = [lost, *rest] if lost in zones else list(zones)
        while True:
            for zone in order:
                for i in range(cfg.zone_retries):
                    yield zone, i < cfg.zone_retries - 1 or len(order) == 1 or zone == order[-1]


def _no_rates(zones: tuple[str, ...], hosts: int) -> Mapping[str, ZoneRate]:
    return {}


@dataclass(frozen=True)
class CapacityHooks:
    """Who hears what the loop does, and where risk-aware gets its rates (the console's
    journal, given by the wiring when it builds the provider)."""

    on_attempt: Callable[[Attempt], None] = lambda _a: None
    on_order: Callable[[RiskOrder], None] = lambda _o: None
    # The preemption rates per zone, for the configured zones and the slice's host count
    # (0 when not known yet).
    risk: Callable[[tuple[str, ...], int], Mapping[str, ZoneRate]] = _no_rates


class Capacity:
    def __init__(
        self,
        provider: GcpTpuProvider,
        cfg: CapacityConfig,
        *,
        hooks: CapacityHooks = CapacityHooks(),
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.provider = provider
        self.cfg = cfg
        self.zones: tuple[str, ...] = cfg.zones or (provider.zone,)
        self.on_attempt = hooks.on_attempt
        self.risk = hooks.risk
        self.on_order = hooks.on_order
        self._sleep = sleep
        self._clock = clock
        self.attempts: list[Attempt] = []  # of the last reacquire

    @property
    def qr_id(self) -> str:
        return self.cfg.queued_resource or f"{self.provider.node_name}-qr"

    def _parent(self, zone: str) -> str:
        return f"projects/{self.provider.project}/locations/{zone}"

    def _node_path(self, zone: str) -> str:
        return f"{self._parent(zone)}/nodes/{self.provider.node_name}"

    def _qr_path(self, zone: str) -> str:
        return f"{self._parent(zone)}/queuedResources/{self.qr_id}"

    # -- the loop ---------------------------------------------------------------------------
    async def reacquire(self, spec: tpu_v2.Node) -> str:
        """Get the slice back by the strategy; returns its zone (also set on the provider)."""
        self.attempts = []
        lost = self.provider.zone
        start = self._clock()
        if self.cfg.acquire == "node":
            await self._delete_node(lost)  # the node being replaced: frees its quota
        queued = self.cfg.acquire == "queued-resource"
        waits = 0
        tries = schedule(self.cfg, await self.order(lost), lost)
        zone, wait_after = next(tries)
        n = 0
        while True:
            n += 1
            backoff = min(self.cfg.backoff_max_s, self.cfg.backoff_s * 2**waits)
            if queued:  # a queued resource waits in the queue: the wait is the try itself
                waits += 1
                reason = await self._try_queued(zone, spec, n, backoff)
            else:
                reason = await self._try_node(zone, spec)
            if reason is None:
                self._report(Attempt(self.provider.zone, n, True, "ok"))
                return self.provider.zone
            next_zone, next_wait = next(tries)
            delay = 0.0
            if wait_after and not queued:
                delay, waits = backoff, waits + 1
            spent = self._clock() - start
            if spent + delay > self.cfg.timeout_s:
                self._report(Attempt(zone, n, False, reason))
                raise CapacityError(
                    f"no capacity for {self.provider.node_name} in {', '.join(self.zones)} "
                    f"after {n} attempt(s) over {spent:.0f}s (last: {zone}: {reason}); "
                    "raise capacity.timeout_s or add zones to capacity.zones"
                )
            self._report(Attempt(zone, n, False, reason, next_zone, delay))
            if delay:
                await self._sleep(delay)
            zone, wait_after = next_zone, next_wait

    async def order(self, lost: str) -> tuple[str, ...]:
        """The zones in the order the strategy tries them from; risk-aware ranks them by the
        rates (reported with its reason), or keeps eager-failover's order when the rates
        cannot be had (a journal that fails must not stop getting the slice back)."""
        if self.cfg.failover != "risk-aware":
            return self.zones
        last = self.provider.last
        hosts = len(last.endpoints) if last is not None and last.endpoints else 0
        try:
            rates = await asyncio.to_thread(self.risk, self.zones, hosts)  # a journal read
        except Exception:
            log.exception("capacity: no preemption rates; zones in configured order")
            rates = {}
        chosen = risk_order(self.zones, lost, rates)
        log.info("capacity: %s", chosen.reason)
        try:
            self.on_order(chosen)
        except Exception:
            log.exception("capacity order callback failed")
        return chosen.zones

    def _report(self, attempt: Attempt) -> None:
        self.attempts.append(attempt)
        log.info("capacity: %s", attempt.text)
        try:
            self.on_attempt(attempt)
        except Exception:
            log.exception("capacity attempt callback failed")

    async def _try_node(self, zone: str, spec: tpu_v2.Node) -> str | None:
        """One CreateNode in ``zone``: None when the slice is ours, else why it is not."""
        up = await self._delete_nodes(keep_up=True)
        if up is not None:  # an earlier try got it after all: that one is the pod
            self.provider.zone = up
            return None
        try:
            op = await self.provider.client.create_node(
                parent=self._parent(zone),
                node=spec,
                node_id=self.provider.node_name,
                timeout=self.provider.call_timeout_s,
            )
            await op.result(timeout=max(self.provider.call_timeout_s, 600.0))
        except (TimeoutError, gexc.GoogleAPIError, OSError) as exc:
            if is_stockout(exc):
                return api_error_text(exc)
            if isinstance(exc, gexc.InvalidArgument | gexc.PermissionDenied | gexc.NotFound):
                raise CapacityError(
                    f"CreateNode in {zone} refused: {api_error_text(exc)}"
                ) from None
            return api_error_text(exc)  # transient (unavailable, deadline): try again
        self.provider.zone = zone
        return None

    async def _delete_nodes(self, *, keep_up: bool) -> str | None:
        """List every zone for our node; delete the ones not up (all when not ``keep_up``).
        Returns the zone of one that is up when ``keep_up``."""
        found = await self._find_nodes()
        up = [z for z, state in found if keep_up and state in UP_STATES]
        for zone, state in found:
            if up and zone == up[0]:
                continue
            log.info("deleting %s (%s) before creating the slice", self._node_path(zone), state)
            await self._delete_node(zone)
        return up[0] if up else None

    async def _find_nodes(self) -> list[tuple[str, str]]:
        found = []
        for zone in self.zones:
            try:
                node = await self.provider.client.get_node(
                    name=self._node_path(zone), timeout=self.provider.call_timeout_s
                )
            except gexc.NotFound:
                continue
            except (gexc.GoogleAPIError, OSError) as exc:
                raise CapacityError(f"cannot list {zone}: {api_error_text(exc)}") from None
            found.append((zone, tpu_v2.Node.State(node.state).name))
        return found

    async def _delete_node(self, zone: str) -> None:
        try:
            op = await self.provider.client.delete_node(
                name=self._node_path(zone), timeout=self.provider.call_timeout_s
            )
            await op.result(timeout=max(self.provider.call_timeout_s, 600.0))
        except gexc.NotFound:
            return
        except (TimeoutError, gexc.GoogleAPIError, OSError) as exc:
            raise CapacityError(f"DeleteNode in {zone}: {api_error_text(exc)}") from None

    # -- queued resources -------------------------------------------------------------------
    async def _try_queued(self, zone: str, spec: tpu_v2.Node, n: int, wait_s: float) -> str | None:
        """Reset the queued resource where it is, or move it to ``zone`` (delete, create);
        then wait up to ``wait_s`` for ACTIVE: it keeps its place in the queue meanwhile."""
        client = self.provider.client
        mine = dict(await self._find_queued())
        for z in [z for z in mine if z != zone]:  # leaving: the old one and its node go
            await self._delete_queued(z)
        state = mine.get(zone)
        try:
            if state in (_QR.SUSPENDED, _QR.FAILED):
                await (await client.reset_queued_resource(name=self._qr_path(zone))).result()
            elif state is None:
                await self._delete_nodes(keep_up=False)  # a bare node of ours holds the name
                op = await client.create_queued_resource(
                    parent=self._parent(zone),
                    queued_resource_id=self.qr_id,
                    queued_resource=self.queued_request(zone, spec),
                )
                await op.result()
        except (gexc.GoogleAPIError, OSError) as exc:
            if isinstance(exc, gexc.InvalidArgument | gexc.PermissionDenied):
                raise CapacityError(f"queued resource in {zone}: {api_error_text(exc)}") from None
            return api_error_text(exc)
        self.provider.zone = zone
        deadline = self._clock() + wait_s
        waiting = False
        while True:
            state = dict(await self._find_queued()).get(zone)
            if state is _QR.ACTIVE:
                return None
            if state in (None, _QR.FAILED, _QR.SUSPENDED):
                return f"queued resource {state.name if state is not None else 'gone'}"
            if self._clock() >= deadline:
                return f"queued resource still {state.name} after {wait_s:.0f}s"
            if state is _QR.WAITING_FOR_RESOURCES and not waiting:
                waiting = True
                self._report(Attempt(zone, n, False, f"queued ({state.name})", zone, wait_s))
            await self._sleep(min(1.0, self.provider.poll_interval_s))

    def queued_request(self, zone: str, spec: tpu_v2.Node) -> tpu_v2.QueuedResource:
        node_spec = tpu_v2.QueuedResource.Tpu.NodeSpec(
            parent=self._parent(zone), node_id=self.provider.node_name, node=spec
        )
        return tpu_v2.QueuedResource(
            tpu=tpu_v2.QueuedResource.Tpu(node_spec=[node_spec]),
            spot=tpu_v2.QueuedResource.Spot(),
        )

    async def _find_queued(self) -> list[tuple[str, tpu_v2.QueuedResourceState.State]]:
        found = []
        for zone in self.zones:
            try:
                qr = await self.provider.client.get_queued_resource(
                    name=self._qr_path(zone), timeout=self.provider.call_timeout_s
                )
            except gexc.NotFound:
                continue
            except (gexc.GoogleAPIError, OSError) as exc:
                raise CapacityError(
                    f"cannot list queued resources in {zone}: {api_error_text(exc)}"
                ) from None
            found.append((zone, _QR(qr.state.state)))
        return found

    async def _delete_queued(self, zone: str) -> None:
        try:
            op = await self.provider.client.delete_queued_resource(
                request={"name": self._qr_path(zone), "force": True}
            )
            await op.result(timeout=max(self.provider.call_timeout_s, 600.0))
        except gexc.NotFound:
            return
        except (TimeoutError, gexc.GoogleAPIError, OSError) as exc:
            raise CapacityError(f"DeleteQueuedResource in {zone}: {api_error_text(exc)}") from None


def api_error_text(exc: BaseException) -> str:
    """One line of what the API said. Not ``str(exc)``: an operation's error is a plain
    GoogleAPICallError whose str() begins with its code, which is None, and then repeats the
    message inside the rpc Status it carries ("None There is no more capacity ... [8: ...]")."""
    msg = exc.message if isinstance(exc, gexc.GoogleAPICallError) else str(exc)
    text = str(msg).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:300]


def api_error_code(exc: BaseException) -> str:
    """The gRPC code's name ("RESOURCE_EXHAUSTED"), for an operation's error too (from its
    rpc Status); "" when the error has none."""
    grpc_code = getattr(exc, "grpc_status_code", None)
    if grpc_code is not None:
        return str(getattr(grpc_code, "name", grpc_code))
    for err in getattr(exc, "errors", None) or ():
        code = getattr(err, "code", None)
        if isinstance(code, int) and code in code_pb2.Code.values():
            return str(code_pb2.Code.Name(code))
    return ""
