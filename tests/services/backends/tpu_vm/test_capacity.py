"""Getting the slice back (issue 16): the capacity loop against the emulator's TPU API.

Google's TPU client on the emulator's loopback endpoint, zones local-a/b/c with one slice
each, stockouts set at run time. A watcher lists every zone throughout each recovery: two
nodes (or two queued resources) of one pod must never exist at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from google.api_core import exceptions as gexc
from google.cloud import tpu_v2

from console.config import CapacityConfig
from console.services.backends.tpu_vm.capacity import (
    Attempt,
    Capacity,
    is_stockout,
    schedule,
)
from console.services.backends.tpu_vm.tpu import GcpTpuProvider, local_client
from console.services.ledger.rates import RiskOrder, journal_rates, order_event, rates_by_zone
from console.services.model import Event, EventKind
from console.services.record.journal import Journal
from emulators.tpu_pod import client
from emulators.tpu_pod.client import PodInfo
from tests.support.emulator_helpers import running_pod
from tests.support.waiting import until

ZONES = ("local-a", "local-b", "local-c")


def first(
    cfg: CapacityConfig, lost: str, n: int, zones: tuple[str, ...] = ZONES
) -> list[tuple[str, bool]]:
    it = schedule(cfg, zones, lost)
    return [next(it) for _ in range(n)]


def test_eager_failover_tries_the_other_zones_first_and_waits_after_a_round() -> None:
    cfg = CapacityConfig(zones=ZONES, failover="eager-failover")
    assert first(cfg, "local-a", 4) == [
        ("local-b", False), ("local-c", False), ("local-a", True), ("local-b", False),
    ]  # fmt: skip


def test_same_zone_retries_then_moves_on() -> None:
    cfg = CapacityConfig(zones=ZONES, failover="same-zone", zone_retries=2)
    assert first(cfg, "local-b", 6) == [
        ("local-b", True), ("local-b", False), ("local-a", True), ("local-a", False),
        ("local-c", True), ("local-c", True),
    ]  # fmt: skip
    one = CapacityConfig(failover="same-zone", zone_retries=2)
    assert first(one, "z", 3, zones=("z",)) == [("z", True)] * 3


def test_risk_aware_takes_the_ranked_zones_as_they_come() -> None:
    """The zones come ranked (``Capacity.order``): tried in that order, the lost one where
    its rate put it, a wait after each round."""
    cfg = CapacityConfig(zones=ZONES, failover="risk-aware")
    ranked = ("local-c", "local-a", "local-b")
    assert first(cfg, "local-a", 4, zones=ranked) == [
        ("local-c", False), ("local-a", False), ("local-b", True), ("local-c", False),
    ]  # fmt: skip


def test_stockout_shapes() -> None:
    assert is_stockout(gexc.ResourceExhausted("quota"))
    assert is_stockout(RuntimeError('There is no more capacity in the zone "x"'))
    assert not is_stockout(gexc.PermissionDenied("no"))


@pytest.fixture
def zoned(tmp_path: Path) -> Iterator[PodInfo]:
    with running_pod(tmp_path / "pod", faithful=True) as info:
        yield info


def provider(pod: PodInfo, **cap: object) -> GcpTpuProvider:
    p = GcpTpuProvider(
        pod.project,
        pod.zone,
        pod.node_name,
        poll_interval_s=0.2,
        accelerator_type=pod.accelerator_type,
        client_factory=functools.partial(local_client, pod.tpu_api),
    )
    defaults: dict[str, object] = {"zones": ZONES, "backoff_s": 0.3, "backoff_max_s": 1.0}
    p.capacity = Capacity(p, CapacityConfig(**{**defaults, **cap}))  # type: ignore[arg-type]
    return p


@contextlib.asynccontextmanager
async def never_two(p: GcpTpuProvider) -> AsyncIterator[list[int]]:
    """Lists every zone every 50 ms while the body runs; fails if two nodes (or two queued
    resources) of the pod ever exist. Yields the counts seen."""
    seen: list[int] = []

    async def watch() -> None:
        while True:
            nodes = [
                n
                async for n in await p.client.list_nodes(parent=f"projects/{p.project}/locations/-")
            ]
            mine = [n.name for n in nodes if n.name.endswith(f"/nodes/{p.node_name}")]
            qrs = [
                q.name
                async for q in await p.client.list_queued_resources(
                    parent=f"projects/{p.project}/locations/-"
                )
            ]
            assert len(mine) <= 1 and len(qrs) <= 1, (mine, qrs)
            seen.append(len(mine))
            await asyncio.sleep(0.05)  # sleep-noqa: a sampler of an invariant, not a wait

    task = asyncio.create_task(watch())
    try:
        yield seen
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    assert seen, "the watcher never listed"


async def lose_the_slice(pod: PodInfo, p: GcpTpuProvider) -> None:
    await p.get_node()  # the spec to re-create comes from the last node seen
    await asyncio.to_thread(client.preempt, pod.run_dir, "all")

    async def preempted() -> bool:
        node = await p.get_node()  # a queued resource's node is deleted by the service
        return node is None or node.state == "PREEMPTED"

    await until(preempted, 30, "the slice PREEMPTED (or gone)")


def texts(attempts: list[Attempt]) -> list[str]:
    return [a.text for a in attempts]


async def test_eager_failover_comes_back_in_the_next_zone_with_capacity(zoned: PodInfo) -> None:
    p = provider(zoned, failover="eager-failover")
    heard: list[Attempt] = []
    assert p.capacity is not None
    p.capacity.on_attempt = heard.append
    await lose_the_slice(zoned, p)
    client.set_zone(zoned.run_dir, "local-a", stockout_s=0)
    client.set_zone(zoned.run_dir, "local-b", stockout_s=0)
    async with never_two(p):
        assert await p.recreate() == [0, 1, 2, 3]
    node = await p.wait_ready(60)
    assert p.zone == "local-c" and node.ready
    assert [(a.zone, a.ok) for a in heard] == [("local-b", False), ("local-c", True)]
    assert "no more capacity" in heard[0].reason and heard[0].next_zone == "local-c"
    # the API's own words first: an operation's error has no code of its own to print
    assert heard[0].reason.startswith('There is no more capacity in the zone "local-b"'), heard
    assert heard[0].text.startswith("no capacity in local-b (attempt 1")
    info = client.pod_status(zoned.run_dir)
    assert info is not None and info.zone == "local-c" and info.hosts[0].ip.startswith("127.2.")
    await p.close()


async def test_same_zone_waits_out_a_short_stockout_then_a_long_one_moves_on(
    zoned: PodInfo,
) -> None:
    p = provider(zoned, failover="same-zone", zone_retries=20)
    assert p.capacity is not None
    await lose_the_slice(zoned, p)
    client.set_zone(zoned.run_dir, "local-a", stockout_s=1.5)  # after the delete frees it
    async with never_two(p):
        await p.recreate()
    assert p.zone == "local-a"
    waits = [a for a in p.capacity.attempts if not a.ok]
    assert waits and all(a.next_zone == "local-a" and a.next_try_s > 0 for a in waits)
    assert waits[0].text.startswith("waiting for capacity in local-a (attempt 1, next try in")
    await p.wait_ready(60)

    # A stockout longer than the zone's retries: it moves to the next zone.
    p.capacity.cfg = CapacityConfig(
        zones=ZONES, failover="same-zone", zone_retries=2, backoff_s=0.2
    )
    await lose_the_slice(zoned, p)
    client.set_zone(zoned.run_dir, "local-a", stockout_s=0)
    async with never_two(p):
        await p.recreate()
    assert p.zone == "local-b"
    assert [(a.zone, a.ok) for a in p.capacity.attempts] == [
        ("local-a", False), ("local-a", False), ("local-b", True),
    ]  # fmt: skip
    await p.close()


async def test_no_capacity_anywhere_fails_naming_the_zones_and_leaves_nothing(
    zoned: PodInfo,
) -> None:
    p = provider(zoned, failover="eager-failover", timeout_s=1.5)
    await lose_the_slice(zoned, p)
    for zone in ZONES:
        client.set_zone(zoned.run_dir, zone, stockout_s=0)
    with pytest.raises(
        Exception, match=r"no capacity for phantom-pod in local-a, local-b, local-c"
    ):
        await p.recreate()
    nodes = [n async for n in await p.client.list_nodes(parent=f"projects/{p.project}/locations/-")]
    assert nodes == []  # the preempted node was deleted (its quota freed), nothing leaked
    await p.close()


async def test_a_leftover_node_in_another_zone_is_adopted_not_doubled(zoned: PodInfo) -> None:
    p = provider(zoned, failover="eager-failover")
    await lose_the_slice(zoned, p)
    # A half-finished earlier try left the pod's node READY in local-c.
    spec = tpu_v2.Node(
        accelerator_type="v4-32", scheduling_config=tpu_v2.SchedulingConfig(spot=True)
    )
    op = await p.client.create_node(
        parent=f"projects/{p.project}/locations/local-c", node_id=p.node_name, node=spec
    )
    await op.result()
    await p.recreate()
    assert p.zone == "local-c"
    nodes = [n async for n in await p.client.list_nodes(parent=f"projects/{p.project}/locations/-")]
    assert [n.name for n in nodes] == [f"projects/{p.project}/locations/local-c/nodes/phantom-pod"]
    await p.close()


async def test_queued_resource_is_reset_in_place_or_moved_by_the_strategy(zoned: PodInfo) -> None:
    p = provider(zoned, acquire="queued-resource", failover="same-zone", zone_retries=20)
    assert p.capacity is not None
    await p.get_node()
    # The pod's node as a queued resource's (how spot TPUs are usually had).
    await (await p.client.delete_node(name=p.node_path)).result()
    spec = p._spec_for_create()
    req = p.capacity.queued_request("local-a", spec)
    op = await p.client.create_queued_resource(
        parent=p.parent, queued_resource_id="phantom-pod-qr", queued_resource=req
    )
    await op.result()
    await p.wait_ready(60)

    await lose_the_slice(zoned, p)
    client.set_zone(zoned.run_dir, "local-a", stockout_s=1.5)
    async with never_two(p):
        await p.recreate()
    qr = await p.client.get_queued_resource(name=f"{p.parent}/queuedResources/phantom-pod-qr")
    assert p.zone == "local-a" and qr.state.state == tpu_v2.QueuedResourceState.State.ACTIVE
    assert any("queued (WAITING_FOR_RESOURCES)" in a.reason for a in p.capacity.attempts)
    await p.wait_ready(60)

    # eager-failover: the queued resource leaves the preempted zone at once.
    p.capacity.cfg = CapacityConfig(zones=ZONES, acquire="queued-resource", backoff_s=5.0)
    await lose_the_slice(zoned, p)
    async with never_two(p):
        await p.recreate()
    assert p.zone == "local-b"
    qrs = [
        q.name
        async for q in await p.client.list_queued_resources(
            parent=f"projects/{p.project}/locations/-"
        )
    ]
    assert qrs == [f"projects/{p.project}/locations/local-b/queuedResources/phantom-pod-qr"]
    assert (await p.wait_ready(60)).ready
    await p.close()


async def test_risk_aware_failover_goes_to_the_calmer_zone(zoned: PodInfo, tmp_path: Path) -> None:
    """The journal holds an hour in local-b with six reclaims and an hour in local-c with
    none: after local-a's loss the slice comes back in local-c (eager-failover would have
    taken local-b, next in the list), and the order is journaled with the rates behind it."""
    journal = Journal(tmp_path / "journal.sqlite")
    t0 = 1_000_000.0
    for zone, start, losses in (("local-b", t0, 6), ("local-c", t0 + 3600, 0)):
        journal.record_event(
            Event(start, EventKind.CAPACITY, "got it", data={"zone": zone, "ok": True})
        )
        for i in range(losses):
            at = start + 300 + 500 * i
            journal.record_event(
                Event(at, EventKind.PREEMPTED, "lost", host="w-0", data={"zone": zone})
            )
            journal.record_event(Event(at + 30, EventKind.RECOVERED, "recovered"))
    journal.record_event(
        Event(t0 + 7200, EventKind.CAPACITY, "got it", data={"zone": "local-a", "ok": True})
    )
    p = provider(zoned, failover="risk-aware")
    cap = p.capacity
    assert cap is not None
    cap.risk = lambda zones, hosts: rates_by_zone(
        journal_rates(journal, now=t0 + 7300, hosts=4, default_zone="local-a", zones=zones)
    )
    orders: list[RiskOrder] = []
    cap.on_order = orders.append
    await lose_the_slice(zoned, p)
    async with never_two(p):
        await p.recreate()
    assert p.zone == "local-c"
    (order,) = orders
    # local-a: 100 s seen, no reclaim: too little to call it calm (its upper bound is high)
    assert order.zones == ("local-c", "local-b", "local-a")
    row = journal.record_event(order_event(order, t0 + 7300))
    assert row.data["order"][0] == "local-c" and row.data["ranked_by"] == "upper bound"
    b = row.data["rates"]["local-b"]
    assert b["preemptions"] == 6 and b["low"] <= b["rate_per_vm_hour"] <= b["high"]
    assert "local-c" in row.message.split(":")[0]
    await p.wait_ready(60)
    await p.close()
    journal.close()
