"""Queued resources (``tpu_v2.QueuedResource``): ask for a slice, get it when there is room.

States as on GCP: CREATING -> ACCEPTED -> WAITING_FOR_RESOURCES (no free slice in
the zone, or before ``valid_after``) -> PROVISIONING (its node is CREATING) ->
ACTIVE (node READY). A preempted node turns its queued resource SUSPENDING (the
service deletes the node) then SUSPENDED; a node deleted by the user does the
same with initiator USER. ``reset`` puts a SUSPENDED or FAILED one back in the
queue; ``valid_until`` passing while it waits makes it FAILED. Delete refuses a
queued resource whose node still exists unless ``force`` (then the node goes first).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from dataclasses import dataclass, field
from typing import Any

import grpc
from google.cloud.tpu_v2.types import cloud_tpu
from google.rpc import status_pb2

from emulators.tpu_pod.api_state import PodState
from emulators.tpu_pod.operations import ApiError, timestamp

log = logging.getLogger("phantom.pod.qr")

State = cloud_tpu.QueuedResourceState.State
Initiator = cloud_tpu.QueuedResourceState.StateInitiator
_ID = re.compile(r"^[A-Za-z0-9_.~+%-]{1,63}$")
TICK_S = 0.2
_S = cloud_tpu.QueuedResourceState
# Which oneof member of QueuedResourceState goes with each state.
_DATA: dict[int, tuple[str, type]] = {
    State.CREATING: ("creating_data", _S.CreatingData),
    State.ACCEPTED: ("accepted_data", _S.AcceptedData),
    State.PROVISIONING: ("provisioning_data", _S.ProvisioningData),
    State.DELETING: ("deleting_data", _S.DeletingData),
    State.ACTIVE: ("active_data", _S.ActiveData),
    State.SUSPENDING: ("suspending_data", _S.SuspendingData),
    State.SUSPENDED: ("suspended_data", _S.SuspendedData),
}


@dataclass
class Queued:
    name: str
    parent: str
    zone: str
    node_id: str
    node_spec: cloud_tpu.Node
    request: cloud_tpu.QueuedResource
    state: int = State.CREATING  # a QueuedResourceState.State value
    initiator: int = Initiator.STATE_INITIATOR_UNSPECIFIED
    error: tuple[int, str] | None = None
    create_time: float = field(default_factory=time.time)
    valid_after: float | None = None  # epoch seconds
    valid_until: float | None = None

    @property
    def node_path(self) -> str:
        return f"{self.parent}/nodes/{self.node_id}"


def _window(qr: cloud_tpu.QueuedResource, created: float) -> tuple[float | None, float | None]:
    policy = qr.queueing_policy
    after = until = None
    if "valid_after_duration" in policy:
        after = created + policy.valid_after_duration.total_seconds()
    if "valid_after_time" in policy:
        after = policy.valid_after_time.timestamp()
    if "valid_until_duration" in policy:
        until = created + policy.valid_until_duration.total_seconds()
    if "valid_until_time" in policy:
        until = policy.valid_until_time.timestamp()
    if "valid_interval" in policy:
        after = policy.valid_interval.start_time.timestamp()
        until = policy.valid_interval.end_time.timestamp()
    return after, until


class QueuedResources:
    def __init__(self, pod: PodState) -> None:
        self.pod = pod
        self.items: dict[str, Queued] = {}
        self._busy: set[str] = set()  # names with a node create/delete under way

    # --- API ------------------------------------------------------------------------

    def get(self, name: str) -> Queued:
        item = self.items.get(name)
        if item is None:
            self.pod.zone_of(name.rsplit("/queuedResources/", 1)[0])
            raise ApiError(grpc.StatusCode.NOT_FOUND, f"queued resource {name!r} not found")
        return item

    def list_pb(self, parent: str) -> list[cloud_tpu.QueuedResource]:
        zone = self.pod.zone_of(parent)
        return [self.to_pb(q) for q in self.items.values() if zone in ("-", q.zone)]

    def create(self, parent: str, qr_id: str, qr: cloud_tpu.QueuedResource) -> tuple[str, Any]:
        zone = self.pod.zone_of(parent, allow_all=False)
        if not _ID.match(qr_id):
            raise ApiError(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"queued resource id {qr_id!r}: use 1-63 of A-Za-z0-9_.~+%-",
            )
        name = f"{parent}/queuedResources/{qr_id}"
        if name in self.items:
            raise ApiError(
                grpc.StatusCode.ALREADY_EXISTS, f"queued resource {name!r} already exists"
            )
        specs = list(qr.tpu.node_spec)
        if len(specs) != 1 or not specs[0].node_id:
            raise ApiError(
                grpc.StatusCode.INVALID_ARGUMENT,
                "queued resource: give exactly one tpu.node_spec with a node_id "
                "(the emulator provisions one node per queued resource; no multislice)",
            )
        spec = specs[0]
        if spec.parent and spec.parent != parent:
            raise ApiError(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"tpu.node_spec[0].parent {spec.parent!r} must be {parent!r}",
            )
        item = Queued(name, parent, zone, spec.node_id, spec.node, qr)
        item.valid_after, item.valid_until = _window(qr, item.create_time)
        self.items[name] = item
        self.pod.rt.event("queued_resource", name=name, state="CREATING")
        return name, self._created(item)

    async def _created(self, item: Queued) -> cloud_tpu.QueuedResource:
        # The operation ends once the request is queued, not once it is fulfilled.
        # States advance on the simulation's tick: look again at the tick's pace.
        while item.state == State.CREATING and item.name in self.items:  # noqa: ASYNC110
            await asyncio.sleep(TICK_S / 2)
        return self.to_pb(item)

    def delete(self, name: str, force: bool) -> Any:
        item = self.get(name)
        node = self.pod.nodes.get(item.node_path)
        if node is not None and not force and node.queued_resource == name:
            raise ApiError(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"queued resource {name!r} is {State(item.state).name} with node {node.path!r}: "
                "delete the node first, or delete with force",
            )
        self._set(item, State.DELETING, Initiator.USER)
        return self._delete(item)

    async def _delete(self, item: Queued) -> None:
        node = self.pod.nodes.get(item.node_path)
        if node is not None and node.queued_resource == item.name and not node.deleting:
            await self.pod.delete_node(node.path)
        while item.node_path in self.pod.nodes and self._owns(item):  # noqa: ASYNC110
            await asyncio.sleep(TICK_S)
        self.items.pop(item.name, None)
        self.pod.rt.event("queued_resource", name=item.name, state="DELETED")
        await self.pod.rt.notify()

    def reset(self, name: str) -> Any:
        item = self.get(name)
        if item.state not in (State.SUSPENDED, State.FAILED):
            raise ApiError(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"queued resource {name!r} is {State(item.state).name}; only a SUSPENDED or FAILED "
                "one can be reset",
            )
        item.error = None
        item.create_time = time.time()
        item.valid_after, item.valid_until = _window(item.request, item.create_time)
        self._set(item, State.ACCEPTED, Initiator.USER)
        return self._created(item)

    # --- the queue ----------------------------------------------------------------------

    def _owns(self, item: Queued) -> bool:
        node = self.pod.nodes.get(item.node_path)
        return node is not None and node.queued_resource == item.name

    def _set(self, item: Queued, state: int, initiator: int | None = None) -> None:
        if item.state == state:
            return
        item.state = state
        if initiator is not None:
            item.initiator = initiator
        self.pod.rt.event("queued_resource", name=item.name, state=State(state).name)

    async def run(self) -> None:
        """Advance every queued resource, on each change and at least every tick."""
        rt = self.pod.rt
        while True:
            changed = False
            for item in list(self.items.values()):
                changed |= self._step(item)
            if changed:
                await rt.notify()
            async with rt.changed:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(rt.changed.wait(), TICK_S)

    def _step(self, item: Queued) -> bool:
        before = item.state
        now = time.time()
        node = self.pod.nodes.get(item.node_path) if self._owns(item) else None
        if item.state == State.CREATING:
            self._set(item, State.ACCEPTED)
        elif item.state == State.ACCEPTED:
            self._set(item, State.WAITING_FOR_RESOURCES)
        elif item.state == State.WAITING_FOR_RESOURCES:
            self._try_provision(item, now)
        elif item.state == State.PROVISIONING:
            if node is None:
                self._fail(item, grpc.StatusCode.ABORTED, "the node went away while provisioning")
            elif node.state() == "READY":
                self._set(item, State.ACTIVE)
            elif node.state() == "PREEMPTED":
                self._suspend(item, Initiator.SERVICE)
        elif item.state == State.ACTIVE:
            if node is None or node.deleting:
                self._set(
                    item, State.SUSPENDED if node is None else State.SUSPENDING, Initiator.USER
                )
            elif node.state() == "PREEMPTED":
                self._suspend(item, Initiator.SERVICE)
        elif item.state == State.SUSPENDING and node is None:
            self._set(item, State.SUSPENDED)
        return item.state != before

    def _try_provision(self, item: Queued, now: float) -> None:
        if item.valid_until is not None and now >= item.valid_until:
            self._fail(
                item,
                grpc.StatusCode.DEADLINE_EXCEEDED,
                f"no capacity in {item.zone} before the queued resource's valid-until time",
            )
            return
        if item.valid_after is not None and now < item.valid_after:
            return
        if item.node_path in self.pod.nodes:
            return  # a node of that name (not ours) holds the name: wait for it to go
        if self.pod.capacity.free(item.zone, self.pod.used()[item.zone]) <= 0:
            return
        spec = item.node_spec
        if "spot" in item.request and "scheduling_config" not in spec:
            # A spot queued resource's node is a spot VM (its node_spec need not say so).
            spec = cloud_tpu.Node.wrap(cloud_tpu.Node.pb(spec).__deepcopy__())
            spec.scheduling_config = cloud_tpu.SchedulingConfig(spot=True)
        try:
            _, created = self.pod.create_node(
                item.parent, item.node_id, spec, queued_resource=item.name
            )
        except ApiError as exc:
            self._fail(item, exc.code, str(exc))
            return
        self._set(item, State.PROVISIONING)
        self.pod.rt.spawn(_swallow(created))

    def _suspend(self, item: Queued, initiator: int) -> None:
        """The service takes the preempted node away (SUSPENDING, then SUSPENDED)."""
        self._set(item, State.SUSPENDING, initiator)
        node = self.pod.nodes.get(item.node_path)
        if node is not None and not node.deleting:
            self.pod.rt.spawn(_swallow(self.pod.delete_node(node.path)))

    def _fail(self, item: Queued, code: grpc.StatusCode, message: str) -> None:
        item.error = (code.value[0], message)
        self._set(item, State.FAILED, Initiator.SERVICE)

    # --- views ------------------------------------------------------------------------

    def to_pb(self, item: Queued) -> cloud_tpu.QueuedResource:
        state = cloud_tpu.QueuedResourceState(state=item.state, state_initiator=item.initiator)
        if item.state == State.FAILED:
            code, message = item.error or (grpc.StatusCode.UNKNOWN.value[0], "")
            state.failed_data = _S.FailedData(error=status_pb2.Status(code=code, message=message))
        elif item.state in _DATA:
            member, data_cls = _DATA[item.state]
            setattr(state, member, data_cls())
        spec = cloud_tpu.QueuedResource.Tpu.NodeSpec(
            parent=item.parent, node_id=item.node_id, node=item.node_spec
        )
        return cloud_tpu.QueuedResource(
            name=item.name,
            create_time=timestamp(item.create_time),
            tpu=cloud_tpu.QueuedResource.Tpu(node_spec=[spec]),
            spot=item.request.spot if "spot" in item.request else None,
            guaranteed=item.request.guaranteed if "guaranteed" in item.request else None,
            queueing_policy=item.request.queueing_policy,
            state=state,
            reservation_name=item.request.reservation_name,
        )

    def status(self) -> list[dict[str, Any]]:
        return [
            {
                "name": q.name,
                "zone": q.zone,
                "state": State(q.state).name,
                "initiator": Initiator(q.initiator).name,
                "node": q.node_path if self._owns(q) else "",
                **({"error": q.error[1]} if q.error else {}),
            }
            for q in self.items.values()
        ]


async def _swallow(aw: Any) -> None:
    try:
        await aw
    except ApiError as exc:
        log.info("queued resource node: %s", exc)
