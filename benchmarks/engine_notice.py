"""Preemption notice latency: SIGTERM -> the notice checkpoint complete in storage, against a
periodic checkpoint's write time measured in the same trainer run.

For each algorithm a real ``python -m engine.train`` trains with a checkpoint interval that
produces periodic checkpoints; after the first one, mid-interval, the bench sends SIGTERM and
polls storage for the new step directory's manifest. Reported per algorithm (median over
``repeat`` runs):

* ``notice_s``: from ``kill()`` to the manifest being visible (what a launcher observes);
* ``notice_logged_s``: the trainer's own figure (handler -> published), from its log line;
* ``periodic_write_s``: the trainer's periodic checkpoint write time (snapshot + publish);
* ``notice_vs_periodic``: ``notice_s / periodic_write_s``. The difference is finishing the
  step in progress and training on the partial rollout (a PPO update), by design.
"""

from __future__ import annotations

import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from engine.contract import EX_PREEMPTED, NOTICE_LINE_RE
from engine.logs import log

REPO = Path(__file__).resolve().parent.parent
CASES = {
    "ppo": ["--algo", "ppo", "--hparams", '{"n_steps": 1024}'],
    "dqn": ["--algo", "dqn", "--hparams", '{"buffer_size": 100000, "learning_starts": 500}'],
}
_PERIODIC = re.compile(r"checkpoint step=(\d+) at \S+ \(([0-9.]+)s\)")
_PROGRESS = re.compile(r"progress step=(\d+)/")


def _one(algo: str, tmp: Path) -> dict[str, float]:
    run = f"notice-{algo}-{time.monotonic_ns()}"
    args = [
        *CASES[algo], "--env", "phantom/BehaviourMaze-v0", "--total-timesteps", "1000000",
        "--checkpoint-every", "3000", "--run-name", run, "--storage", str(tmp),
        "--wandb", "disabled", "--log-every", "100",
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(REPO), "WANDB_MODE": "disabled"}
    log_path = tmp / f"{run}.log"
    with open(log_path, "w") as fh:
        proc = subprocess.Popen(
            [sys.executable, "-m", "engine.train", *args], env=env, stderr=fh, text=True
        )
    try:
        deadline = time.monotonic() + 600
        while True:  # mid-interval: past the first periodic checkpoint, short of the next
            text = log_path.read_text()
            steps = [int(s) for s in _PROGRESS.findall(text)]
            if _PERIODIC.search(text) and steps and 3000 + 500 < steps[-1] < 6000 - 500:
                break
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"trainer did not get going:\n{text[-2000:]}")
            time.sleep(0.01)
        before = {p.name for p in (tmp / run / "checkpoints").iterdir()}
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        seen = None
        while seen is None:
            for path in (tmp / run / "checkpoints").glob("step-*/MANIFEST.json"):
                if path.parent.name not in before:
                    seen = time.monotonic() - sent
            if proc.poll() is not None and seen is None:
                seen = time.monotonic() - sent  # published before our next poll
            time.sleep(0.001)
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = log_path.read_text()
    found = NOTICE_LINE_RE.search(text)
    if proc.returncode != EX_PREEMPTED or found is None:
        raise RuntimeError(f"no notice checkpoint (exit {proc.returncode}):\n{text[-2000:]}")
    periodic = [float(s) for _, s in _PERIODIC.findall(text)]
    return {
        "notice_s": seen,
        "notice_logged_s": float(found["seconds"]),
        "periodic_write_s": statistics.median(periodic),
    }


def notice_latency(repeat: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="phantom-bench-notice-") as name:
        for algo in CASES:
            runs = [_one(algo, Path(name)) for _ in range(repeat)]
            row = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
            row["notice_vs_periodic"] = row["notice_s"] / row["periodic_write_s"]
            for key, value in row.items():
                out[f"{algo}_{key}"] = value
            log(
                f"notice {algo}: SIGTERM -> checkpoint visible {row['notice_s']:.3f}s "
                f"(trainer says {row['notice_logged_s']:.3f}s); periodic checkpoint write "
                f"{row['periodic_write_s']:.3f}s; ratio {row['notice_vs_periodic']:.1f}x",
                "bench",
            )
    return out
