"""Finished trainer runs that tests read, and runs whose process is not the point.

A trainer process pays about 3 s of CPU before its first step (interpreter, torch, SB3,
gymnasium, torch._dynamo); where two tests only read what one run left behind (its stdout,
stderr, run directory, W&B files), they read the same run (tests/engine/conftest.py). Where
a test is about what the engine does and not about its process (a resume after a notice,
the interval it takes from the environment), ``train_here`` runs the CLI's ``main`` in the
test's own process, which has torch and SB3 loaded already.
"""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# The seed's smoke command, as written (the README's, and submit_ray_job.sh's default)
SMOKE = ["--algo", "ppo", "--total-timesteps", "5000", "--alpha", "0.3", "--device", "cpu"]


@dataclass(frozen=True)
class TrainedRun:
    """One finished trainer process: how it was started and what it printed."""

    cwd: Path
    env: dict[str, str]
    proc: subprocess.CompletedProcess[str]

    @property
    def result(self) -> dict[str, Any]:
        """The one JSON result object on stdout (the assertion names the stderr tail)."""
        assert self.proc.returncode == 0, self.proc.stderr[-3000:]
        out: dict[str, Any] = json.loads(self.proc.stdout.strip().splitlines()[-1])
        return out


def train(cwd: Path, args: list[str], env: dict[str, str]) -> TrainedRun:
    """Run ``python -m engine.train ARGS`` in ``cwd`` to its end."""
    proc = subprocess.run(
        [sys.executable, "-m", "engine.train", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    return TrainedRun(cwd, env, proc)


def train_here(args: list[str]) -> subprocess.CompletedProcess[str]:
    """``engine.train.main(ARGS)`` in this process, in its current directory and environment
    (as ``python -m engine.train ARGS`` there would run): its exit code and what it printed.
    The run sets torch's thread count (``--torch-threads``); it is put back afterwards."""
    import torch

    from engine.train import main

    threads = torch.get_num_threads()
    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(args)
            except SystemExit as exc:  # argparse's usage errors exit 2
                code = exc.code if isinstance(exc.code, int) else 1
    finally:
        torch.set_num_threads(threads)
    argv = [sys.executable, "-m", "engine.train", *args]
    return subprocess.CompletedProcess(argv, code, out.getvalue(), err.getvalue())
