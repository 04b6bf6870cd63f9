"""Watch events that are news wake the facade's pod poll (``backends/gke/news``): with a
10-minute poll interval, a preempted slice still shows within seconds, worded once for the
whole slice, and the first list that fills the caches wakes nothing."""

from __future__ import annotations

import asyncio
from pathlib import Path

from console.services.backends.gke.backend import GkeBackend
from console.services.backends.gke.news import News, node_signature, pod_signature
from console.services.model import HostState
from emulators.gke import client as gke_client
from tests.support.fixtures_gke import gke
from tests.support.gke_services import events, gke_config, gke_services
from tests.support.waiting import until

__all__ = ["gke"]


def test_signatures_mark_only_what_detection_acts_on() -> None:
    tpu = {"cloud.google.com/gke-tpu-accelerator": "tpu-v5p-slice"}
    ready = {"type": "Ready", "status": "True"}
    node = {"metadata": {"name": "n0", "labels": tpu}, "status": {"conditions": [ready]}}
    cpu_node = {"metadata": {"name": "c0", "labels": {}}, "status": {"conditions": [ready]}}
    assert node_signature(node) == HostState.READY and node_signature(cpu_node) is None
    running = {"metadata": {"name": "p"}, "status": {"phase": "Running"}}
    disrupted = {
        "metadata": {"name": "p"},
        "status": {
            "phase": "Running",
            "conditions": [{"type": "DisruptionTarget", "status": "True"}],
        },
    }
    assert pod_signature(running) is None
    assert pod_signature(disrupted) == (False, True)


async def test_a_preempted_slice_shows_without_waiting_for_the_poll(
    gke: gke_client.GkeInfo, tmp_path: Path
) -> None:
    config = gke_config(gke.run_dir, recovery={"poll_interval_s": 600, "auto": False})
    async with gke_services(config, tmp_path / "state") as (svc, seen):
        await until(lambda: len(svc.snapshot().hosts) == 8, 30, "the slice's 8 nodes")
        backend = svc.backend
        assert isinstance(backend, GkeBackend)
        assert backend.news.woken == 0  # filling the caches is the state, not news
        await svc.preempt_slice("0", 0.0, "test")
        await until(
            lambda: any(h.tpu_state != HostState.READY for h in svc.snapshot().hosts),
            60,
            "the preempted slice in the snapshot (the next poll is 10 minutes away)",
        )
        assert backend.news.woken >= 1
        await until(lambda: events(seen, "preempted"), 30, "the preemption journaled")
        # The slice's burst of node changes settles before the poll: it is worded once, whole.
        preempted = events(seen, "preempted")
        assert len(preempted) == 1 and "8/8 nodes lost" in preempted[0].message, preempted


# A slice's nodes go as a burst of watch events: on a loaded machine they spanned more than a
# fixed delay from the first, and the poll saw one node of eight lost, the next poll the rest
# (two `preempted` rows). The wake waits for the burst to go quiet, to at most a cap.


async def test_each_news_of_a_burst_puts_the_wake_off_to_at_most_the_cap() -> None:
    woken: list[float] = []
    news = News(lambda: woken.append(0.0), settle_s=0.25, settle_max_s=2.0)
    news._soon()
    assert news._pending is not None
    first = news._pending.when()
    await asyncio.sleep(0.01)
    news._soon()  # a second node's event: the wake waits for the burst to go quiet
    assert news._pending is not None and news._pending.when() > first
    news._first -= 10.0  # a burst that has gone on past the cap: no further off than it
    news._soon()
    assert news._pending.when() <= news._first + 2.0
    news.cancel()
    assert news._pending is None and not woken


async def test_a_burst_wakes_the_poll_once() -> None:
    woke = asyncio.Event()
    count = 0

    def wake() -> None:
        nonlocal count
        count += 1
        woke.set()

    news = News(wake, settle_s=0.05, settle_max_s=5.0)
    for _ in range(4):
        news._soon()
    await woke.wait()
    assert count == 1 and news._pending is None
