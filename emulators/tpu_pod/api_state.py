"""The TPU API's view of the world: nodes in zones, capacity, node lifecycle verbs.

Both front ends (gRPC ``tpu_api``, REST ``rest_api``) call this one object, so
they always agree. Node names follow the real API
(``projects/P/locations/ZONE/nodes/ID``); a zone's slices are numbered (slot)
and a node's addresses follow from zone and slot (see ``layout.host_ip``).
"""

from __future__ import annotations

import asyncio
import logging
import re
import secrets
import time
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any

import grpc
from google.cloud.location import locations_pb2
from google.cloud.tpu_v2.types import cloud_tpu

from emulators.tpu_pod import accelerators
from emulators.tpu_pod.accelerators import Shape
from emulators.tpu_pod.hosts import (
    CREATING,
    DELETED,
    DELETING,
    LIVE,
    PREEMPTED,
    STOPPED,
    Host,
    HostLifecycle,
    Runtime,
)
from emulators.tpu_pod.layout import MAX_SLOTS
from emulators.tpu_pod.nodes import Node, merge_authorized, parse_ssh_keys
from emulators.tpu_pod.operations import ApiError
from emulators.tpu_pod.zones import Capacity, stockout_message

if TYPE_CHECKING:
    from emulators.tpu_pod.chaos import Faults
    from emulators.tpu_pod.queued import QueuedResources

log = logging.getLogger("phantom.pod.api")

_NODE_ID = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")


class PodState:
    """Nodes, zones and the verbs on them; the backend of both API front ends."""

    def __init__(
        self, rt: Runtime, hosts: HostLifecycle, capacity: Capacity, faults: Faults
    ) -> None:
        self.rt = rt
        self.life = hosts
        self.capacity = capacity
        self.faults = faults
        self.project = rt.cfg.project
        self.nodes: dict[str, Node] = {}  # by full path; only nodes that exist
        self._by_ip: dict[str, tuple[Node, Host]] = {}  # host_by_ip's index ...
        self._by_ip_nodes: tuple[Node, ...] = ()  # ... of these nodes
        self.last: Node | None = None  # the pod's last node, shown once it is deleted
        self.queued: QueuedResources | None = None  # set by the daemon

    # --- lookups ------------------------------------------------------------------

    def zone_of(self, parent: str, allow_all: bool = True) -> str:
        """The zone of ``projects/P/locations/ZONE`` ("-" = every zone)."""
        m = re.fullmatch(r"projects/([^/]+)/locations/([^/]+)", parent)
        if m and m.group(1) == self.project:
            zone = m.group(2)
            if zone in self.capacity.zones or (allow_all and zone == "-"):
                return zone
        raise ApiError(
            grpc.StatusCode.NOT_FOUND,
            f"location {parent!r} not found; the emulator serves projects/{self.project}"
            f"/locations/{{{','.join(self.capacity.zones)}}}",
        )

    def node(self, name: str) -> Node:
        node = self.nodes.get(name)
        if node is None:
            self.zone_of(name.rsplit("/nodes/", 1)[0])
            raise ApiError(grpc.StatusCode.NOT_FOUND, f"node {name!r} not found")
        return node

    def used(self) -> dict[str, int]:
        out = dict.fromkeys(self.capacity.zones, 0)
        for node in self.nodes.values():
            out[node.zone.name] += 1
        return out

    def all_hosts(self) -> list[Host]:
        return [h for n in self.nodes.values() for h in n.hosts]

    def host_by_ip(self, ip: str) -> tuple[Node, Host] | None:
        """The first node's host with address ``ip``. Indexed once per set of nodes (a
        node's hosts and their addresses are fixed): every metadata request looks its host
        up, and a notice wakes every long-polling host at once."""
        nodes, known = tuple(self.nodes.values()), self._by_ip_nodes
        if len(nodes) != len(known) or any(a is not b for a, b in zip(nodes, known, strict=True)):
            index: dict[str, tuple[Node, Host]] = {}
            for node in self.nodes.values():
                for host in node.hosts:
                    for addr in host.ips:
                        index.setdefault(addr, (node, host))
            self._by_ip, self._by_ip_nodes = index, nodes
        return self._by_ip.get(ip)

    def metadata_tree(self, ip: str) -> dict[str, Any] | None:
        found = self.host_by_ip(ip)
        if found is None:
            return None
        node, host = found
        return node.metadata_tree(host, self.rt.metadata_port)

    def primary(self) -> Node | None:
        """The pod's node: the newest existing node named like the pod (in any zone),
        else the last such node, deleted (state NOT_FOUND, hosts DELETED)."""
        named = [n for n in self.nodes.values() if n.name == self.rt.cfg.node_name]
        if named:
            return max(named, key=lambda n: n.create_time)
        return self.last

    # --- API: reads -----------------------------------------------------------------

    async def gate(self) -> None:
        """Every API call passes here: the slow-api fault delays it."""
        delay = self.faults.api_delay()
        if delay > 0:
            await self.faults.hold(delay)

    def node_pb(self, node: Node) -> cloud_tpu.Node:
        stale = self.faults.stale_view(node.path)
        return stale if stale is not None else node.to_pb(self.rt.ssh_port)

    def list_nodes(self, parent: str) -> list[cloud_tpu.Node]:
        zone = self.zone_of(parent)
        shown = {p: self.node_pb(n) for p, n in self.nodes.items()}
        # A stale view still shows a node that is gone by now.
        for path, pb in self.faults.stale_views().items():
            shown.setdefault(path, pb)
        return [
            pb for path, pb in sorted(shown.items()) if zone == "-" or path.split("/")[3] == zone
        ]

    def get_node(self, name: str) -> cloud_tpu.Node:
        stale = self.faults.stale_view(name)
        if stale is not None:
            return stale
        return self.node_pb(self.node(name))

    def guest_attributes(
        self, name: str, query_path: str, worker_ids: list[str]
    ) -> list[cloud_tpu.GuestAttributes]:
        return self.node(name).guest_attributes(query_path, worker_ids)

    def locations(self, name: str) -> list[locations_pb2.Location]:
        if name != f"projects/{self.project}":
            raise ApiError(grpc.StatusCode.NOT_FOUND, f"project {name!r} not found")
        return [self.location(f"{name}/locations/{z}") for z in self.capacity.zones]

    def location(self, name: str) -> locations_pb2.Location:
        zone = self.zone_of(name, allow_all=False)
        return locations_pb2.Location(
            name=name, location_id=zone, display_name=f"{zone} (phantom emulator)"
        )

    # --- API: create and delete ------------------------------------------------------

    def create_node(
        self,
        parent: str,
        node_id: str,
        spec: cloud_tpu.Node,
        queued_resource: str = "",
        ignore_capacity: bool = False,
        hosts: int | None = None,
    ) -> tuple[str, Awaitable[cloud_tpu.Node]]:
        """Check, take a slice and start booting; (target name, awaitable READY node).

        A zone without a free slice fails the operation with RESOURCE_EXHAUSTED and
        the Cloud TPU API's message; no node is left behind. ``ignore_capacity``: the
        pod's first node, placed at start-up whatever the stockout schedule says.
        GCP-faithful: the type and runtime version are checked (INVALID_ARGUMENT), the
        host count follows from the type, a create beyond ``--quota`` is refused at once
        (RESOURCE_EXHAUSTED naming the quota), and a zone with no room for the type (its
        capacity taken, or a stockout window) fails the operation with the stockout, as
        the real API does. ``hosts``: the pod's first node, sized by ``--hosts``.
        """
        zone = self.zone_of(parent, allow_all=False)
        if not _NODE_ID.match(node_id):
            raise ApiError(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"node id {node_id!r}: use lowercase letters, digits and hyphens, "
                "starting with a letter (at most 63)",
            )
        target = f"{parent}/nodes/{node_id}"
        if target in self.nodes:
            raise ApiError(grpc.StatusCode.ALREADY_EXISTS, f"node {target!r} already exists")
        shape = self.shape_of(spec, zone)
        if self.rt.cfg.faithful and spec.runtime_version not in (
            "",
            *accelerators.RUNTIME_VERSIONS,
        ):
            raise ApiError(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"Cloud TPU received a bad request. runtime version {spec.runtime_version!r} "
                f"(field runtimeVersion) is not available in zone {zone}; "
                "see `gcloud compute tpus versions list`",
            )
        used = self.used()[zone]
        faithful = self.rt.cfg.faithful and shape is not None
        if not ignore_capacity and faithful and shape is not None:
            # The API admits the request against the project's quota first (a refusal at
            # once, HTTP 429); a zone's capacity is found out while provisioning (the
            # operation fails with the stockout).
            self._check_quota(zone, shape, _is_spot(spec), target)
        full = (
            self._no_room(zone, shape)
            if faithful and shape is not None
            else (self.capacity.free(zone, used) <= 0)
        )
        if not ignore_capacity and full:
            self.rt.event("stockout", zone=zone, node=target, used=used)
            return target, _fail(
                ApiError(grpc.StatusCode.RESOURCE_EXHAUSTED, stockout_message(zone))
            )
        node = self._new_node(zone, node_id, spec, queued_resource, shape, hosts)
        self._boot_all(node)
        self.rt.event("create", node=node.path, hosts=[h.name for h in node.hosts])
        return target, self._wait_created(node)

    def shape_of(self, spec: cloud_tpu.Node, zone: str) -> Shape | None:
        """The shape ``spec`` asks for (acceleratorType, else acceleratorConfig).

        Faithful: a type outside the table is refused with the API's INVALID_ARGUMENT,
        naming the accelerator type; default mode takes any string (None)."""
        name = spec.accelerator_type or (
            "" if "accelerator_config" in spec else self.rt.cfg.accelerator_type
        )
        try:
            if name:
                return accelerators.parse(name)
            config = spec.accelerator_config
            return accelerators.from_config(config.type_.name, config.topology)
        except ValueError:
            if not self.rt.cfg.faithful:
                return None
            shown = (
                name or f"{spec.accelerator_config.type_.name} {spec.accelerator_config.topology}"
            )
            raise ApiError(
                grpc.StatusCode.INVALID_ARGUMENT,
                accelerators.not_found_message(shown, zone, secrets.token_hex(8)),
            ) from None

    def quota_limit(self, zone: str, shape: Shape) -> int | None:
        """``--quota`` for the zone and family; None without one (no quota stands in the
        way: a zone that is full is out of capacity, a stockout, as on the real API)."""
        family = shape.generation.name
        for key in ((zone, family), ("", family)):
            if key in self.rt.cfg.quota:
                return self.rt.cfg.quota[key]
        return None

    def _no_room(self, zone: str, shape: Shape) -> bool:
        """Faithful capacity: a stockout window, or the zone's ``--capacity`` (in slices of
        the pod's own type, counted in the type's units, so four v4-8 fit where one v4-32
        does) taken by the nodes in it, a PREEMPTED one included until deleted."""
        if self.capacity.in_stockout(zone):
            return True
        try:
            own = accelerators.parse(self.rt.cfg.accelerator_type).units
        except ValueError:
            own = shape.units
        taken = sum(
            n.shape.units if n.shape is not None else own
            for n in self.nodes.values()
            if n.zone.name == zone
        )
        return taken + shape.units > self.capacity.zone(zone).capacity * own

    def _check_quota(self, zone: str, shape: Shape, spot: bool, target: str) -> None:
        used = sum(
            n.shape.units
            for n in self.nodes.values()
            if n.zone.name == zone
            and n.shape is not None
            and n.shape.generation is shape.generation
            and (n.spot or n.preemptible) == spot
        )
        limit = self.quota_limit(zone, shape)
        if limit is not None and used + shape.units > limit:
            metric = accelerators.quota_metric(shape, spot)
            self.rt.event("quota", zone=zone, node=target, metric=metric, used=used, limit=limit)
            raise ApiError(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                accelerators.quota_message(metric, limit, zone),
            )

    def _new_node(
        self,
        zone: str,
        node_id: str,
        spec: cloud_tpu.Node,
        queued_resource: str,
        shape: Shape | None,
        hosts: int | None,
    ) -> Node:
        z = self.capacity.zone(zone)
        taken = {n.slot for n in self.nodes.values() if n.zone.name == zone}
        slot = next((s for s in range(MAX_SLOTS) if s not in taken), None)
        if slot is None:
            raise ApiError(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"the emulator's address plan holds at most {MAX_SLOTS} nodes per zone",
            )
        faithful = self.rt.cfg.faithful
        external = faithful and bool(spec.network_config.enable_external_ips)
        if hosts is None:
            hosts = shape.hosts if faithful and shape is not None else self.rt.cfg.hosts
        sched = spec.scheduling_config
        node = Node.build(
            node_id,
            self.project,
            z,
            slot,
            hosts,
            external,
            accelerator_type=shape.type
            if shape is not None and faithful
            else (spec.accelerator_type or self.rt.cfg.accelerator_type),
            runtime_version=spec.runtime_version or "tpu-ubuntu2204-base",
            description=spec.description,
            labels=dict(spec.labels),
            metadata=dict(spec.metadata),
            # As sent in faithful mode; else, unless told otherwise, spot VMs.
            spot=bool(sched.spot) if faithful or "scheduling_config" in spec else True,
            preemptible=bool(sched.preemptible) if faithful else False,
            shape=shape,
            faithful=faithful,
            queued_resource=queued_resource,
        )
        if not faithful and "scheduling_config" in spec and sched.preemptible:
            node.spot = True  # default mode: any preemptible kind is a spot VM
        node.exists = True
        node.booting = True
        self.nodes[node.path] = node
        if node_id == self.rt.cfg.node_name:
            self.last = node
        return node

    def _boot_all(self, node: Node) -> None:
        authorized = merge_authorized(
            self.rt.base_authorized, parse_ssh_keys(node.metadata.get("ssh-keys", ""))
        )
        for host in node.hosts:
            self.life.boot(host, authorized)
        self.life.write_known_hosts(self.all_hosts())

    async def _wait_created(self, node: Node) -> cloud_tpu.Node:
        async with self.rt.changed:
            await self.rt.changed.wait_for(lambda: node.state() not in ("CREATING", "REPAIRING"))
        node.booting = False
        state = node.state()
        if state != "READY":
            raise ApiError(grpc.StatusCode.ABORTED, f"node became {state} while being created")
        return node.to_pb(self.rt.ssh_port)

    def delete_node(self, name: str) -> Awaitable[None]:
        node = self.node(name)
        if node.deleting:
            raise ApiError(grpc.StatusCode.FAILED_PRECONDITION, f"node {name!r} is being deleted")
        node.deleting = True
        return self._delete(node)

    async def _delete(self, node: Node) -> None:
        async with self.rt.lock:
            result = await self.life.kill(node.hosts, DELETING)
            self.rt.event("delete", node=node.path, hosts=[h.name for h in node.hosts], **result)
            await asyncio.sleep(self.rt.cfg.ready_delay / 2)
            for host in node.hosts:
                self.life.wipe(host)
                host.state = DELETED
                host.host_key = None
                if self.rt.metadata is not None:
                    await self.rt.metadata.remove(host.ip)
            node.exists = False
            node.deleting = False
            self.nodes.pop(node.path, None)
            self.life.write_known_hosts(self.all_hosts())
        await self.rt.notify()

    # --- stop and start ---------------------------------------------------------------

    def _check_power(self, node: Node, verb: str, want: str) -> None:
        # A pod slice cannot be stopped or started, only deleted (Cloud TPU docs,
        # "Manage TPU resources": stop/start is for single-host TPUs).
        if len(node.hosts) > 1:
            raise ApiError(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"Cloud TPU received a bad request. {verb} is not supported for TPU Pod "
                f"slices ({node.accelerator_type} has {len(node.hosts)} workers); "
                "delete the node instead",
            )
        state = node.state()
        if state != want:
            raise ApiError(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"Cloud TPU received a bad request. {verb} is not supported while in state {state}",
            )

    def stop_node(self, name: str) -> Awaitable[cloud_tpu.Node]:
        node = self.node(name)
        self._check_power(node, "stop", "READY")
        node.power = "STOPPING"
        return self._stop(node)

    async def _stop(self, node: Node) -> cloud_tpu.Node:
        async with self.rt.lock:
            result = await self.life.kill(node.hosts, STOPPED)
            node.power = "STOPPED"
            self.rt.event("stop", node=node.path, hosts=[h.name for h in node.hosts], **result)
        await self.rt.notify()
        return node.to_pb(self.rt.ssh_port)

    def start_node(self, name: str) -> Awaitable[cloud_tpu.Node]:
        node = self.node(name)
        self._check_power(node, "start", "STOPPED")
        node.power = "STARTING"
        for host in node.hosts:
            self.life.boot(host, host.authorized, fresh=False)
        self.rt.event("start", node=node.path, hosts=[h.name for h in node.hosts])
        return self._started(node)

    async def _started(self, node: Node) -> cloud_tpu.Node:
        async with self.rt.changed:
            await self.rt.changed.wait_for(
                lambda: not node.exists or all(h.state != CREATING for h in node.hosts)
            )
        if node.power == "STARTING":
            node.power = ""
        return node.to_pb(self.rt.ssh_port)

    # --- chaos verbs (control channel) --------------------------------------------

    async def preempt(
        self, node: Node, hosts: list[Host], grace: float, source: str
    ) -> dict[str, Any]:
        """Take ``hosts`` away as a spot reclaim does; with ``grace`` > 0 give notice first.

        Notice: metadata ``instance/preempted`` turns TRUE, SSH stops accepting, every
        process gets SIGTERM; after ``grace`` seconds (or once all have exited) the rest
        is SIGKILLed and the API says PREEMPTED.
        """
        live = [h for h in hosts if h.state in LIVE]
        if not live:
            return {}
        # A host deleted or recreated meanwhile (its grace, or a wait for the lock) is a new
        # VM: no longer ours to kill. Checked under the lock: a recreate holds it while it
        # kills the old VM's processes, before the new generation exists.
        generations = {h.key: h.generation for h in live}
        if grace > 0:
            self.life.give_notice(live)
            self.rt.event(
                "preempt_notice",
                node=node.path,
                hosts=[h.name for h in live],
                grace_s=grace,
                source=source,
            )
            await self.rt.notify(live)  # their instance/preempted turned TRUE
            notice = await self.life.terminate(live, grace)
        else:
            notice = {}
        async with self.rt.lock:
            live = [h for h in live if h.generation == generations[h.key] and h.state in LIVE]
            if not live:
                return notice
            now = time.time()
            for h in live:
                h.preempted_at = now
            result = await self.life.kill(live, PREEMPTED)
            self.rt.event(
                "preempt",
                node=node.path,
                hosts=[h.name for h in live],
                source=source,
                **result,
                **({"notice": notice} if grace > 0 else {}),
            )
        await self.rt.notify(live)  # no other host's metadata changed
        return {**result, **notice}

    async def recreate(self, node: Node, hosts: list[Host]) -> None:
        """Per-host recreate (default mode only: GCP has no such verb)."""
        async with self.rt.lock:
            if not node.exists or node.deleting:
                raise ApiError(
                    grpc.StatusCode.FAILED_PRECONDITION,
                    f"node {node.name} does not exist; create it first (CreateNode)",
                )
            await self.life.kill(hosts, CREATING)
            authorized = next(iter(hosts)).authorized if hosts else {}
            for host in hosts:
                self.life.boot(host, authorized)
            self.life.write_known_hosts(self.all_hosts())
            self.rt.event("recreate", node=node.path, hosts=[h.name for h in hosts])
        await self.rt.notify()

    async def replace(self, node: Node) -> None:
        """Delete + Create of the whole node in its zone (faithful ``recreate all``)."""
        spec = node.to_pb(self.rt.ssh_port)
        await self.delete_node(node.path)
        _, created = self.create_node(node.parent, node.name, spec, node.queued_resource)
        self.rt.spawn(_quiet(created))


def _is_spot(spec: cloud_tpu.Node) -> bool:
    return bool(spec.scheduling_config.spot or spec.scheduling_config.preemptible)


async def _fail(exc: Exception) -> Any:
    raise exc


async def _quiet(aw: Awaitable[Any]) -> None:
    try:
        await aw
    except ApiError as exc:
        log.warning("%s", exc)
