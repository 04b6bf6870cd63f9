"""The seed's whole loop through the gcp code path, against the GCP-faithful emulator.

``provider = "gcp"``: Google's TPU client on the emulator's loopback endpoint (anonymous
credentials), a GCP user's SSH user and key, SSH to the workers' external IPs, host keys from
guest attributes, Ray sized by the config (the host's own otherwise). Nothing of
``console.wiring`` is on this path but the harness that starts the pod.

bootstrap -> Ray head + workers -> tunnel (and ray:// through it) -> a job that sees the
console's W&B mode -> a sweep -> a whole-slice preemption -> the watchdog deletes and creates
the node, trusts the new VMs' host keys from guest attributes, bootstraps, forms Ray again,
re-opens the tunnel and relaunches the sweep with the same id -> the interrupted trials resume
from their checkpoints in the bucket and the sweep completes.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import time
from pathlib import Path
from typing import Any

import pytest

from benchmarks.pods import gcp_config, gcp_user_key
from console.services.backends.tpu_vm.backend import TpuVmBackend
from console.services.facade import Facade
from console.services.jobs.spec import SubmitSpec
from console.status import collect_status
from console.wiring import REPO_ROOT, make_services
from emulators.tpu_pod import client as pod_client
from emulators.tpu_pod.client import PodInfo
from engine.sweep import read_status
from tests.support.emulator_helpers import running_pod
from tests.support.ray_client import ray_client_task
from tests.support.recorder import Recorder
from tests.support.sweep_waits import sweep_ready_to_preempt
from tests.support.waiting import until

SWEEP_KIND = "gcp_e2e"
# Four short trials (grid over two knobs), checkpointing often: a preemption finds them
# with checkpoints, and the relaunched sweep finishes in minutes on two cores.
SWEEP_SPACE = {
    "description": "The gcp-path end-to-end test's small grid.",
    "algo": "ppo",
    "metric": {"name": "eval/mean_task_return", "goal": "maximize"},
    "fixed": {
        "env": "phantom/BehaviourMaze-v0",
        "total_timesteps": 3000,
        "checkpoint_every": 500,
        "n_envs": 1,
        "eval_episodes": 2,
    },
    "parameters": {
        "alpha": {"values": [0.0, 0.4]},
        "learning_rate": {"values": [0.0003, 0.001]},
        "n_steps": {"values": [256]},
        "gamma": {"values": [0.99]},
        "ent_coef": {"values": [0.0]},
        "batch_size": {"value": 64},
    },
}
SWEEP_ID = f"{SWEEP_KIND}-grid-cap4-s0"  # what the engine derives; the console learns it


def project(tmp_path: Path) -> Path:
    """The user's project as the console uploads it: the engine, plus a small search space."""
    wd = tmp_path / "proj"
    shutil.copytree(
        REPO_ROOT / "engine", wd / "engine", ignore=shutil.ignore_patterns("__pycache__")
    )
    (wd / "engine" / "sweeps" / f"{SWEEP_KIND}.json").write_text(json.dumps(SWEEP_SPACE))
    return wd


async def job_in(svc: Facade, job_id: str, statuses: set[str]) -> bool:
    return (await svc.job_status(job_id)).status in statuses


async def hand_submitted(dashboard_url: str) -> str:
    """A job submitted by hand (`ray job submit`), without the console's env."""
    from ray.job_submission import JobSubmissionClient

    def submit() -> str:
        return str(JobSubmissionClient(dashboard_url).submit_job(entrypoint="echo by hand"))

    return await asyncio.to_thread(submit)


@pytest.mark.slow
@pytest.mark.e2e
@pytest.mark.timeout(2400)
async def test_gcp_path_whole_loop_on_the_faithful_emulator(tmp_path: Path) -> None:
    key = gcp_user_key(tmp_path / "google_compute_engine")
    with running_pod(tmp_path / "pod", faithful=True, ssh_user="alice", ssh_key=key) as pod:
        await run_loop(pod, tmp_path)


async def run_loop(pod: PodInfo, tmp_path: Path) -> None:
    storage = f"{pod.bucket_uri}/sweeps"
    cfg = gcp_config(
        pod,
        tmp_path,
        # Four Ray nodes share two cores here: sized explicitly, as a user may.
        ray={"num_cpus": 2, "object_store_mb": 100},
        wandb={"mode": "disabled"},  # not the tests' ambient "offline": it must come from here
        recovery={"poll_interval_s": 1.0, "auto": True, "step_retries": 3},
        extra={
            "bootstrap": {"command": 'python -c "import ray, sys; print(sys.version)"'},
            "storage": {"uri": pod.bucket_uri},
        },
    )
    svc = make_services(cfg, state_dir=tmp_path / "state", working_dir=project(tmp_path))
    assert isinstance(svc.backend, TpuVmBackend)
    parts = svc.backend.parts
    rec = Recorder()
    svc.subscribe(rec)
    try:
        await svc.start()
        assert svc.snapshot().ready_hosts == 4
        assert [ep.connect_ip for ep in parts.endpoints] == [h.external_ip for h in pod.hosts]

        # -- bring-up, by hand (the seed's commands) -------------------------------------
        t0 = time.monotonic()
        for step in (svc.bootstrap, svc.ray_up, svc.open_tunnel):
            res = await step()
            assert res.ok, res.message
        bringup_s = time.monotonic() - t0
        snap = await svc.refresh()
        assert snap.ray_alive == 4 and snap.tunnel_up, snap
        ran = await ray_client_task(f"ray://127.0.0.1:{cfg.ray.local_client_port}", pod.run_dir)
        assert ran["ran_on"] in {h.ip for h in pod.hosts}

        # -- a job sees the console's W&B mode and JAX platform ----------------------------
        job = await svc.submit(
            SubmitSpec(
                train_args="--algo ppo --total-timesteps 512 --alpha 0.3 --device cpu "
                "--eval-episodes 1 --checkpoint-every 256"
            )
        )
        await until(lambda: job_in(svc, job.job_id, {"SUCCEEDED", "FAILED"}), 300, "the job")
        info = await svc.job_status(job.job_id)
        logs = await svc.job_logs(job.job_id)
        assert info.status == "SUCCEEDED", logs[-3000:]
        assert "wandb=disabled" in logs  # the trainer's own line
        assert info.env["WANDB_MODE"] == "disabled" and info.env["PHANTOM_JAX_PLATFORM"] == "cpu"
        assert info.env_problems == ()

        by_hand = await hand_submitted(snap.dashboard_url)
        await until(lambda: job_in(svc, by_hand, {"SUCCEEDED"}), 120, "the job by hand")
        status = await collect_status(svc)
        flagged = {j["job_id"]: j["env_problems"] for j in status["jobs"]}
        assert flagged[job.job_id] == []
        assert "PHANTOM_JAX_PLATFORM not set" in flagged[by_hand]

        # -- a sweep, then the whole slice is preempted ------------------------------------
        sweep = await svc.submit(
            SubmitSpec(
                mode="sweep", sweep_kind=SWEEP_KIND, sweep_method="grid", run_cap=4, num_nodes=4
            )
        )

        async def learned() -> bool:
            sub = svc.registry.get(sweep.job_id)
            return sub is not None and sub.sweep_id == SWEEP_ID

        await until(learned, 300, "the console to learn the sweep id")
        exp_dir = pod.bucket / "sweeps" / SWEEP_ID
        await until(
            lambda: sweep_ready_to_preempt(storage, SWEEP_ID, exp_dir, trials=4),
            600,
            "trial checkpoints",
        )
        old_keys = {h.name: h.host_key_fingerprint for h in pod.hosts}
        await asyncio.to_thread(pod_client.preempt, pod.run_dir, "all")

        await until(lambda: bool(rec.recoveries()), 900, "the watchdog's recovery")
        done = rec.recoveries()[0]
        steps = {s.name: (s.state, s.message) for s in done.steps}
        assert done.ok, steps
        # No worker survived the slice to hold a dead head's raylets: nothing orphaned.
        expected = dict.fromkeys(steps, "ok") | {"orphans": "skipped"}
        assert {name: state for name, (state, _) in steps.items()} == expected
        recreate = next(s for s in done.steps if s.name == "recreate")
        assert sorted(recreate.hosts) == sorted(old_keys)  # Delete + Create: the whole node
        # Each VM's loss is journaled: by its notice (heard from its metadata server before
        # it stopped, and the recovery took it from there) or, unheard, as preempted.
        lost = rec.events("preempted") + rec.events("preemption_notice")
        assert {e.host for e in lost} == set(old_keys)

        # -- new VMs, their keys trusted from guest attributes -------------------------------
        fresh = await asyncio.to_thread(pod_client.pod_status, pod.run_dir)
        assert fresh is not None
        assert all(old_keys[h.name] != h.host_key_fingerprint for h in fresh.hosts)
        replaced = [e for e in rec.events("host_key") if e.data.get("change") == "replaced"]
        assert {e.host for e in replaced} == set(old_keys)
        assert {e.data["new_fingerprint"] for e in replaced} == {
            h.host_key_fingerprint for h in fresh.hosts
        }

        # -- Ray back, the sweep relaunched with the same id, trials resumed ------------------
        snap = await svc.refresh()
        assert snap.ray_alive == 4 and snap.tunnel_up, snap
        (resub,) = rec.events("job_resubmitted")
        assert resub.data["old_job_id"] == sweep.job_id
        new_id = resub.data["new_job_id"]
        relaunched = svc.registry.get(new_id)
        assert relaunched is not None and relaunched.spec.sweep_id == SWEEP_ID
        await until(lambda: job_in(svc, new_id, {"SUCCEEDED", "FAILED"}), 900, "the sweep")
        logs = await svc.job_logs(new_id)
        assert (await svc.job_status(new_id)).status == "SUCCEEDED", logs[-4000:]
        assert f"resuming sweep {SWEEP_ID}" in logs
        trials = read_status(storage, SWEEP_ID)
        assert len(trials) == 4
        for trial in trials.values():
            fresh_starts = [a for a in trial["attempts"] if a["resumed_from_step"] == 0]
            assert len(fresh_starts) == 1, f"trial started from scratch twice: {trial}"
            assert trial["final"] and trial["step"] == 3000
        resumed = [t for t in trials.values() if len(t["attempts"]) > 1]
        assert resumed and all(
            a["resumed_from_step"] > 0 for t in resumed for a in t["attempts"][1:]
        )

        # -- the journal has it all, once ---------------------------------------------------
        rows = await svc.events(limit=5000)
        kinds = [e.kind for e in rows]
        assert kinds.count("recovered") == 1 and kinds.count("job_env") == 1
        report: dict[str, Any] = {
            "bringup_s": round(bringup_s, 1),
            "detect_s": done.detect_s,
            "mttr_slice_s": done.mttr_s,
        }
        print(f"gcp path: {json.dumps(report)}")

        down = await svc.teardown()
        assert down.ok, down.message
    finally:
        await svc.stop()
        svc.close_journal()
