"""Launch plumbing without a cluster: sweep spaces, launcher argv, submit_ray_job.sh checks."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from engine import sweep
from engine.distributed import trainer_argvs
from engine.train import UsageError
from tests.support import REPO
from tests.support.forked_python import ForkedPython

# ------------------------------------------------------------------ sweeps


def test_ppo_rl_study_space_loads_for_both_methods() -> None:
    spec = sweep.load_spec("ppo_rl_study")
    assert spec.algo == "ppo" and spec.metric_goal == "maximize"
    points = sweep.grid_points(spec)
    assert len(points) == 4 * 3 * 3 * 2 * 2
    assert points == sweep.grid_points(spec)  # fixed order
    cfg = sweep.trial_config(
        spec,
        points[5],
        {"engine_storage": "/tmp/x", "wandb": "disabled", "trial_timesteps": 1000},
        run_name="s-t1",
    )
    assert cfg.total_timesteps == 1000 and cfg.alpha == points[5]["alpha"]
    assert cfg.hparams["n_steps"] == points[5]["n_steps"] and "alpha" not in cfg.hparams


def test_tune_param_space_random_and_grid_respect_run_cap() -> None:
    pytest.importorskip("ray.tune")
    spec = sweep.load_spec("ppo_rl_study")
    space, samples = sweep.tune_param_space(spec, "random", 7)
    assert samples == 7 and space["batch_size"] == 64
    space, samples = sweep.tune_param_space(spec, "grid", 5)
    assert samples == 1 and len(space["grid_point"]["grid_search"]) == 5


def _sweep(python: ForkedPython, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``python -m engine.sweep --storage DIR ARGS``, a child of the module's fork server."""
    return python(
        ["-m", "engine.sweep", "--storage", str(tmp_path / "s"), *args],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        timeout=120,
    )


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--kind", "nope"], "ppo_rl_study"),
        (["--method", "bayes"], "--method"),
        (["--run-cap", "0"], "--run-cap"),
        (["--backend", "wandb", "--wandb", "offline"], "cannot run offline"),
        (["--storage", "nosuch://b"], "--storage"),
    ],
)
def test_sweep_usage_errors_exit_2(
    python: ForkedPython, tmp_path: Path, args: list[str], needle: str
) -> None:
    proc = _sweep(python, tmp_path, *args)
    assert proc.returncode == 2, proc.stderr
    assert needle in proc.stderr.strip().splitlines()[-1]
    assert not (tmp_path / "s").exists()


# ------------------------------------------------------------------ distributed launcher


def test_trainer_argvs_seed_and_name_per_trainer() -> None:
    argvs = trainer_argvs("--algo ppo --total-timesteps 100000 --alpha 0.4 --device cpu", 4, 42)
    assert len(argvs) == 4
    seeds = [a[a.index("--seed") + 1] for a in argvs]
    names = [a[a.index("--run-name") + 1] for a in argvs]
    assert seeds == ["42", "43", "44", "45"]
    assert names == [f"ppo-behaviourmaze-v0-a0.4-s{s}" for s in seeds]
    named = trainer_argvs("--run-name exp --total-timesteps 10", 2, 0)
    assert [a[-1] for a in named] == ["exp-t0", "exp-t1"]  # argparse: the last --run-name wins


@pytest.mark.parametrize("bad", ["--algo sac", "--alpha 2", "--total-timesteps 5 --n-envs 2", "'x"])
def test_trainer_argvs_rejects_bad_train_args(bad: str) -> None:
    with pytest.raises(UsageError, match="--train-args"):
        trainer_argvs(bad, 2, 0)


def test_launcher_bad_train_args_exit_2() -> None:
    proc = subprocess.run(
        [sys.executable, str(REPO / "scripts/ray_distributed_train.py"),
         "--train-args", "--algo sac", "--num-nodes", "2"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2 and "--train-args" in proc.stderr


# ------------------------------------------------------------------ submit_ray_job.sh


def dry_run(**variables: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WANDB_", "RAY_", "SWEEP_"))}
    # PYTHON_LOCAL (it only builds JSON): this interpreter, not the python3 on PATH, which
    # here is a pyenv shim costing 0.1 s of CPU a call (as in tests/engine/test_bad_input.py)
    env.update(DRY_RUN="1", PYTHON_LOCAL=sys.executable, **variables)
    return subprocess.run(
        ["bash", str(REPO / "submit_ray_job.sh")],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def shown_command(stderr: str) -> list[str]:
    line = next(x for x in stderr.splitlines() if x.startswith("+ "))
    return shlex.split(line[2:])


def test_submit_single_default_is_the_seed_smoke_command() -> None:
    proc = dry_run()
    assert proc.returncode == 0, proc.stderr
    argv = shown_command(proc.stderr)
    sep = argv.index("--")
    assert argv[:sep][:7] == [
        "ray", "job", "submit", "--address", "http://localhost:8265", "--working-dir", ".",
    ]  # fmt: skip
    runtime_env = json.loads(argv[argv.index("--runtime-env-json") + 1])
    assert {".venv", ".git", "runs", "wandb"} <= set(runtime_env["excludes"])
    assert argv[sep + 1 :] == [
        "python", "-m", "engine.train", "--algo", "ppo", "--total-timesteps", "5000",
        "--alpha", "0.3", "--device", "cpu", "--wandb", "offline",
    ]  # fmt: skip


def test_submit_distributed_and_sweep_commands() -> None:
    proc = dry_run(
        RAY_MODE="distributed", NUM_NODES="4", TPU_PER_TASK="8",
        TRAIN_ARGS="--algo ppo --total-timesteps 100000 --alpha 0.4 --device cpu",
        RUNTIME_ENV_JSON='{"env_vars": {"A": "b"}, "excludes": ["data"]}',
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    argv = shown_command(proc.stderr)
    entry = argv[argv.index("--") + 1 :]
    assert entry[:2] == ["python", "scripts/ray_distributed_train.py"]
    assert entry[entry.index("--train-args") + 1].startswith("--algo ppo --total-timesteps 100000")
    assert entry[entry.index("--num-nodes") + 1] == "4" and "--base-seed" in entry
    runtime_env = json.loads(argv[argv.index("--runtime-env-json") + 1])
    assert runtime_env["env_vars"]["A"] == "b" and runtime_env["excludes"][0] == "data"

    proc = dry_run(
        RAY_MODE="sweep", SWEEP_KIND="ppo_rl_study", SWEEP_METHOD="random", SWEEP_RUN_CAP="900",
        NUM_NODES="4", AGENTS_PER_NODE="16", TPU_PER_TASK="0", WANDB_PROJECT="capstone_tpu",
        WANDB_ENTITY="someone",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    argv = shown_command(proc.stderr)
    entry = argv[argv.index("--") + 1 :]
    assert entry[:3] == ["python", "-m", "engine.sweep"]
    for flag, value in [
        ("--run-cap", "900"),
        ("--agents-per-node", "16"),
        ("--kind", "ppo_rl_study"),
    ]:
        assert entry[entry.index(flag) + 1] == value
    env_vars = json.loads(argv[argv.index("--runtime-env-json") + 1])["env_vars"]
    assert env_vars["WANDB_PROJECT"] == "capstone_tpu" and env_vars["WANDB_ENTITY"] == "someone"


def test_submit_never_shows_the_api_key(tmp_path: Path) -> None:
    secret = "wandb-secret-value-1234567890"
    proc = dry_run(WANDB_API_KEY=secret, TMPDIR=str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert secret not in proc.stdout + proc.stderr
    argv = shown_command(proc.stderr)
    assert "--runtime-env-json" not in argv and "--runtime-env" in argv  # key goes via a file
    assert "<redacted>" in proc.stderr
    assert not list(tmp_path.iterdir())  # the private runtime-env file is removed afterwards


@pytest.mark.parametrize(
    ("variables", "needle"),
    [
        ({"RAY_MODE": "cluster"}, "RAY_MODE"),
        ({"NUM_NODES": "four"}, "NUM_NODES"),
        ({"TPU_PER_TASK": "-1"}, "TPU_PER_TASK"),
        ({"RAY_ADDRESS": "localhost:8265"}, "RAY_ADDRESS"),
        ({"TRAIN_ARGS": "--hparams '{"}, "TRAIN_ARGS"),
        ({"RUNTIME_ENV_JSON": "{oops"}, "RUNTIME_ENV_JSON"),
        ({"RAY_MODE": "sweep", "SWEEP_KIND": "nope"}, "SWEEP_KIND"),
        ({"RAY_MODE": "sweep", "SWEEP_METHOD": "bayes"}, "SWEEP_METHOD"),
        ({"RAY_MODE": "sweep", "SWEEP_RUN_CAP": "0"}, "SWEEP_RUN_CAP"),
        ({"RAY_MODE": "sweep", "AGENTS_PER_NODE": "x"}, "AGENTS_PER_NODE"),
        ({"RAY_MODE": "sweep", "SWEEP_BACKEND": "wandb"}, "SWEEP_BACKEND=wandb"),
    ],
)
def test_submit_rejects_bad_variables(variables: dict[str, str], needle: str) -> None:
    proc = dry_run(**variables)
    assert proc.returncode == 2
    assert needle in proc.stderr and "+ ray" not in proc.stderr


def test_a_trainer_task_is_interruptible_even_where_sigint_was_inherited_ignored() -> None:
    """ray.cancel reaches a running task as ``_thread.interrupt_main()``; in a worker that
    inherited SIGINT ignored (a Ray node started from a background shell) it did nothing, and
    the launcher's notice never reached its trainers."""
    code = (
        "import _thread, signal, time\n"
        "from engine.distributed import interruptible_by_cancel\n"
        "signal.signal(signal.SIGINT, signal.SIG_IGN)  # as a worker of a node started by `cmd &`\n"
        "interruptible_by_cancel()\n"
        "try:\n"
        "    _thread.interrupt_main()\n"
        "    time.sleep(5)\n"
        "except KeyboardInterrupt:\n"
        "    print('interrupted')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.stdout.strip() == "interrupted", done.stderr[-2000:]
