"""The whole seed-000 lifecycle through the services facade, against the emulator with real Ray.

bootstrap -> Ray up (4 nodes) -> tunnel -> submit a job that prints and sleeps -> a worker is
preempted -> the watchdog detects it on its own (within 2 pod polls), recreates only that host,
bootstraps and rejoins it, the job keeps running -> the head host is preempted -> everything is
rebuilt and the job is resubmitted with the same spec -> teardown leaves no Ray process.
Every event and action is in the journal.
"""

from __future__ import annotations

import textwrap
import time
from pathlib import Path

import pytest

from benchmarks.pods import pod_config
from console.config import Config
from console.services.facade import Facade
from console.services.jobs.spec import SubmitSpec
from console.services.model import PodSnapshot, RecoveryStatus
from console.wiring import make_services
from emulators.tpu_pod import client as pod_client
from emulators.tpu_pod.client import PodInfo
from emulators.tpu_pod.procs import find_marked, marker_value
from tests.support.recorder import Recorder
from tests.support.waiting import until

POLL_S = 0.5

FAKE_TRAIN = textwrap.dedent(
    """
    # Stand-in for engine.train: prints, then sleeps (a long-running training job).
    import argparse, time
    p = argparse.ArgumentParser()
    p.add_argument("--hold", type=float, default=600.0)
    args, _ = p.parse_known_args()
    print("training started", flush=True)
    deadline = time.time() + args.hold
    while time.time() < deadline:
        print("tick", flush=True)
        time.sleep(1.0)  # sleep-noqa: the stand-in trainer's pace
    """
)


def lifecycle_config(pod: PodInfo, tmp_path: Path, poll_s: float = POLL_S) -> Config:
    return pod_config(
        pod,
        tmp_path,
        recovery={"poll_interval_s": poll_s, "ready_timeout_s": 120.0, "step_retries": 2},
        source="<lifecycle test>",
    )


def fake_project(tmp_path: Path) -> Path:
    wd = tmp_path / "proj"
    (wd / "engine").mkdir(parents=True)
    (wd / "engine" / "__init__.py").write_text("")
    (wd / "engine" / "train.py").write_text(FAKE_TRAIN)
    return wd


def pod_pids(pod: PodInfo) -> list[int]:
    """Every process on the pod's hosts but the console's own preemption-notice watchers
    (they watch each VM's metadata server for as long as the console runs)."""
    pids = find_marked(marker_value(pod_client.read_run_id(pod.run_dir)))
    return [pid for pid in pids if "computeMetadata" not in _cmdline(pid)]


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def describe(pids: list[int]) -> str:
    out = []
    for pid in pids:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                argv = fh.read().replace(b"\0", b" ").decode(errors="replace")
            out.append(f"{pid}: {argv[:160]}")
        except OSError:
            continue
    return "; ".join(out)


def steps(status: RecoveryStatus) -> dict[str, str]:
    return {s.name: s.state for s in status.steps}


@pytest.mark.slow
@pytest.mark.timeout(900)
async def test_lifecycle_worker_then_head_preemption(pod: PodInfo, tmp_path: Path) -> None:
    cfg = lifecycle_config(pod, tmp_path)
    svc: Facade = make_services(
        cfg,
        state_dir=tmp_path / "state",
        autostart_pod=False,
        working_dir=fake_project(tmp_path),
    )
    rec = Recorder()
    svc.subscribe(rec)
    w1, w0 = pod.hosts[1].name, pod.hosts[0].name
    try:
        await svc.start()
        assert svc.snapshot().ready_hosts == 4

        boot = await svc.bootstrap()
        assert boot.ok, boot.message
        up = await svc.ray_up()
        assert up.ok, up.message
        snap = await svc.refresh()
        assert snap.ray_alive == 4 and not snap.warnings, snap
        tunnel = await svc.open_tunnel()
        assert tunnel.ok, tunnel.message
        snap = await svc.refresh()
        assert snap.tunnel_up and snap.dashboard_url.startswith("http://127.0.0.1:")

        spec = SubmitSpec(train_args="--algo ppo --total-timesteps 1000 --alpha 0.3 --hold 900")
        job = await svc.submit(spec)

        async def job_running(job_id: str) -> bool:
            return (await svc.job_status(job_id)).status == "RUNNING"

        await until(lambda: job_running(job.job_id), 180, f"job {job.job_id} RUNNING")

        async def printed() -> bool:
            return "training started" in await svc.job_logs(job.job_id)

        await until(printed, 60, "the job's first output line")

        # -- a worker is preempted: the watchdog acts on its own ---------------------------
        t_preempt = time.time()
        pre = await svc.preempt(w1)
        assert pre.ok
        await until(lambda: bool(rec.events("preempted", w1)), 30, f"{w1} detected")
        detected = rec.events("preempted", w1)[0]
        # Within two poll intervals (a dropped SSH connection wakes extra polls at once, so
        # the count of polls says less than the time).
        assert detected.at - t_preempt <= 2 * POLL_S, detected.at - t_preempt
        # The overview warned of it. Its words: "VM lost (..., TPU state PREEMPTED ...)", and
        # the emulator's symptom "worker 1 ... was preempted" only where a full poll read the
        # node before the recovery replaced the VM (the API's word heard between polls is laid
        # over the last observation without symptoms, and the recreate can follow at once).
        assert any(
            isinstance(u, PodSnapshot)
            and any(w1 in w and "preempted" in w.lower() for w in u.warnings)
            for u in rec.updates
        )
        await until(lambda: len(rec.recoveries()) >= 1, 300, "worker recovery")
        worker_rec = rec.recoveries()[0]
        assert worker_rec.ok, worker_rec
        assert worker_rec.detect_s is not None and worker_rec.mttr_s is not None
        st = steps(worker_rec)
        assert st["recreate"] == "ok" and st["bootstrap"] == "ok" and st["workers"] == "ok"
        assert st["head"] == "skipped" and st["resubmit"] == "skipped"
        recreate_step = next(s for s in worker_rec.steps if s.name == "recreate")
        assert list(recreate_step.hosts) == [w1]  # only that host
        snap = await svc.refresh()
        assert snap.ray_alive == 4
        assert (await svc.job_status(job.job_id)).status == "RUNNING"  # the job stayed

        # -- the head host is preempted: rebuild and resubmit -------------------------------
        await svc.preempt(w0)
        await until(lambda: len(rec.recoveries()) >= 2, 420, "head recovery")
        head_rec = rec.recoveries()[1]
        assert head_rec.ok, head_rec
        assert set(steps(head_rec).values()) == {"ok"}, steps(head_rec)
        resub = rec.events("job_resubmitted")
        assert [e.data["old_job_id"] for e in resub] == [job.job_id]
        new_id = resub[0].data["new_job_id"]
        assert (await svc.job_status(new_id)).status == "RUNNING"
        new_job = svc.registry.get(new_id)
        assert new_job is not None and new_job.spec.train_args == spec.train_args
        assert svc.registry.get(job.job_id).superseded_by == new_id  # type: ignore[union-attr]
        snap = await svc.refresh()
        assert snap.ray_alive == 4 and snap.tunnel_up

        # -- journal: every event and action ---------------------------------------------------
        rows = await svc.events(limit=5000)
        kinds = {e.kind for e in rows}
        assert {"preempted", "recovery_started", "recovered", "job_resubmitted"} <= kinds
        assert {"head_lost", "action"} <= kinds
        preempted_hosts = [e.host for e in rows if e.kind == "preempted"]
        assert preempted_hosts == [w1, w0]
        actions = {(e.data.get("action"), e.actor) for e in rows if e.kind == "action"}
        for name in ("bootstrap", "ray_up", "open_tunnel", "submit", "preempt"):
            assert (name, "user") in actions, name
        for step in ("recreate", "wait_ready", "bootstrap", "head", "workers", "tunnel"):
            assert (f"recovery.{step}", "watchdog") in actions, step
        assert ("submit", "watchdog") in actions  # the resubmission
        mttrs = [e.data.get("mttr_s") for e in rows if e.kind == "recovered"]
        assert len(mttrs) == 2 and all(isinstance(m, float) and m > 0 for m in mttrs)

        # -- teardown leaves no Ray process ----------------------------------------------------
        down = await svc.teardown()
        assert down.ok, down.message
        try:
            await until(lambda: not pod_pids(pod), 60, "every Ray process of the pod to exit")
        except AssertionError as exc:
            raise AssertionError(f"{exc}; left: {describe(pod_pids(pod))}") from None
        await svc.refresh()  # the watchdog must not "recover" what the user tore down
        await svc.refresh()
        assert not svc.watchdog.running and not svc.watchdog.armed
        assert len(rec.recoveries()) == 2
    finally:
        await svc.stop()
        svc.close_journal()
