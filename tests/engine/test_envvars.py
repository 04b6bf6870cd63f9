"""The environment a job gets from the console reaches the engine: PHANTOM_JAX_PLATFORM becomes
JAX_PLATFORMS before jax is imported (also in trainer processes under Ray), and W&B's mode,
project, entity and dir come from WANDB_* when no flag is given. No W&B server is contacted.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.storage import MANIFEST, latest_checkpoint_step
from engine.trialproc import TrainerProcesses, remove_stale_dirs
from tests.support import REPO
from tests.support.engine_helpers import engine_env, wandb_records
from tests.support.forked_python import ForkedPython
from tests.support.trained_runs import TrainedRun
from tests.support.waiting import wait_until


def _validate(python: ForkedPython, tmp_path: Path, cmd: list[str], **env: str) -> dict:
    """``python CMD --validate-only`` (a child of the module's fork server): what it resolved."""
    proc = python([*cmd, "--validate-only"], cwd=tmp_path, env=engine_env(tmp_path, **env))
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout)  # type: ignore[no-any-return]


# ------------------------------------------------------------------ PHANTOM_JAX_PLATFORM


def test_phantom_jax_platform_wins_over_jax_platforms(python: ForkedPython, tmp_path: Path) -> None:
    out = _validate(
        python, tmp_path, ["-m", "engine.train"], PHANTOM_JAX_PLATFORM="cpu", JAX_PLATFORMS="tpu"
    )
    assert out["jax_platforms"] == "cpu"
    unset = _validate(python, tmp_path, ["-m", "engine.train"], JAX_PLATFORMS="tpu")
    assert unset["jax_platforms"] == "tpu"  # nothing to honour: left alone


@pytest.fixture(scope="module")
def zygote_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("zygote")


@pytest.fixture(scope="module")
def shared_trainers(zygote_home: Path) -> Iterator[TrainerProcesses]:
    """A zygote of this module's own (not the process-wide one), closed afterwards. Its
    start-up (torch, SB3 and the engine imported) is most of a test's CPU, so the module's
    tests share it; one that kills it leaves the next ``start`` to start a fresh one."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TMPDIR", str(zygote_home))  # its events dir goes there
        procs = TrainerProcesses()
    try:
        yield procs
    finally:
        procs.close()


@pytest.fixture
def trainers(
    shared_trainers: TrainerProcesses, zygote_home: Path, monkeypatch: pytest.MonkeyPatch
) -> TrainerProcesses:
    """The module's zygote; a test's first ``start`` starts it (again, if a test killed
    it) with this environment, which its trainers inherit."""
    monkeypatch.setenv("PHANTOM_JAX_PLATFORM", "cpu")
    monkeypatch.setenv("JAX_PLATFORMS", "tpu")
    monkeypatch.setenv("WANDB_MODE", "disabled")
    monkeypatch.chdir(zygote_home)
    # the work dirs of trainers it kills go with the module's tmp dir
    monkeypatch.setenv("TMPDIR", str(zygote_home))
    return shared_trainers


def test_event_dirs_of_processes_that_are_gone_are_removed(tmp_path: Path) -> None:
    """A Ray worker killed before it closed its trainers leaves its events dir behind: the
    next process to start trainers there removes it, and only it."""
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = tmp_path / f"phantom-trainers-{dead.pid}"
    live = tmp_path / f"phantom-trainers-{os.getppid()}"
    mine = tmp_path / f"phantom-trainers-{os.getpid()}"
    other = tmp_path / "phantom-trainers-notes"
    for path in (stale, live, mine, other):
        path.mkdir()
        (path / "0123456789ab.jsonl").write_text('{"event": "started"}\n')
    assert remove_stale_dirs(tmp_path) == [stale]
    assert not stale.exists() and live.exists() and mine.exists() and other.exists()


def _wait_exit(handle: object, timeout: float = 120) -> int:
    wait_until(lambda: handle.exit_code() is not None, timeout, "the trainer to exit")  # type: ignore[attr-defined]
    return int(handle.exit_code())  # type: ignore[attr-defined]


def test_trainer_process_sees_the_platform_and_runs_in_its_own_session(
    trainers: TrainerProcesses,
) -> None:
    """What a Tune trial or distributed trainer process sees: JAX_PLATFORMS from
    PHANTOM_JAX_PLATFORM (jax's own config agrees) and a session of its own (a group kill
    of its Ray worker spares it)."""
    handle = trainers.start("engine.trialproc:describe", {"env": ["WANDB_MODE"]})
    assert _wait_exit(handle) == 0
    (event,) = [e for e in handle.new_events() if e["event"] == "result"]
    seen = event["result"]
    assert seen["JAX_PLATFORMS"] == "cpu" and seen["jax_platforms"] == "cpu"
    assert seen["sid"] == seen["pid"] != os.getsid(0)
    assert seen["ppid"] == trainers.zygote_pid
    assert seen["env"] == {"WANDB_MODE": "disabled"}


def test_trainer_checkpoints_when_its_parent_dies(
    trainers: TrainerProcesses, tmp_path: Path
) -> None:
    """A trainer whose zygote (and Ray worker) is killed gets a notice through its parent-death
    signal: it writes a checkpoint at the step reached and exits, leaving nothing running."""
    # a first rollout, and its TensorBoard flush, after 128 steps
    argv = [
        "--algo", "ppo", "--env", "CartPole-v1", "--total-timesteps", "500000",
        "--checkpoint-every", "400000", "--run-name", "orphan", "--storage", str(tmp_path),
        "--wandb", "disabled", "--hparams", '{"n_steps": 128}', "--log-every", "128",
    ]  # fmt: skip
    handle = trainers.start("engine.distributed:trainer_main", {"argv": argv, "node": "127.0.0.1"})
    assert handle.pid is not None

    def logged_a_rollout() -> bool:  # SB3 flushes TensorBoard at the first rollout's end
        events = list((tmp_path / "orphan" / "tensorboard").glob("events.out.tfevents.*"))
        return bool(events) and events[0].stat().st_size > 200

    wait_until(logged_a_rollout, 120, "the first rollout")
    zygote = trainers.zygote_pid
    assert zygote is not None
    os.kill(zygote, signal.SIGKILL)

    def gone() -> bool:
        try:
            os.kill(handle.pid, 0)  # type: ignore[arg-type]
        except ProcessLookupError:
            return True
        state = Path(f"/proc/{handle.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        return state == "Z"

    wait_until(gone, 120, "the orphaned trainer to checkpoint and exit")
    step = latest_checkpoint_step(str(tmp_path), "orphan")
    assert step is not None and 0 < step < 400000
    manifest = json.loads(
        (tmp_path / "orphan" / "checkpoints" / f"step-{step:012d}" / MANIFEST).read_text()
    )
    assert manifest["trigger"] == "notice"


# ------------------------------------------------------------------ W&B settings


@pytest.mark.parametrize("mode", ["offline", "disabled", "online"])
def test_wandb_settings_come_from_the_environment(
    python: ForkedPython, tmp_path: Path, mode: str
) -> None:
    """What the console sets for a job (by env var name) is what the job uses when no flag
    says otherwise; online is only resolved, never contacted (the key is a dummy and the
    base URL a closed loopback port)."""
    env = {
        "WANDB_MODE": mode,
        "WANDB_PROJECT": "capstone_tpu",
        "WANDB_ENTITY": "someone",
        "WANDB_DIR": str(tmp_path / "wb"),
        "WANDB_API_KEY": "dummy-key-for-validation",
        "WANDB_BASE_URL": "http://127.0.0.1:9",
    }
    out = _validate(python, tmp_path, ["-m", "engine.train"], **env)
    assert out["wandb"] == {
        "mode": mode,
        "project": "capstone_tpu",
        "entity": "someone",
        "dir": str(tmp_path / "wb"),
        "api_key_set": True,
    }
    flag = _validate(python, tmp_path, ["-m", "engine.train", "--wandb", "disabled"], **env)
    assert flag["wandb"]["mode"] == "disabled"  # a flag still wins
    sweep = _validate(python, tmp_path, ["-m", "engine.sweep"], **env)
    assert (sweep["args"]["wandb"], sweep["args"]["wandb_project"]) == (mode, "capstone_tpu")
    launcher = _validate(
        python,
        tmp_path,
        [str(REPO / "scripts/ray_distributed_train.py"), "--num-nodes", "2", "--train-args",
         "--algo ppo"],
        **env,
    )  # fmt: skip
    assert "--wandb" not in launcher["trainers"][0]  # trainers resolve it from their env


# A job started with WANDB_MODE runs in that mode. The runs are shared (tests/engine/conftest.py):
# the seed's smoke command (test_train reads it too) and the advised run (test_checkpoint_auto
# reads it too), each started with WANDB_MODE, WANDB_PROJECT and WANDB_DIR and no --wandb.


def _offline_runs(run: TrainedRun) -> list[Path]:
    return list(Path(run.env["WANDB_DIR"]).glob("wandb/offline-run-*/run-*.wandb"))


def test_a_job_started_with_wandb_mode_offline_runs_offline(smoke_run: TrainedRun) -> None:
    assert smoke_run.env["WANDB_MODE"] == "offline" and "--wandb" not in smoke_run.proc.args
    assert smoke_run.result["wandb_mode"] == "offline"
    (run_file,) = _offline_runs(smoke_run)
    (run,) = [r.run for r in wandb_records(run_file) if r.WhichOneof("record_type") == "run"][:1]
    assert run.project == "capstone_tpu"


def test_a_job_started_with_wandb_mode_disabled_runs_disabled(advised_run: TrainedRun) -> None:
    assert advised_run.env["WANDB_MODE"] == "disabled" and "--wandb" not in advised_run.proc.args
    assert advised_run.result["wandb_mode"] == "disabled"
    assert _offline_runs(advised_run) == [] and advised_run.result["wandb_artifact"] is None
