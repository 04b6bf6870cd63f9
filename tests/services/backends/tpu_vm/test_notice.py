"""A preemption notice, heard from the VM's own metadata server before the VM stops.

Real emulated hosts with their GCE metadata servers on loopback; the console's services at
the DEFAULT 5 s poll: the notice still reaches the journal at once (the watcher wakes the
poll), the host shows PREEMPTING while the API says READY, and the `preempted` event comes
only when the VM really stops, after its grace.
"""

from __future__ import annotations

import asyncio
import shlex
import subprocess
import time
from pathlib import Path

from benchmarks.pods import pod_config
from console.services.backends.tpu_vm.backend import TpuVmBackend
from console.wiring import make_services
from emulators.tpu_pod import client as pod_client
from emulators.tpu_pod.client import PodInfo
from tests.support.fixtures_pod import ssh_run
from tests.support.waiting import until


async def test_a_notice_is_journaled_before_the_vm_stops(pod: PodInfo, tmp_path: Path) -> None:
    config = pod_config(
        pod, tmp_path, recovery={"poll_interval_s": 5.0, "auto": False, "notice_grace_s": 6.0}
    )
    services = make_services(config, state_dir=tmp_path / "state", autostart_pod=False)
    backend = services.backend
    assert isinstance(backend, TpuVmBackend)
    try:
        await services.start()
        await until(lambda: len(backend.notices.listening) == 4, 60, "a watcher on every host")
        # A job on w2 that takes its whole grace to stop (as a checkpointing trainer does).
        busy = "nohup bash -c \"trap '' TERM; sleep 120\" >/dev/null 2>&1 &"
        started = await asyncio.to_thread(
            subprocess.run, pod.ssh_argv(2, busy), capture_output=True, timeout=60
        )
        assert started.returncode == 0, started.stderr
        given = time.time()
        await pod_client.async_preempt(pod.run_dir, 2, notice=6.0, wait=False)

        async def noticed() -> bool:
            return bool(await services.events(kinds=["preemption_notice"]))

        await until(noticed, 15, "the notice in the journal")
        (notice,) = await services.events(kinds=["preemption_notice"])
        assert notice.host == "phantom-pod-w2" and notice.at >= given
        info = pod_client.pod_status(pod.run_dir)
        assert info is not None and info.state == "READY"  # the API has not said a word yet
        hosts = {h.name: h for h in services.snapshot().hosts}
        assert hosts["phantom-pod-w2"].tpu_state == "PREEMPTING"
        assert "preemption notice" in " ".join(services.snapshot().warnings)

        async def stopped() -> bool:
            return bool(await services.events(kinds=["preempted"]))

        await until(stopped, 60, "the VM to stop after its grace")
        (gone,) = await services.events(kinds=["preempted"])
        assert gone.id is not None and notice.id is not None and gone.id > notice.id
    finally:
        await services.stop()
        services.close_journal()


async def test_a_noticed_head_is_recreated_once_its_jobs_exit_not_at_its_grace(
    pod: PodInfo, tmp_path: Path
) -> None:
    """The head's job takes the notice's SIGTERM, checkpoints and exits 75 within a second
    or two of a 60 s grace; the recreate goes then, not at the grace's end (the VM itself
    would stop only then: Ray's GCS ignores SIGTERM). Its checkpoint is complete first."""
    grace = 60.0
    config = pod_config(
        pod, tmp_path, recovery={"poll_interval_s": 0.5, "auto": False, "notice_grace_s": grace}
    )
    services = make_services(config, state_dir=tmp_path / "state", autostart_pod=False)
    backend = services.backend
    assert isinstance(backend, TpuVmBackend)
    head = backend.parts.head.name
    saved = pod.bucket / "head-job-checkpoint"
    # An engine process by its command line, as `python -m engine.train` shows: on SIGTERM
    # it writes its "checkpoint" a moment later, then exits 75.
    job = "trap 'sleep 1; echo step=4096 > \"$0\"; exit 75' TERM; while :; do sleep 0.2; done"
    busy = f"nohup bash -c {shlex.quote(job)} {shlex.quote(str(saved))} -m engine.train "
    busy += ">/dev/null 2>&1 &"
    # ... and what keeps the VM up through its grace, as Ray's gcs_server does.
    gcs = "nohup bash -c \"trap '' TERM; sleep 120\" >/dev/null 2>&1 &"
    engines = "pgrep -f '[-]m engine[.]'"
    try:
        await services.start()
        await until(lambda: len(backend.notices.listening) == 4, 60, "a watcher on every host")
        for command in (gcs, busy):
            started = await asyncio.to_thread(ssh_run, pod, 0, command)
            assert started.returncode == 0, started.stderr
        # The host's own pgrep sees its engine process; another host's does not.
        assert (await asyncio.to_thread(ssh_run, pod, 0, engines)).returncode == 0
        assert (await asyncio.to_thread(ssh_run, pod, 1, engines)).returncode == 1
        await pod_client.async_preempt(pod.run_dir, 0, notice=grace, wait=False)
        await until(lambda: head in backend.notices.notices, 15, "the notice heard")
        notice_at = backend.notices.notices[head]

        res = await backend.recreate([head])
        recreated_at = time.time()

        assert res.ok, res.message
        assert "jobs exited" in res.message
        assert saved.read_text().strip() == "step=4096"  # the checkpoint was not cut short
        assert recreated_at < notice_at + grace  # the grace was not waited out
    finally:
        await services.stop()
        services.close_journal()


async def test_a_watcher_outlives_a_probe_that_timed_out(pod: PodInfo, tmp_path: Path) -> None:
    """A host that did not answer one poll's probe in time (its sshd wedged for a moment, as
    a loaded pod of a thousand hosts makes probes time out) keeps its notice watcher: when
    the host answers again and then gets its notice, the notice is heard and journaled
    before the VM stops. Before, the poll stopped that host's watcher for good (nothing
    restarts it while the interval poll is far off), so only the VM's end was seen."""
    config = pod_config(
        pod,
        tmp_path,
        recovery={
            "poll_interval_s": 600.0,  # no interval poll: only this test's polls and wake-ups
            "auto": False,
            "notice_grace_s": 30.0,
        },
    )
    services = make_services(config, state_dir=tmp_path / "state", autostart_pod=False)
    backend = services.backend
    assert isinstance(backend, TpuVmBackend)
    backend.parts.poll_budget_s = 2.0  # a wedged host's probe gives up within 2 s
    try:
        await services.start()
        await until(lambda: len(backend.notices.listening) == 4, 60, "a watcher on every host")
        await pod_client.async_fault(pod.run_dir, 1, "hang")
        obs = await services.refresh()  # its probe times out within the poll's budget
        w1 = next(h for h in obs.hosts if h.name == "phantom-pod-w1")
        assert w1.ssh == "down"
        await pod_client.async_clear_faults(pod.run_dir, 1)
        # No poll comes now (600 s): only the watcher itself can listen again.
        await until(lambda: "phantom-pod-w1" in backend.notices.listening, 60, "w1's watcher again")
        busy = "nohup bash -c \"trap '' TERM; sleep 120\" >/dev/null 2>&1 &"
        started = await asyncio.to_thread(ssh_run, pod, 1, busy)
        assert started.returncode == 0, started.stderr
        await pod_client.async_preempt(pod.run_dir, 1, notice=20.0, wait=False)

        async def told() -> bool:
            return bool(await services.events(kinds=["preemption_notice", "preempted"]))

        await until(told, 60, "the notice (or, without a watcher, the VM's end)")
        (first, *_) = await services.events(kinds=["preemption_notice", "preempted"])
        assert first.kind == "preemption_notice" and first.host == "phantom-pod-w1"
    finally:
        await services.stop()
        services.close_journal()


async def test_a_notice_mid_poll_is_journaled_before_that_poll_ends(
    pod: PodInfo, tmp_path: Path
) -> None:
    """A notice that comes while a poll is in flight (a poll of a thousand hosts takes
    seconds; here the TPU API holds it for 15 s) is journaled from the last observation at
    once, not when that poll ends; the poll, and the next, add no second row."""
    config = pod_config(
        pod,
        tmp_path,
        recovery={
            "poll_interval_s": 600.0,  # no interval poll: only this test's polls and wake-ups
            "auto": False,
            "notice_grace_s": 60.0,
        },
    )
    services = make_services(config, state_dir=tmp_path / "state", autostart_pod=False)
    backend = services.backend
    assert isinstance(backend, TpuVmBackend)
    backend.parts.poll_budget_s = 60.0  # the API's half: 30 s, more than it is held
    in_flight: asyncio.Task[object] | None = None
    try:
        await services.start()
        await until(lambda: len(backend.notices.listening) == 4, 60, "a watcher on every host")
        # A job on w2 that takes its whole grace to stop: the VM outlives this test's polls.
        busy = "nohup bash -c \"trap '' TERM; sleep 120\" >/dev/null 2>&1 &"
        started = await asyncio.to_thread(
            subprocess.run, pod.ssh_argv(2, busy), capture_output=True, timeout=60
        )
        assert started.returncode == 0, started.stderr
        await pod_client.async_fault(pod.run_dir, "all", "slow-api", seconds=15.0)
        in_flight = asyncio.create_task(services.refresh())  # held by the API for 15 s
        await pod_client.async_preempt(pod.run_dir, 2, notice=60.0, wait=False)

        async def noticed() -> bool:
            return bool(await services.events(kinds=["preemption_notice"]))

        await until(noticed, 12, "the notice in the journal")
        assert not in_flight.done()  # the poll in flight has not ended
        (row,) = await services.events(kinds=["preemption_notice"])
        assert row.host == "phantom-pod-w2"
        hosts = {h.name: h for h in services.snapshot().hosts}
        assert hosts["phantom-pod-w2"].tpu_state == "PREEMPTING"  # shown at once too

        await pod_client.async_clear_faults(pod.run_dir)
        await in_flight  # the poll in flight ends: no second row
        await services.refresh()  # nor from the next poll
        rows = await services.events(kinds=["preemption_notice"])
        assert [(e.kind, e.host) for e in rows] == [("preemption_notice", "phantom-pod-w2")]
        # No poll took the notice back (the VM itself may have ended by now: its own row).
        ended = await services.events(kinds=["preempted"])
        assert not [e for e in ended if e.data.get("after_notice")], ended
    finally:
        if in_flight is not None and not in_flight.done():
            in_flight.cancel()
        await services.stop()
        services.close_journal()
