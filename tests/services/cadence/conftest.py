"""Real offline W&B runs for the cadence tests: a tiny ``wandb.init(mode="offline")`` +
``wandb.log`` loop in a subprocess, with WANDB_DIR under tmp_path."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from console.services.cadence.wandb_files import HistoryPoint, run_files


def pts(*pairs: tuple[int, float]) -> list[HistoryPoint]:
    return [HistoryPoint(step=s, timestamp=t) for s, t in pairs]


WRITER = textwrap.dedent(
    """
    import os, sys, time, wandb
    steps, pause, big = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3] == "big"
    run = wandb.init(mode="offline", project="cadence-test", name="tiny-ppo",
                     dir=os.environ["WANDB_DIR"])
    print("started", run.id, flush=True)
    for i in range(steps):
        row = {"loss": 1.0 / (i + 1)}
        if big and i % 4 == 1:
            row.update({f"k{j}": float(i * j) for j in range(900)})  # > one 32 KiB block
        wandb.log(row)
        time.sleep(pause)  # sleep-noqa: the writer's logging pace, not a wait
    if os.environ.get("HANG"):
        print("hanging", flush=True)
        time.sleep(600)  # sleep-noqa: the hang under test
    run.finish()
    """
)


def writer_env(wandb_dir: Path, flush_s: float) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        WANDB_DIR=str(wandb_dir),
        WANDB_MODE="offline",
        WANDB_SILENT="true",
        WANDB__TRANSACTION_LOG_FLUSH_INTERVAL=str(flush_s),
    )
    env.pop("WANDB_API_KEY", None)
    return env


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real finished offline run: 24 steps, some rows bigger than a block."""
    wandb_dir = tmp_path_factory.mktemp("wandb_finished")
    subprocess.run(
        [sys.executable, "-c", WRITER, "24", "0.01", "big"],
        env=writer_env(wandb_dir, 15.0),
        check=True,
        timeout=120,
        capture_output=True,
    )
    (path,) = run_files(wandb_dir)
    return path
