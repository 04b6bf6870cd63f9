"""The engine's share of the bad-input corpus, table-driven: every flag of engine.train,
engine.sweep, the distributed launcher and benchmarks.engine_suite, the engine's environment
variables, submit_ray_job.sh's variables and runtime-env JSON, and binary, huge, missing,
directory and unwritable paths where a path is taken.

Each case must exit non-zero (2 for usage) with a message naming the field, print no
traceback and nothing on stdout, create nothing, and start nothing: no torch, SB3, jax,
wandb or ray import (what would make a rejection slow or half-act), no ``ray`` command run.
Wall times are printed per case (performance is not asserted in tests).

The entry points run as children of one fork server (tests/support/forkrun.py): each case is
still a process of its own with its own argv, cwd, environment and exit, without the
interpreter start-up that made this module cost half a minute of CPU.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.support import REPO
from tests.support.engine_helpers import engine_env
from tests.support.forkrun import ForkServer

# Runs an engine entry point exactly as `python -m X` / `python path` would, then records its
# exit code and which heavy libraries it imported (run by the fork server as `python -c`).
RUNNER = """
import json, os, runpy, sys
kind, target, *args = sys.argv[1:]
sys.argv = [target, *args]
code = 0
try:
    if kind == "module":
        runpy.run_module(target, run_name="__main__", alter_sys=True)
    else:
        runpy.run_path(target, run_name="__main__")
except SystemExit as exc:
    code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
heavy = sorted(m for m in ("torch", "stable_baselines3", "jax", "wandb", "ray") if m in sys.modules)
with open(os.environ["PHANTOM_TEST_REPORT"], "w") as fh:
    json.dump({"code": code, "heavy": heavy}, fh)
sys.exit(code)
"""

ENTRY = {
    "train": ("module", "engine.train"),
    "sweep": ("module", "engine.sweep"),
    "launcher": ("path", str(REPO / "scripts/ray_distributed_train.py")),
    "bench": ("module", "benchmarks.engine_suite"),
}
TIMES: list[tuple[float, str]] = []


@dataclass
class Case:
    cmd: str  # train | sweep | launcher | bench | submit
    args: list[str] = field(default_factory=list)  # flags (or, for submit, unused)
    env: dict[str, str] = field(default_factory=dict)  # env vars / submit variables
    needle: str = ""
    code: int = 2

    def __str__(self) -> str:
        shown = " ".join(a if len(a) < 40 else a[:20] + "..." for a in self.args)
        env = " ".join(f"{k}={v[:20]}" for k, v in self.env.items())
        return f"{self.cmd} {env} {shown}".strip()


@pytest.fixture(scope="module")
def server() -> Iterator[ForkServer]:
    """The fork server every case's entry point runs under."""
    home = Path(tempfile.mkdtemp(prefix="phantom-forkserver-"))
    fork = ForkServer(home, engine_env(home))
    yield fork
    fork.close()
    shutil.rmtree(home, ignore_errors=True)


@pytest.fixture(scope="module")
def files() -> Iterator[dict[str, str]]:
    """Paths for the path-taking fields, in a directory others may traverse (for the
    unprivileged-user case)."""
    root = Path(tempfile.mkdtemp(prefix="phantom-badinput-", dir="/tmp"))
    root.chmod(0o755)
    (root / "binary.json").write_bytes(bytes(range(256)) * 64)
    (root / "huge.json").write_text(
        '{"parameters": {"a": {"values": [' + "1," * 1_100_000 + "1]}}}"
    )
    (root / "list.json").write_text("[1, 2, 3]")
    (root / "dir.json").mkdir()
    (root / "badparam.json").write_text('{"parameters": {"gamma": {"distribution": "uniform"}}}')
    (root / "badvalue.json").write_text('{"parameters": {"n_steps": {"values": [64, -1]}}}')
    (root / "unknown.json").write_text('{"parameters": {"no_such_kwarg": {"value": 1}}}')
    (root / "badtype.json").write_text(
        '{"fixed": {"total_timesteps": "lots"}, "parameters": {"alpha": {"value": 0.1}}}'
    )
    # issue 36: a space the engine's own flags refuse, and keys/methods it used to ignore
    (root / "zeroenvs.json").write_text('{"parameters": {"n_envs": {"values": [0, 1]}}}')
    (root / "fixedzero.json").write_text(
        '{"fixed": {"n_envs": 0}, "parameters": {"alpha": {"value": 0.1}}}'
    )
    (root / "alpha7.json").write_text('{"parameters": {"alpha": {"values": [0.2, 7]}}}')
    (root / "fixd.json").write_text(
        '{"fixd": {"n_envs": 2}, "parameters": {"alpha": {"value": 0.1}}}'
    )
    (root / "vaules.json").write_text('{"parameters": {"alpha": {"vaules": [0.1]}}}')
    (root / "bayes.json").write_text('{"method": "bayes", "parameters": {"alpha": {"value": 0.1}}}')
    (root / "gridfile.json").write_text(
        '{"method": "grid", "parameters": {"alpha": {"values": [0.1]}}}'
    )
    (root / "a-file").write_text("not a directory")
    locked = root / "locked"
    locked.mkdir()
    _make_unwritable(locked)
    yield {
        "root": str(root),
        "binary": str(root / "binary.json"),
        "huge": str(root / "huge.json"),
        "list": str(root / "list.json"),
        "dir": str(root / "dir.json"),
        "missing": str(root / "missing.json"),
        "badparam": str(root / "badparam.json"),
        "badvalue": str(root / "badvalue.json"),
        "unknown": str(root / "unknown.json"),
        "badtype": str(root / "badtype.json"),
        "file": str(root / "a-file"),
        **{
            name: str(root / f"{name}.json")
            for name in ("zeroenvs", "fixedzero", "alpha7", "fixd", "vaules", "bayes", "gridfile")
        },
        "locked": str(locked / "runs"),
    }
    _make_unwritable(locked, undo=True)
    shutil.rmtree(root, ignore_errors=True)


LONG = "x" * 70_000  # over every flag's 64 KiB bound; under Linux's 128 KiB per argument
NAME_TOO_LONG = "/tmp/" + "d" * 5000  # a path no filesystem accepts
BINARY = "\udcff\udcfe\x01"  # invalid UTF-8 bytes on the command line (surrogate-escaped)

TRAIN = [
    Case("train", ["--algo", "sac"], needle="--algo"),
    Case("train", ["--total-timesteps", "0"], needle="--total-timesteps"),
    Case("train", ["--total-timesteps", "1e99"], needle="--total-timesteps"),
    Case("train", ["--total-timesteps", LONG], needle="--total-timesteps"),
    Case("train", ["--total-timesteps", "5001", "--n-envs", "2"], needle="--n-envs"),
    Case("train", ["--alpha", "1.5"], needle="--alpha"),
    Case("train", ["--alpha", "nan"], needle="--alpha"),
    Case("train", ["--alpha", "auto", "--algo", "dqn"], needle="--alpha auto"),
    Case("train", ["--alpha", "auto", "--env", "CartPole-v1"], needle="--alpha auto"),
    Case("train", ["--device", "tpu"], needle="--device"),
    Case("train", ["--seed", "-1"], needle="--seed"),
    Case("train", ["--n-envs", "0"], needle="--n-envs"),
    Case("train", ["--env", "NoSuchEnv-v0"], needle="--env"),
    Case("train", ["--env", BINARY], needle="--env"),
    Case("train", ["--storage", "nosuchproto://x/y"], needle="--storage"),
    Case("train", ["--storage", LONG], needle="--storage"),
    Case("train", ["--storage", NAME_TOO_LONG], needle="--storage"),
    Case("train", ["--storage", "{file}"], needle="--storage"),
    Case("train", ["--storage", "{file}/sub"], needle="--storage"),
    Case("train", ["--storage", "/proc/sys/phantom-runs"], needle="--storage"),
    Case("train", ["--storage", "{locked}"], needle="--storage"),
    # root passes every mode check: only creating a directory shows these refuse one
    Case("train", ["--storage", "/proc/x/y"], needle="--storage"),
    Case("train", ["--storage", "/sys/phantom/runs"], needle="--storage"),
    Case("train", ["--storage", "{locked}/deeper/runs"], needle="--storage"),
    Case("train", ["--storage", "{file}/sub/deeper"], needle="--storage"),
    Case("train", ["--checkpoint-every", "0"], needle="--checkpoint-every"),
    Case("train", ["--checkpoint-every", "-1"], needle="--checkpoint-every"),
    Case("train", ["--checkpoint-every", "often"], needle="--checkpoint-every"),
    Case(
        "train",
        ["--checkpoint-every", "auto"],
        env={"PHANTOM_CHECKPOINT_ADVICE_STEPS": "lots"},
        needle="PHANTOM_CHECKPOINT_ADVICE_STEPS",
    ),
    Case(
        "train",
        ["--checkpoint-every", "auto"],
        env={"PHANTOM_CHECKPOINT_ADVICE_STEPS": "0"},
        needle="PHANTOM_CHECKPOINT_ADVICE_STEPS",
    ),
    Case(
        "train",
        ["--checkpoint-every", "auto"],
        env={"PHANTOM_CHECKPOINT_ADVICE_STEPS": "-4096"},
        needle="PHANTOM_CHECKPOINT_ADVICE_STEPS",
    ),
    Case("train", ["--run-name", "../escape"], needle="--run-name"),
    Case("train", ["--run-name", "a" * 200], needle="--run-name"),
    Case("train", ["--wandb", "cloud"], needle="--wandb"),
    Case("train", ["--wandb", "online"], needle="WANDB_API_KEY"),
    Case("train", ["--wandb-project", LONG], needle="--wandb-project"),
    Case("train", ["--wandb-entity", LONG], needle="--wandb-entity"),
    Case("train", ["--hparams", "{"], needle="--hparams"),
    Case("train", ["--hparams", "[1]"], needle="--hparams"),
    Case("train", ["--hparams", '{"no_such_kwarg": 1}'], needle="--hparams"),
    Case("train", ["--hparams", '{"n_steps": -4}'], needle="--hparams"),
    Case("train", ["--hparams", '{"gamma": "high"}'], needle="--hparams"),
    Case("train", ["--hparams", BINARY], needle="--hparams"),
    Case("train", ["--hparams", '{"a": "' + "x" * 65_600 + '"}'], needle="--hparams"),
    Case("train", ["--n-levels", "0"], needle="--n-levels"),
    Case("train", ["--maze-size", "2"], needle="--maze-size"),
    Case("train", ["--vec-normalize=yes"], needle="--vec-normalize"),
    Case("train", ["--vec-env", "forkserver"], needle="--vec-env"),
    Case("train", ["--keep-checkpoints", "0"], needle="--keep-checkpoints"),
    Case("train", ["--eval-episodes", "-1"], needle="--eval-episodes"),
    Case("train", ["--log-every", "0"], needle="--log-every"),
    Case("train", ["--torch-threads", "0"], needle="--torch-threads"),
    Case("train", ["--validate-only=1"], needle="--validate-only"),
    Case("train", ["--no-such-flag"], needle="--no-such-flag"),
    Case("train", [], env={"WANDB_MODE": "cloud"}, needle="WANDB_MODE"),
    Case("train", [], env={"WANDB_MODE": "online"}, needle="WANDB_MODE=online"),
    Case("train", [], env={"PHANTOM_JAX_PLATFORM": "quantum"}, needle="PHANTOM_JAX_PLATFORM"),
    Case("train", [], env={"PHANTOM_NOTICE_GRACE_S": "soon"}, needle="PHANTOM_NOTICE_GRACE_S"),
    Case("train", [], env={"PHANTOM_STORAGE": "nosuch://b"}, needle="--storage"),
]
SWEEP = [
    Case("sweep", ["--kind", "nope"], needle="--kind"),
    Case("sweep", ["--kind", "{binary}"], needle="--kind"),
    Case("sweep", ["--kind", "{huge}"], needle="--kind"),
    Case("sweep", ["--kind", "{list}"], needle="--kind"),
    Case("sweep", ["--kind", "{dir}"], needle="--kind"),
    Case("sweep", ["--kind", "{missing}"], needle="--kind"),
    Case("sweep", ["--kind", "{badparam}"], needle="--kind"),
    Case("sweep", ["--kind", "{badvalue}"], needle="n_steps"),
    Case("sweep", ["--kind", "{unknown}"], needle="no_such_kwarg"),
    Case("sweep", ["--kind", "{badtype}"], needle="--kind"),
    Case("sweep", ["--kind", LONG], needle="--kind"),
    Case("sweep", ["--method", "bayes"], needle="--method"),
    Case("sweep", ["--kind", "{zeroenvs}"], needle="n_envs"),  # was a ZeroDivisionError
    Case("sweep", ["--kind", "{fixedzero}"], needle="n_envs"),
    Case("sweep", ["--kind", "{alpha7}"], needle="alpha"),  # was accepted
    Case("sweep", ["--kind", "{fixd}"], needle="'fixd'"),  # was ignored
    Case("sweep", ["--kind", "{vaules}"], needle="'vaules'"),
    Case("sweep", ["--kind", "{bayes}"], needle="method 'bayes'"),  # was silently random
    Case("sweep", ["--kind", "{gridfile}", "--method", "random"], needle="--method random"),
    Case("sweep", ["--run-cap", "0"], needle="--run-cap"),
    Case("sweep", ["--num-nodes", "-1"], needle="--num-nodes"),
    Case("sweep", ["--agents-per-node", "x"], needle="--agents-per-node"),
    Case("sweep", ["--tpu-per-task", "nan"], needle="--tpu-per-task"),
    Case("sweep", ["--cpus-per-node", "-2"], needle="--cpus-per-node"),
    Case("sweep", ["--backend", "optuna"], needle="--backend"),
    Case("sweep", ["--backend", "wandb", "--wandb", "offline"], needle="--backend wandb"),
    Case("sweep", ["--sweep-id", "a/b"], needle="--sweep-id"),
    Case("sweep", ["--storage", "nosuch://b"], needle="--storage"),
    Case("sweep", ["--storage", "{file}"], needle="--storage"),
    Case("sweep", ["--address", "not an address"], needle="--address"),
    Case("sweep", ["--address", "127.0.0.1:1"], needle="--address", code=1),
    Case("sweep", ["--max-failures", "-1"], needle="--max-failures"),
    Case("sweep", ["--trial-timesteps", "0"], needle="--trial-timesteps"),
    Case("sweep", ["--checkpoint-every", "0"], needle="--checkpoint-every"),
    Case("sweep", ["--seed", "-3"], needle="--seed"),
    Case("sweep", ["--wandb", "cloud"], needle="--wandb"),
    Case("sweep", ["--wandb-project", LONG], needle="--wandb-project"),
    Case("sweep", ["--wandb-entity", LONG], needle="--wandb-entity"),
    Case("sweep", ["--validate-only=1"], needle="--validate-only"),
    Case("sweep", [], env={"WANDB_MODE": "cloud"}, needle="WANDB_MODE"),
    Case("sweep", [], env={"PHANTOM_JAX_PLATFORM": "quantum"}, needle="PHANTOM_JAX_PLATFORM"),
]
OK_TRAIN_ARGS = "--algo ppo --total-timesteps 2048"
LAUNCHER = [
    Case("launcher", ["--num-nodes", "2"], needle="--train-args"),
    Case("launcher", ["--train-args", "", "--num-nodes", "2"], needle="--train-args"),
    Case("launcher", ["--train-args", "--algo sac", "--num-nodes", "2"], needle="--train-args"),
    Case("launcher", ["--train-args", "--alpha 'x", "--num-nodes", "2"], needle="--train-args"),
    Case("launcher", ["--train-args", LONG, "--num-nodes", "2"], needle="--train-args"),
    Case("launcher", ["--train-args", OK_TRAIN_ARGS, "--num-nodes", "0"], needle="--num-nodes"),
    Case("launcher", ["--train-args", OK_TRAIN_ARGS], needle="--num-nodes"),
    Case(
        "launcher",
        ["--train-args", OK_TRAIN_ARGS, "--num-nodes", "2", "--tpu-per-task", "-8"],
        needle="--tpu-per-task",
    ),
    Case(
        "launcher",
        ["--train-args", OK_TRAIN_ARGS, "--num-nodes", "2", "--cpus-per-task", "0"],
        needle="--cpus-per-task",
    ),
    Case(
        "launcher",
        ["--train-args", OK_TRAIN_ARGS, "--num-nodes", "2", "--base-seed", "-1"],
        needle="--base-seed",
    ),
    Case(
        "launcher",
        ["--train-args", OK_TRAIN_ARGS, "--num-nodes", "2", "--address", "http://x"],
        needle="--address",
    ),
    Case(
        "launcher",
        ["--train-args", OK_TRAIN_ARGS, "--num-nodes", "2", "--address", "127.0.0.1:1"],
        needle="--address",
        code=1,
    ),
    Case(
        "launcher",
        ["--train-args", OK_TRAIN_ARGS, "--num-nodes", "2", "--max-retries", "-1"],
        needle="--max-retries",
    ),
    Case(
        "launcher",
        ["--train-args", OK_TRAIN_ARGS, "--num-nodes", "2", "--placement", "pack"],
        needle="--placement",
    ),
    Case(
        "launcher",
        ["--train-args", OK_TRAIN_ARGS, "--num-nodes", "2", "--placement-timeout", "0"],
        needle="--placement-timeout",
    ),
    Case(
        "launcher",
        ["--train-args", OK_TRAIN_ARGS, "--num-nodes", "2", "--validate-only=1"],
        needle="--validate-only",
    ),
    Case(
        "launcher",
        ["--train-args", OK_TRAIN_ARGS, "--num-nodes", "2"],
        env={"PHANTOM_JAX_PLATFORM": "quantum"},
        needle="PHANTOM_JAX_PLATFORM",
    ),
]
BENCH = [
    Case("bench", ["--n-envs", "0"], needle="--n-envs"),
    Case("bench", ["--n-envs", "four"], needle="--n-envs"),
    Case("bench", ["--quick=1"], needle="--quick"),
    Case("bench", ["--skip-sweep=yes"], needle="--skip-sweep"),
    Case("bench", ["--sweep-trials", "0"], needle="--sweep-trials"),
    Case("bench", ["--sweep-trial-steps", "-5"], needle="--sweep-trial-steps"),
    Case("bench", ["--notice-repeat", "0"], needle="--notice-repeat"),
    Case("bench", ["--only", "everything"], needle="--only"),
    Case("bench", ["--engine-root", "{missing}"], needle="--engine-root"),
    Case("bench", ["--engine-root", "{binary}"], needle="--engine-root"),
]
HUGE_JSON = '{"env_vars": {"A": "' + "x" * 100_000 + '"}'  # unterminated
SUBMIT = [
    Case("submit", env={"RAY_MODE": "cluster"}, needle="RAY_MODE"),
    Case("submit", env={"RAY_ADDRESS": "localhost:8265"}, needle="RAY_ADDRESS"),
    Case("submit", env={"RAY_ADDRESS": "http://" + "h" * 100_000}, needle="RAY_ADDRESS"),
    Case("submit", env={"NUM_NODES": "four"}, needle="NUM_NODES"),
    Case("submit", env={"NUM_NODES": "0"}, needle="NUM_NODES"),
    Case("submit", env={"NUM_NODES": "9" * 30}, needle="NUM_NODES"),
    Case("submit", env={"TPU_PER_TASK": "-1"}, needle="TPU_PER_TASK"),
    Case("submit", env={"BASE_SEED": "x"}, needle="BASE_SEED"),
    Case("submit", env={"WANDB_MODE": "cloud"}, needle="WANDB_MODE"),
    Case("submit", env={"TRAIN_ARGS": "   "}, needle="TRAIN_ARGS"),
    Case("submit", env={"TRAIN_ARGS": "--hparams '{"}, needle="TRAIN_ARGS"),
    Case("submit", env={"TRAIN_ARGS": "--algo sac"}, needle="TRAIN_ARGS"),
    Case("submit", env={"TRAIN_ARGS": "--hparams " + BINARY}, needle="TRAIN_ARGS"),
    Case("submit", env={"TRAIN_ARGS": "--run-name " + "r" * 100_000}, needle="TRAIN_ARGS"),
    Case("submit", env={"RAY_MODE": "distributed", "TRAIN_ARGS": "--alpha 7"}, needle="TRAIN_ARGS"),
    Case("submit", env={"STORAGE": "nosuch://b"}, needle="STORAGE"),
    Case("submit", env={"RUNTIME_ENV_JSON": "{oops"}, needle="RUNTIME_ENV_JSON"),
    Case("submit", env={"RUNTIME_ENV_JSON": "[1, 2]"}, needle="RUNTIME_ENV_JSON"),
    Case("submit", env={"RUNTIME_ENV_JSON": HUGE_JSON}, needle="RUNTIME_ENV_JSON"),
    Case("submit", env={"RUNTIME_ENV_JSON": '{"env_vars": {"A": 1}}'}, needle="RUNTIME_ENV_JSON"),
    Case(
        "submit",
        env={"RUNTIME_ENV_JSON": '{"env_vars": {"PHANTOM_JAX_PLATFORM": "quantum"}}'},
        needle="RUNTIME_ENV_JSON",
    ),
    Case(
        "submit",
        env={"RUNTIME_ENV_JSON": '{"env_vars": {"WANDB_MODE": "cloud"}}'},
        needle="RUNTIME_ENV_JSON",
    ),
    Case("submit", env={"RAY_MODE": "sweep", "SWEEP_KIND": "nope"}, needle="SWEEP_KIND"),
    Case("submit", env={"RAY_MODE": "sweep", "SWEEP_KIND": "../x.json"}, needle="SWEEP_KIND"),
    Case("submit", env={"RAY_MODE": "sweep", "SWEEP_KIND": "{binary}"}, needle="SWEEP_KIND"),
    Case("submit", env={"RAY_MODE": "sweep", "SWEEP_METHOD": "bayes"}, needle="SWEEP_METHOD"),
    Case("submit", env={"RAY_MODE": "sweep", "SWEEP_RUN_CAP": "0"}, needle="SWEEP_RUN_CAP"),
    Case("submit", env={"RAY_MODE": "sweep", "AGENTS_PER_NODE": "x"}, needle="AGENTS_PER_NODE"),
    Case("submit", env={"RAY_MODE": "sweep", "SWEEP_BACKEND": "optuna"}, needle="SWEEP_BACKEND"),
    Case("submit", env={"RAY_MODE": "sweep", "SWEEP_BACKEND": "wandb"}, needle="SWEEP_BACKEND"),
    Case("submit", env={"RAY_MODE": "sweep", "SWEEP_ID": "a/b"}, needle="SWEEP_ID"),
    Case("submit", env={"RAY_MODE": "sweep", "SWEEP_ARGS": "--bogus"}, needle="SWEEP_ARGS"),
    Case("submit", env={"RAY_MODE": "sweep", "SWEEP_ARGS": "--seed 'x"}, needle="SWEEP_ARGS"),
    Case(
        "submit",
        env={"RAY_MODE": "sweep", "SWEEP_ARGS": "--trial-timesteps 0"},
        needle="SWEEP_ARGS",
    ),
    Case("submit", env={"PYTHON_LOCAL": "/no/such/python"}, needle="PYTHON_LOCAL"),
    Case("submit", env={"RAY_BIN": "/no/such/ray"}, needle="ray"),
]
CASES = TRAIN + SWEEP + LAUNCHER + BENCH + SUBMIT


def _fill(text: str, files: dict[str, str]) -> str:
    for key, path in files.items():
        text = text.replace("{" + key + "}", path)
    return text


def _make_unwritable(path: Path, undo: bool = False) -> None:
    """A directory this test's user cannot write into: mode 0555, and for root (whom modes
    do not stop) the immutable attribute as well."""
    if not undo:
        path.chmod(0o555)
    if os.geteuid() == 0:
        chattr = shutil.which("chattr")
        if chattr is None:
            pytest.skip("running as root without chattr: cannot make a directory unwritable")
        subprocess.run([chattr, "-i" if undo else "+i", str(path)], check=not undo)
    if undo:
        path.chmod(0o755)


def _run(
    case: Case, files: dict[str, str], cwd: Path, server: ForkServer
) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    report = Path(files["root"]) / f"report-{os.getpid()}-{time.monotonic_ns()}.json"
    env_extra = {k: _fill(v, files) for k, v in case.env.items()}
    if case.cmd == "submit":
        recorder = Path(files["root"]) / f"ray-was-run-{time.monotonic_ns()}"
        fake_ray = Path(files["root"]) / "fake-ray"
        fake_ray.write_text(f"#!/bin/sh\ntouch {recorder}\n")
        fake_ray.chmod(0o755)
        env = {k: v for k, v in engine_env(cwd).items() if not k.startswith(("WANDB_", "SWEEP_"))}
        # PYTHON_LOCAL: this interpreter, not the python3 on PATH (here a pyenv shim that
        # costs 0.1 s of CPU per call, three calls a case); its own case still sets it
        env.update({
            "RAY_BIN": str(fake_ray), "RAY_ADDRESS": "http://127.0.0.1:9",
            "PYTHON_LOCAL": sys.executable, **env_extra,
        })  # fmt: skip
        proc = subprocess.run(
            ["bash", str(REPO / "submit_ray_job.sh")],
            cwd=cwd, env=env, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        return proc, {"ray_run": recorder.exists(), "heavy": []}
    kind, target = ENTRY[case.cmd]
    env = engine_env(cwd, PHANTOM_TEST_REPORT=str(report), **env_extra)
    args = [_fill(a, files) for a in case.args]
    proc = server.run(RUNNER, [kind, target, *args], cwd=cwd, env=env, timeout=60)
    data = json.loads(report.read_text()) if report.exists() else {"heavy": ["?"]}
    report.unlink(missing_ok=True)
    return proc, data


@pytest.mark.parametrize("case", CASES, ids=[str(i) for i in range(len(CASES))])
def test_bad_input_is_named_and_starts_nothing(
    case: Case, files: dict[str, str], server: ForkServer, tmp_path: Path
) -> None:
    work = Path(tempfile.mkdtemp(prefix="phantom-cwd-", dir=files["root"]))
    started = time.monotonic()
    proc, data = _run(case, files, work, server)
    TIMES.append((time.monotonic() - started, str(case)[:90]))
    err = proc.stderr
    assert proc.returncode == case.code, f"{case}: exit {proc.returncode}\n{err[-2000:]}"
    assert case.needle in err, f"{case}: {case.needle!r} not named in:\n{err[-2000:]}"
    assert "Traceback" not in err, err[-3000:]
    assert proc.stdout == "", proc.stdout[-2000:]
    assert data["heavy"] == [], f"{case}: imported {data['heavy']} before rejecting"
    assert not data.get("ray_run"), f"{case}: `ray` was run"
    leftovers = sorted(p.name for p in work.iterdir() if p.name != "wandb-dir")
    assert leftovers == [], f"{case}: created {leftovers}"
    if case.cmd == "train" and "{locked}" in case.args:
        assert not Path(files["locked"]).exists()


def test_every_engine_flag_has_a_bad_input_case() -> None:
    from benchmarks.engine_suite import build_parser as bench_parser
    from engine.distributed import build_launcher_parser
    from engine.sweep import build_parser as sweep_parser
    from engine.trainconfig import build_parser as train_parser

    parsers = {
        "train": train_parser(),
        "sweep": sweep_parser(),
        "launcher": build_launcher_parser(),
        "bench": bench_parser(),
    }
    for cmd, parser in parsers.items():
        flags = {s for a in parser._actions for s in a.option_strings if s.startswith("--")}
        flags.discard("--help")
        used = {
            a.split("=")[0] for c in CASES if c.cmd == cmd for a in c.args if a.startswith("--")
        }
        assert flags <= used, f"{cmd}: no bad-input case for {sorted(flags - used)}"


def test_zz_print_rejection_times() -> None:
    """Not an assertion: the wall time of each rejection, slowest first (run with -s)."""
    for seconds, case in sorted(TIMES, reverse=True)[:10]:
        print(f"{seconds:6.2f}s  {case}")
