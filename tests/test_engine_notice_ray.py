"""Preemption with notice under Ray: a node's every process gets SIGTERM (raylet included),
then SIGKILL after the grace, as on a spot VM. The Tune trial / distributed trainer on it
writes a checkpoint at the step it reached; its retry elsewhere resumes from exactly there.

Clusters are ``engine.localray`` clusters on loopback with a head that runs no work (so the
preempted node is never the head) and two 1-CPU workers.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from engine_support import REPO, engine_env, kill
from waiting import wait_until

from engine.localray import LocalRayCluster, local_ray_cluster
from engine.storage import MANIFEST, latest_checkpoint_step
from engine.sweep_tune import read_status

pytestmark = pytest.mark.slow
GRACE_S = 10.0


def _node(cluster: LocalRayCluster, ip: str) -> Any:
    return next(n for n in cluster.nodes if n.ip == ip)


def _last_progress(text: str) -> int:
    found = re.findall(r"progress step=(\d+)/", text)
    return int(found[-1]) if found else 0


def test_tune_trial_preempted_with_notice_resumes_from_the_step_reached(tmp_path: Path) -> None:
    """One trial, no periodic checkpoint before its end: without the notice a retry would
    start from step 0. Its node is preempted mid-run; Tune retries it on the other worker,
    which resumes from the notice checkpoint and ends at exactly the trial's total."""
    storage = f"file://{tmp_path / 'sweeps'}"
    log = tmp_path / "sweep.log"
    with (
        local_ray_cluster(n_nodes=3, cpus_per_node=1, head_cpus=0) as cluster,
        open(log, "w") as fh,
    ):
        proc = subprocess.Popen(
            [sys.executable, "-m", "engine.sweep", "--kind", "ppo_rl_study", "--method", "grid",
             "--run-cap", "1", "--num-nodes", "2", "--cpus-per-node", "1", "--storage", storage,
             "--sweep-id", "noticed", "--trial-timesteps", "24000",
             "--checkpoint-every", "1000000", "--wandb", "disabled",
             "--address", cluster.gcs_address],
            cwd=tmp_path, env=engine_env(tmp_path), stdout=subprocess.PIPE, stderr=fh, text=True,
        )  # fmt: skip
        try:

            def training() -> bool:
                assert proc.poll() is None, log.read_text()[-4000:]
                trials = list(read_status(storage, "noticed").values())
                return bool(trials) and _last_progress(log.read_text()) >= 2048

            wait_until(training, 300, "the trial to train past step 2048")
            (trial,) = read_status(storage, "noticed").values()
            victim = _node(cluster, trial["attempts"][-1]["node"])
            cluster.preempt_node(victim, GRACE_S)
            out, _ = proc.communicate(timeout=900)
        finally:
            kill(proc)
    text = log.read_text()
    assert proc.returncode == 0, text[-4000:]
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["completed"] == 1 and summary["errored"] == 0
    (trial,) = read_status(storage, "noticed").values()
    first, *later = trial["attempts"]
    assert first["node"] == victim.ip and later, trial
    noticed_step = first["last_step"]
    assert 0 < noticed_step < 24000, trial
    assert later[-1]["resumed_from_step"] == noticed_step, trial
    assert later[-1]["node"] != victim.ip
    assert trial["final"] and trial["step"] == 24000
    run = tmp_path / "sweeps" / "noticed" / "_runs" / f"noticed-{trial['trial_id']}"
    manifest = json.loads(
        (run / "checkpoints" / f"step-{noticed_step:012d}" / MANIFEST).read_text()
    )
    assert manifest["trigger"] == "notice" and manifest["node"] == victim.ip
    print(f"trial preempted at step {noticed_step}, resumed there on {later[-1]['node']}")


def test_distributed_trainer_preempted_with_notice_resumes_from_the_step_reached(
    tmp_path: Path,
) -> None:
    """One trainer (STRICT_SPREAD bundle on a worker), no periodic checkpoint before its
    end. Its node is preempted mid-run; Ray retries the task on the other worker, which
    resumes from the notice checkpoint and ends at exactly --total-timesteps."""
    storage = tmp_path / "dist"
    log = tmp_path / "launcher.log"
    train_args = (
        f"--algo ppo --env CartPole-v1 --n-envs 2 --total-timesteps 40000 --checkpoint-every "
        f"1000000 --storage file://{storage} --wandb disabled --eval-episodes 1 --log-every 512"
    )
    with (
        local_ray_cluster(n_nodes=3, cpus_per_node=1, head_cpus=0) as cluster,
        open(log, "w") as fh,
    ):
        proc = subprocess.Popen(
            [sys.executable, str(REPO / "scripts/ray_distributed_train.py"),
             "--train-args", train_args, "--num-nodes", "1", "--max-retries", "2",
             "--address", cluster.gcs_address],
            cwd=tmp_path, env=engine_env(tmp_path), stdout=subprocess.PIPE, stderr=fh, text=True,
        )  # fmt: skip
        try:

            def training() -> bool:
                assert proc.poll() is None, log.read_text()[-4000:]
                return _last_progress(log.read_text()) >= 4096

            wait_until(training, 300, "the trainer to train past step 4096")
            ip = re.findall(r"trainer 0 on node ([0-9.]+)", log.read_text())[-1]
            victim = _node(cluster, ip)
            cluster.preempt_node(victim, GRACE_S)
            out, _ = proc.communicate(timeout=900)
        finally:
            kill(proc)
    text = log.read_text()
    assert proc.returncode == 0, text[-4000:]
    summary = json.loads(out.strip().splitlines()[-1])
    (trainer,) = summary["trainers"]
    assert not summary["failures"] and trainer["num_timesteps"] == 40000
    assert trainer["node_ip"] != victim.ip
    noticed_step = trainer["resumed_from_step"]
    assert 0 < noticed_step < 40000, trainer
    manifest = json.loads(
        (
            storage / trainer["run_name"] / "checkpoints" / f"step-{noticed_step:012d}" / MANIFEST
        ).read_text()
    )
    assert manifest["trigger"] == "notice" and manifest["node"] == victim.ip
    assert latest_checkpoint_step(f"file://{storage}", trainer["run_name"]) == 40000
    print(f"trainer preempted at step {noticed_step}, resumed there on {trainer['node_ip']}")
