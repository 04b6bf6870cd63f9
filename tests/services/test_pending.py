"""Services built behind the first frame: what the screens see before, during and after."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

import pytest

from console.config import Config
from console.services.jobs.workload import WorkloadSpec
from console.services.model import Event, PodSnapshot, Progress, Update
from console.services.pending import PendingServices
from console.wiring.settings import service_settings
from tests.support.fake_data import healthy_pod
from tests.support.fake_services import FakeServices
from tests.support.waiting import until


class Gate:
    """A build that reports progress, then waits to be let through (in its own thread)."""

    def __init__(self, services: FakeServices | None = None, error: Exception | None = None):
        self.services = services or FakeServices("healthy")
        self.error = error
        self.go = threading.Event()
        self.threads: list[str] = []

    def __call__(self, progress: Callable[[str], None]) -> FakeServices:
        self.threads.append(threading.current_thread().name)
        progress("starting the local pod emulator (4 hosts)")
        assert self.go.wait(10)
        if self.error is not None:
            raise self.error
        return self.services


async def settle(gate: Gate) -> None:
    """Until the build runs in its thread, held at the gate: what waits on it cannot be done."""
    await until(lambda: bool(gate.threads), 5, "the build to start in its thread", 0.01)
    await asyncio.sleep(0)  # sleep-noqa: one turn of the loop, tasks made before reach their awaits


async def test_before_the_build_ends_reads_answer_at_once_and_say_what_is_happening() -> None:
    gate = Gate()
    svc = PendingServices(
        service_settings(Config()), gate, what="connecting to the local pod emulator"
    )
    seen: list[Update] = []
    svc.subscribe(seen.append)
    assert svc.snapshot().warnings == ("connecting to the local pod emulator…",)
    assert svc.snapshot().hosts == () and svc.cadence() == []
    assert svc.recovery_status().auto is Config().recovery.auto and svc.successor("j") == "j"

    start = asyncio.create_task(svc.start())
    await settle(gate)
    await until(lambda: any(isinstance(u, Progress) for u in seen), 5, "the build's progress")
    assert not start.done() and gate.threads and gate.threads[0] != "MainThread"
    progress = [u for u in seen if isinstance(u, Progress)]
    assert [e.message for e in progress] == ["starting the local pod emulator (4 hosts)"]
    assert not [u for u in seen if isinstance(u, Event)]  # nothing journaled went past the sink
    snap = [u for u in seen if isinstance(u, PodSnapshot)][-1]
    assert "starting the local pod emulator (4 hosts)" in snap.warnings[0]

    gate.go.set()
    await asyncio.wait_for(start, 5)
    assert gate.services.started and svc.real is gate.services
    # the subscriber now hears the real services, and reads come from them
    gate.services.publish(healthy_pod(2))
    assert len([u for u in seen if isinstance(u, PodSnapshot)][-1].hosts) == 2
    assert svc.snapshot() is gate.services.pod


async def test_an_action_taken_while_building_waits_and_then_runs() -> None:
    gate = Gate()
    svc = PendingServices(service_settings(Config()), gate)
    start = asyncio.create_task(svc.start())
    ray_up = asyncio.create_task(svc.ray_up(actor="user"))
    svc.set_auto_recovery(False)  # remembered, applied to the real services
    await settle(gate)
    assert not ray_up.done()
    gate.go.set()
    res = await asyncio.wait_for(ray_up, 5)
    await start
    assert res.ok
    assert [c.name for c in gate.services.calls] == ["set_auto_recovery", "start", "ray_up"]
    assert gate.services.called("set_auto_recovery")[0].args["enabled"] is False


async def test_a_failed_build_is_shown_and_every_action_names_it() -> None:
    gate = Gate(error=ValueError("ssh.key = '/nope': no such file; set ssh.key"))
    gate.go.set()
    svc = PendingServices(service_settings(Config()), gate)
    seen: list[Update] = []
    svc.subscribe(seen.append)
    await svc.start()  # never raises: the screen shows it
    assert "cannot reach the cluster: ssh.key = '/nope'" in svc.snapshot().warnings[0]
    assert any(isinstance(u, PodSnapshot) and "ssh.key" in u.warnings[0] for u in seen)
    with pytest.raises(RuntimeError, match=r"cannot reach the cluster: ssh\.key"):
        await svc.submit(object())  # type: ignore[arg-type]
    await svc.stop()  # nothing to stop


async def test_stop_during_the_build_waits_for_it_then_stops_what_it_made() -> None:
    gate = Gate()
    svc = PendingServices(service_settings(Config()), gate)
    start = asyncio.create_task(svc.start())
    await settle(gate)
    stop = asyncio.create_task(svc.stop())
    await settle(gate)
    assert not stop.done()
    gate.go.set()
    await asyncio.wait_for(stop, 5)
    await start
    assert gate.services.stopped


async def test_unsubscribing_leaves_both_buses() -> None:
    gate = Gate()
    gate.go.set()
    svc = PendingServices(service_settings(Config()), gate)
    seen: list[Update] = []
    unsubscribe = svc.subscribe(seen.append)
    await svc.start()
    unsubscribe()
    gate.services.publish(healthy_pod(3))
    assert not any(isinstance(u, PodSnapshot) and len(u.hosts) == 3 for u in seen)


async def test_gke_workload_actions_wait_for_the_build_and_a_preview_names_why_not_yet() -> None:
    gate = Gate()
    svc = PendingServices(service_settings(Config()), gate, what="connecting to the GKE cluster")
    spec = WorkloadSpec(name="grpo")
    with pytest.raises(ValueError, match=r"workload preview: connecting to the GKE cluster"):
        svc.preview_workload(spec)
    start = asyncio.create_task(svc.start())
    create = asyncio.create_task(svc.create_workload(spec, actor="script"))
    await settle(gate)
    assert not create.done()
    gate.go.set()
    job = await asyncio.wait_for(create, 5)
    await start
    assert job.job_id == "grpo"
    assert svc.preview_workload(spec).name == "grpo"
    assert (await svc.preempt_slice("0", grace_s=5.0)).ok
    assert (await svc.delete_workload("grpo")).ok
    assert "name: grpo" in await svc.describe("grpo")
    assert [c.name for c in gate.services.calls][-5:] == [
        "create_workload",
        "preview_workload",
        "preempt_slice",
        "delete_workload",
        "describe",
    ]
