"""Preemption with notice under Ray: a node's every process gets SIGTERM (raylet included),
then SIGKILL after the grace, as on a spot VM. The Tune trial / distributed trainer on it
writes a checkpoint at the step it reached; its retry elsewhere resumes from exactly there.

The tests share one ``engine.localray`` cluster on loopback (a bring-up is ~35 s on a busy
2-core box) with a head that runs no work (so the preempted node is never the head) and two
1-CPU workers. Each test finds it as a fresh one would be: a worker an earlier test preempted
replaced by a new node (on a new IP), its three nodes alive and no actor of an earlier job left.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from engine.localray import LocalRayCluster, local_ray_cluster
from engine.storage import MANIFEST, latest_checkpoint_step
from engine.sweep_tune import read_status
from tests.support import REPO
from tests.support.engine_helpers import engine_env, kill
from tests.support.waiting import wait_until

pytestmark = pytest.mark.slow
GRACE_S = 10.0
# The preempted trainers train no more steps than the notice needs, the retry the rest: each
# notice lands within a second of the trainer passing its trigger step (2048, 4096), and the
# totals leave ~8-10k steps after it (3 s even at 3000 steps/s), so the notice always comes
# mid-run; the retry's share is the test's main cost (it was 24k and 20k).
TUNE_TOTAL = 12000
DIST_TOTAL = 12288
# Steps of each trainer when only the driver gets the notice: no more than the notice needs,
# as the resumed run trains the rest. The launcher forwards it within a second of both
# trainers passing step 2048 (they checkpoint at ~2k); Tune's own stop takes ~10 s (a fixed
# wait, not CPU: 10.0 s at 600 and at 1100 steps/s each here), so its trials checkpoint at
# ~14k of 24k at 1100 steps/s: 32k leaves as much again for a faster machine.
LAUNCHER_TOTAL = 24000
SWEEP_TOTAL = 32000


def _node(cluster: LocalRayCluster, ip: str) -> Any:
    return next(n for n in cluster.nodes if n.ip == ip)


@pytest.fixture(scope="module")
def _shared_cluster() -> Iterator[LocalRayCluster]:
    with local_ray_cluster(n_nodes=3, cpus_per_node=1, head_cpus=0) as cluster:
        yield cluster


def _alive_actors(cluster: LocalRayCluster) -> list[dict[str, Any]] | None:
    """The cluster's ALIVE actors, by its dashboard's state API (None: no answer yet)."""
    url = (
        f"{cluster.dashboard_url}/api/v0/actors?detail=false&limit=100"
        "&filter_keys=state&filter_predicates=%3D&filter_values=ALIVE"
    )
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            body = json.loads(r.read().decode())
    except (OSError, ValueError):
        return None
    found: list[dict[str, Any]] = body["data"]["result"]["result"]
    return found


@pytest.fixture
def cluster(_shared_cluster: LocalRayCluster) -> LocalRayCluster:
    """The module's cluster as a fresh one would be: a new worker for each one an earlier
    test preempted, three nodes alive, no actor of an earlier job."""
    _shared_cluster.replace_preempted()

    def fresh() -> bool:
        return len(_shared_cluster.alive_nodes()) == 3 and _alive_actors(_shared_cluster) == []

    wait_until(fresh, 60, "the shared cluster: 3 nodes alive, no actor of an earlier job")
    return _shared_cluster


def _last_progress(text: str) -> int:
    found = re.findall(r"progress step=(\d+)/", text)
    return int(found[-1]) if found else 0


def _sigterm_once(
    argv: list[str], tmp_path: Path, ready: Callable[[str], bool], what: str, stop_s: float
) -> tuple[int, str]:
    """Start the driver, SIGTERM it (the head's notice) once ``ready`` holds for its log, and
    return its exit code and log; a driver that ends first fails with its log's tail."""
    log = tmp_path / "first.log"
    with open(log, "w") as fh:
        proc = subprocess.Popen(
            argv, cwd=tmp_path, env=engine_env(tmp_path), stdout=subprocess.PIPE, stderr=fh,
            text=True,
        )  # fmt: skip
    try:

        def started() -> bool:
            assert proc.poll() is None, log.read_text()[-4000:]
            return ready(log.read_text())

        wait_until(started, 300, what)
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=stop_s)
    finally:
        kill(proc)
    return proc.returncode, log.read_text()


def test_tune_trial_preempted_with_notice_resumes_from_the_step_reached(
    tmp_path: Path, cluster: LocalRayCluster
) -> None:
    """One trial, no periodic checkpoint before its end: without the notice a retry would
    start from step 0. Its node is preempted mid-run; Tune retries it on the other worker,
    which resumes from the notice checkpoint and ends at exactly the trial's total."""
    storage = f"file://{tmp_path / 'sweeps'}"
    log = tmp_path / "sweep.log"
    with open(log, "w") as fh:
        proc = subprocess.Popen(
            [sys.executable, "-m", "engine.sweep", "--kind", "ppo_rl_study", "--method", "grid",
             "--run-cap", "1", "--num-nodes", "2", "--cpus-per-node", "1", "--storage", storage,
             "--sweep-id", "noticed", "--trial-timesteps", str(TUNE_TOTAL),
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
    assert 0 < noticed_step < TUNE_TOTAL, trial
    assert later[-1]["resumed_from_step"] == noticed_step, trial
    assert later[-1]["node"] != victim.ip
    assert trial["final"] and trial["step"] == TUNE_TOTAL
    run = tmp_path / "sweeps" / "noticed" / "_runs" / f"noticed-{trial['trial_id']}"
    manifest = json.loads(
        (run / "checkpoints" / f"step-{noticed_step:012d}" / MANIFEST).read_text()
    )
    assert manifest["trigger"] == "notice" and manifest["node"] == victim.ip
    print(f"trial preempted at step {noticed_step}, resumed there on {later[-1]['node']}")


def test_distributed_trainer_preempted_with_notice_resumes_from_the_step_reached(
    tmp_path: Path, cluster: LocalRayCluster
) -> None:
    """One trainer (STRICT_SPREAD bundle on a worker), no periodic checkpoint before its
    end. Its node is preempted mid-run; Ray retries the task on the other worker, which
    resumes from the notice checkpoint and ends at exactly --total-timesteps."""
    storage = tmp_path / "dist"
    log = tmp_path / "launcher.log"
    # n_steps 256: the trainer acts on a notice once the PPO update in progress is done, and
    # the progress line the notice follows is printed just before an update. With SB3's 2048
    # (4096 samples x 10 epochs) that update took 6 s of the 10 s grace on a busy box, and
    # past 10 s on a busier one: killed before its checkpoint (and before the marker a
    # retry waits for), the trainer was retried from step 0. 512 samples take an eighth.
    train_args = (
        f"--algo ppo --env CartPole-v1 --n-envs 2 --total-timesteps {DIST_TOTAL} "
        f"--checkpoint-every 1000000 --storage file://{storage} --wandb disabled "
        """--eval-episodes 1 --log-every 512 --hparams '{"n_steps": 256}'"""
    )
    with open(log, "w") as fh:
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
    assert not summary["failures"] and trainer["num_timesteps"] == DIST_TOTAL
    assert trainer["node_ip"] != victim.ip
    noticed_step = trainer["resumed_from_step"]
    assert 0 < noticed_step < DIST_TOTAL, trainer
    manifest = json.loads(
        (
            storage / trainer["run_name"] / "checkpoints" / f"step-{noticed_step:012d}" / MANIFEST
        ).read_text()
    )
    assert manifest["trigger"] == "notice" and manifest["node"] == victim.ip
    assert latest_checkpoint_step(f"file://{storage}", trainer["run_name"]) == DIST_TOTAL
    print(f"trainer preempted at step {noticed_step}, resumed there on {trainer['node_ip']}")


def test_launcher_notice_reaches_every_trainer_and_the_job_resumes(
    tmp_path: Path, cluster: LocalRayCluster
) -> None:
    """The head's notice reaches the launcher (the job's driver): it forwards it to every
    running trainer, each writes a checkpoint at its step, and the launcher exits 75.
    Submitting the same command again resumes every trainer from exactly there."""
    storage = tmp_path / "dist"
    train_args = (
        f"--algo ppo --env CartPole-v1 --total-timesteps {LAUNCHER_TOTAL} "
        f"--checkpoint-every 1000000 --storage file://{storage} --wandb disabled "
        "--eval-episodes 1 --log-every 512"
    )
    argv = [sys.executable, str(REPO / "scripts/ray_distributed_train.py"),
            "--train-args", train_args, "--num-nodes", "2",
            "--address", cluster.gcs_address]  # fmt: skip

    def both_training(log: str) -> bool:
        found = re.findall(
            r"\(trainer-(\d) pid=[^)]*\)(?:\x1b\[0m)?\s*\[engine\] progress step=(\d+)/", log
        )
        return len({t for t, step in found if int(step) >= 2048}) == 2

    code, text = _sigterm_once(argv, tmp_path, both_training, "both trainers past 2048", 120)
    assert code == 75, text[-4000:]
    noticed = {}
    for line in text.splitlines():
        m = re.search(r"preemption notice: checkpoint step=(\d+) complete at (\S+)", line)
        if m:
            noticed[Path(m[2]).parent.parent.name] = int(m[1])
    assert len(noticed) == 2 and all(0 < s < LAUNCHER_TOTAL for s in noticed.values()), text[-4000:]

    again = subprocess.run(
        argv, cwd=tmp_path, env=engine_env(tmp_path), capture_output=True, text=True,
        timeout=900,
    )  # fmt: skip
    assert again.returncode == 0, again.stderr[-4000:]
    summary = json.loads(again.stdout.strip().splitlines()[-1])
    resumed = {t["run_name"]: t["resumed_from_step"] for t in summary["trainers"]}
    assert resumed == noticed
    assert all(t["num_timesteps"] == LAUNCHER_TOTAL for t in summary["trainers"])


def test_sweep_driver_notice_stops_tune_and_the_sweep_resumes(
    tmp_path: Path, cluster: LocalRayCluster
) -> None:
    """The head's notice reaches the sweep driver: Ray Tune stops the way it does on SIGUSR1
    (experiment state saved), the trials' trainers checkpoint at their steps, the driver exits
    75, and resubmitting the same sweep resumes every trial from its notice checkpoint."""
    storage = f"file://{tmp_path / 'sweeps'}"
    argv = [sys.executable, "-m", "engine.sweep", "--kind", "ppo_rl_study", "--method",
            "grid", "--run-cap", "2", "--num-nodes", "2", "--cpus-per-node", "1",
            "--storage", storage, "--sweep-id", "headnotice",
            "--trial-timesteps", str(SWEEP_TOTAL), "--checkpoint-every", "1000000",
            "--wandb", "disabled",
            "--address", cluster.gcs_address]  # fmt: skip

    def both_training(log: str) -> bool:
        return len(read_status(storage, "headnotice")) == 2 and _last_progress(log) >= 2048

    code, text = _sigterm_once(argv, tmp_path, both_training, "both trials training", 300)
    assert code == 75, text[-4000:]
    assert "preemption notice: sweep headnotice state saved" in text

    again = subprocess.run(
        argv, cwd=tmp_path, env=engine_env(tmp_path), capture_output=True, text=True,
        timeout=900,
    )  # fmt: skip
    assert again.returncode == 0, again.stderr[-4000:]
    assert "resuming sweep headnotice" in again.stderr
    summary = json.loads(again.stdout.strip().splitlines()[-1])
    assert summary["completed"] == 2 and summary["errored"] == 0
    for trial in read_status(storage, "headnotice").values():
        first, *later = trial["attempts"]
        assert later and 0 < first["last_step"] < SWEEP_TOTAL, trial
        assert later[0]["resumed_from_step"] == first["last_step"], trial
        assert trial["final"] and trial["step"] == SWEEP_TOTAL
