"""The engine on the emulated 4-host pod, submitted the seed's way (``submit_ray_job.sh``).

Each test submits real Ray jobs to the pod's dashboard; trainers really run on the
emulated hosts and checkpoint into the pod's bucket (``file://``), as on GCP into gs://.
They share one pod and Ray cluster (``shared_ray_pod``: a bring-up is ~35 s of CI each),
healed before each test: the host an earlier test preempted is recreated and rejoined. The
head-loss test, which replaces the whole cluster, sits last so that no test waits for Ray to
be restarted after it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from emulators.tpu_pod import client
from engine.sweep import read_status
from tests.support import REPO
from tests.support.fixtures_pod import RayPod, start_worker
from tests.support.sweep_waits import sweep_ready_to_preempt
from tests.support.waiting import wait_for, wait_until

pytestmark = pytest.mark.slow

SUBMIT = REPO / "submit_ray_job.sh"


def submit(
    ray_pod: RayPod, timeout: float = 900, **variables: str
) -> subprocess.CompletedProcess[str]:
    """Run submit_ray_job.sh against the pod's dashboard with the given variables."""
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "RAY_ADDRESS": ray_pod.dashboard_url,
        "WANDB_MODE": "disabled",
        **variables,
    }
    env.pop("WANDB_API_KEY", None)
    env.pop("WANDB_DIR", None)  # trainers keep offline runs next to their checkpoints
    return subprocess.run(
        ["bash", str(SUBMIT)], env=env, capture_output=True, text=True, timeout=timeout
    )


def last_json(text: str, key: str) -> dict[str, Any]:
    """The last JSON object line of a job's output that has ``key``."""
    for line in reversed(text.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                data = json.loads(line)
            except json.JSONDecodeError:
                continue
            if key in data:
                return data  # type: ignore[no-any-return]
    raise AssertionError(f"no JSON line with {key!r} in output:\n{text[-4000:]}")


def _job_client(ray_pod: RayPod) -> Any:
    from ray.job_submission import JobSubmissionClient

    return JobSubmissionClient(ray_pod.dashboard_url)


def test_submit_sweep_survives_worker_preemption(shared_ray_pod: RayPod) -> None:
    """Run cap 6 over 4 hosts; a worker host is preempted while its trials have
    checkpoints. The sweep ends with exactly 6 completed trials and no trial ever
    starts from scratch twice (the interrupted ones resume from their checkpoints)."""
    pod = shared_ray_pod.pod
    storage = f"{pod.bucket_uri}/sweeps"
    sweep_id = "preempt-test"
    proc = submit(
        shared_ray_pod,
        RAY_MODE="sweep",
        SWEEP_KIND="ppo_rl_study",
        SWEEP_METHOD="random",
        SWEEP_RUN_CAP="6",
        NUM_NODES="4",
        AGENTS_PER_NODE="1",
        TPU_PER_TASK="0",
        SWEEP_ID=sweep_id,
        STORAGE=storage,
        SWEEP_ARGS="--trial-timesteps 3000 --checkpoint-every 500 --max-failures 3",
        SUBMISSION_ID="sweep-preempt",
        NO_WAIT="1",
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    jobs = _job_client(shared_ray_pod)
    ip_to_host = {h.ip: i for i, h in enumerate(pod.hosts)}

    # wait for a worker host (not the head, which runs the sweep driver) whose running
    # trials all have a checkpoint, then preempt it
    def preemptible_host() -> int | None:
        status = jobs.get_job_status("sweep-preempt")
        assert not status.is_terminal(), jobs.get_job_logs("sweep-preempt")[-4000:]
        by_host: dict[int, list[dict[str, Any]]] = {}
        for trial in read_status(storage, sweep_id).values():
            current = trial["attempts"][-1]
            if not trial["final"] and current["node"] in ip_to_host:
                by_host.setdefault(ip_to_host[current["node"]], []).append(current)
        for host, running in sorted(by_host.items()):
            if host != 0 and running and all(a["reports"] >= 1 for a in running):
                return host
        return None

    victim = wait_for(
        preemptible_host, 600, "a worker host whose running trials all have a checkpoint", 0.5
    )
    client.preempt(pod.run_dir, victim)

    # the recovery loop's steps for that host: recreate, wait READY, join Ray again
    client.recreate(pod.run_dir, victim)
    ready = client.wait_for(pod.run_dir, lambda p: p.state == "READY", 120, "READY")
    start_worker(ready, victim, shared_ray_pod.gcs)

    wait_until(
        lambda: jobs.get_job_status("sweep-preempt").is_terminal(), 900, "the sweep's end", 1.0
    )
    logs = jobs.get_job_logs("sweep-preempt")
    from ray.job_submission import JobStatus

    assert jobs.get_job_status("sweep-preempt") == JobStatus.SUCCEEDED, logs[-4000:]
    summary = last_json(logs, "completed")
    assert summary["trials"] == 6 and summary["completed"] == 6 and summary["errored"] == 0
    assert all(r["num_timesteps"] == 3000 for r in summary["results"])

    trials = read_status(storage, sweep_id)
    assert len(trials) == 6
    for trial in trials.values():
        fresh = [a for a in trial["attempts"] if a["resumed_from_step"] == 0]
        assert len(fresh) == 1, f"trial {trial['trial_id']} started from scratch twice: {trial}"
        assert trial["final"] and trial["step"] == 3000
    interrupted = [t for t in trials.values() if len(t["attempts"]) > 1]
    print(f"preempted host {victim}; attempts per trial:")
    for t in trials.values():
        print(" ", t["trial_id"], [(a["node"], a["resumed_from_step"]) for a in t["attempts"]])
    assert interrupted, "the preemption hit no trial"
    victim_ip = pod.hosts[victim].ip
    for trial in interrupted:
        first, *later = trial["attempts"]
        assert first["node"] == victim_ip
        assert all(a["resumed_from_step"] > 0 for a in later)


def test_distributed_trainer_on_preempted_host_is_retried_and_resumes(
    shared_ray_pod: RayPod,
) -> None:
    """3 trainers on 4 hosts; the host of one trainer is preempted after its first
    checkpoint. Ray retries the trainer, its bundle moves to the spare host, and it
    resumes from the checkpoint in the bucket."""
    pod = shared_ray_pod.pod
    storage = pod.bucket / "dist-preempt"
    proc = submit(
        shared_ray_pod,
        RAY_MODE="distributed",
        NUM_NODES="3",
        TPU_PER_TASK="8",
        BASE_SEED="7",
        STORAGE=storage.as_uri(),
        TRAIN_ARGS="--algo ppo --total-timesteps 6144 --alpha 0.4 --device cpu "
        "--checkpoint-every 512 --eval-episodes 2",
        SUBMISSION_ID="dist-preempt",
        NO_WAIT="1",
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    jobs = _job_client(shared_ray_pod)
    ip_to_host = {h.ip: i for i, h in enumerate(pod.hosts)}

    def checkpointed_worker() -> tuple[int, str] | None:
        assert not jobs.get_job_status("dist-preempt").is_terminal()
        for manifest_path in storage.glob("*/checkpoints/*/MANIFEST.json"):
            try:
                manifest = json.loads(manifest_path.read_text())
            except (OSError, ValueError):
                continue
            host = ip_to_host.get(manifest.get("node", ""))
            if host not in (None, 0) and manifest["step"] < 6144:
                return host, manifest["run_name"]
        return None

    victim, victim_run = wait_for(
        checkpointed_worker, 600, "a trainer's checkpoint on a worker host", 0.3
    )
    client.preempt(pod.run_dir, victim)

    wait_until(lambda: jobs.get_job_status("dist-preempt").is_terminal(), 900, "the job's end", 1.0)
    logs = jobs.get_job_logs("dist-preempt")
    summary = last_json(logs, "trainers")
    assert not summary["failures"], logs[-4000:]
    by_run = {t["run_name"]: t for t in summary["trainers"]}
    assert len(by_run) == 3 and all(t["num_timesteps"] == 6144 for t in by_run.values())
    retried = by_run[victim_run]
    assert retried["resumed_from_step"] > 0
    assert retried["node_ip"] != pod.hosts[victim].ip
    assert summary["distinct_nodes"] == 3


def test_submit_single_mode_trains_and_checkpoints_into_bucket(shared_ray_pod: RayPod) -> None:
    bucket = shared_ray_pod.pod.bucket_uri
    proc = submit(
        shared_ray_pod,
        RAY_MODE="single",
        WANDB_MODE="offline",
        STORAGE=f"{bucket}/single",
        TRAIN_ARGS="--algo ppo --total-timesteps 1024 --alpha 0.3 --device cpu "
        "--checkpoint-every 512 --eval-episodes 2",
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    result = last_json(proc.stdout, "run_name")
    assert result["num_timesteps"] == 1024
    run_dir = shared_ray_pod.pod.bucket / "single" / result["run_name"]
    assert (run_dir / "checkpoints" / "step-000000001024" / "MANIFEST.json").exists()
    assert (run_dir / "final" / "model.zip").exists()
    # the offline W&B run lives beside the checkpoints, ready for `wandb sync`
    assert list(run_dir.glob("wandb/offline-run-*/run-*.wandb"))
    assert result["node"] == shared_ray_pod.pod.hosts[0].ip  # the job's driver runs on the head


def test_submit_distributed_puts_three_trainers_on_three_nodes(shared_ray_pod: RayPod) -> None:
    bucket = shared_ray_pod.pod.bucket_uri
    proc = submit(
        shared_ray_pod,
        RAY_MODE="distributed",
        NUM_NODES="3",
        TPU_PER_TASK="8",
        BASE_SEED="42",
        STORAGE=f"{bucket}/dist",
        TRAIN_ARGS="--algo ppo --total-timesteps 1024 --alpha 0.4 --device cpu "
        "--checkpoint-every 512 --eval-episodes 2",
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    summary = last_json(proc.stdout, "trainers")
    trainers = summary["trainers"]
    assert len(trainers) == 3 and not summary["failures"]
    assert summary["distinct_nodes"] == 3
    pod_ips = {h.ip for h in shared_ray_pod.pod.hosts}
    ips = [t["node_ip"] for t in trainers]
    assert len(set(ips)) == 3 and set(ips) <= pod_ips
    assert sorted(t["seed"] for t in trainers) == [42, 43, 44]
    assert len({t["run_name"] for t in trainers}) == 3
    for t in trainers:
        assert t["num_timesteps"] == 1024
        assert (shared_ray_pod.pod.bucket / "dist" / t["run_name"] / "final" / "model.zip").exists()


def test_sweep_driver_resumes_after_head_loss_with_same_sweep_id(shared_ray_pod: RayPod) -> None:
    """The head host (GCS, dashboard and the sweep driver) is preempted mid-sweep. After
    the recovery loop (recreate, restart Ray, resubmit with the same SWEEP_ID) the
    driver restores the experiment from the bucket and finishes it: every trial
    completes once and the interrupted ones continue from their checkpoints."""
    from tests.support.fixtures_pod import start_ray, stop_ray

    pod = shared_ray_pod.pod
    storage = f"{pod.bucket_uri}/sweeps"
    variables = {
        "RAY_MODE": "sweep",
        "SWEEP_KIND": "ppo_rl_study",
        "SWEEP_METHOD": "grid",
        "SWEEP_RUN_CAP": "4",
        "NUM_NODES": "4",
        "AGENTS_PER_NODE": "1",
        "SWEEP_ID": "headloss",
        "STORAGE": storage,
        "SWEEP_ARGS": "--trial-timesteps 6000 --checkpoint-every 500",
    }
    proc = submit(shared_ray_pod, SUBMISSION_ID="sweep-1", NO_WAIT="1", timeout=300, **variables)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    exp_dir = pod.bucket / "sweeps" / "headloss"

    # inside pytest's timeout, so the message is shown
    wait_until(
        lambda: sweep_ready_to_preempt(storage, "headloss", exp_dir, trials=4),
        300,
        "the sweep going: every trial started and checkpointed, the state saved",
        0.3,
    )
    client.preempt(pod.run_dir, 0)

    # recovery loop: recreate the head VM, restart Ray everywhere, resubmit the sweep
    client.recreate(pod.run_dir, 0)
    ready = client.wait_for(pod.run_dir, lambda p: p.state == "READY", 120, "READY")
    stop_ray(ready)
    new_ray = start_ray(ready)
    proc = submit(new_ray, SUBMISSION_ID="sweep-2", timeout=1200, **variables)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "resuming sweep headloss" in proc.stdout
    summary = last_json(proc.stdout, "completed")
    assert summary["trials"] == 4 and summary["completed"] == 4 and summary["errored"] == 0

    trials = read_status(storage, "headloss")
    assert len(trials) == 4
    for trial in trials.values():
        fresh = [a for a in trial["attempts"] if a["resumed_from_step"] == 0]
        assert len(fresh) == 1, f"trial {trial['trial_id']} started from scratch twice: {trial}"
        assert trial["final"] and trial["step"] == 6000
    assert any(len(t["attempts"]) > 1 for t in trials.values())
