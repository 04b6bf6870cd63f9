"""Sweep orchestration overhead: the same trials through ``engine.sweep`` (Ray Tune on a local
loopback cluster) and back to back in one process, measured in the same run.

Both sides run the first N points of the ``ppo_rl_study`` grid for the same number of steps
with one trial at a time (one 1-CPU node, one agent), so the ratio is Tune's orchestration
cost alone (trial start-up, reporting, state sync), not parallel speed-up. The back-to-back
side is one fresh ``python`` process that imports the engine once and calls ``run_training``
for each trial with the same storage layout and W&B mode.

``--engine-root`` points both sides at another checkout's engine (e.g. an export of an older
commit), for before/after figures measured on the same machine in the same run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from engine.logs import log

REPO = Path(__file__).resolve().parent.parent

# The back-to-back side, run in a fresh interpreter so it pays its imports once, like a
# user's script would. Uses only APIs the engine has had since before this benchmark.
_SERIAL = """
import json, sys, time
t0 = time.monotonic()
from engine import sweep
from engine.train import run_training
spec = sweep.load_spec("ppo_rl_study")
points = sweep.grid_points(spec)[: int(sys.argv[1])]
settings = {"engine_storage": sys.argv[3], "wandb": "disabled",
            "trial_timesteps": int(sys.argv[2]), "checkpoint_every": int(sys.argv[2]), "seed": 0}
walls = []
for i, point in enumerate(points):
    started = time.monotonic()
    cfg = sweep.trial_config(spec, point, settings, run_name=f"serial-{i}")
    result = run_training(cfg)
    assert result.num_timesteps == int(sys.argv[2]), result
    walls.append(time.monotonic() - started)
print(json.dumps({"wall_s": time.monotonic() - t0, "trial_walls_s": walls}))
"""


def _env(tmp: Path, root: Path) -> dict[str, str]:
    env = {
        **os.environ,
        "WANDB_MODE": "disabled",
        "WANDB_SILENT": "true",
        "WANDB_DIR": str(tmp),
        "RAY_USAGE_STATS_ENABLED": "0",
        "NO_GCE_CHECK": "True",
        "PYTHONPATH": str(root),
    }
    env.pop("WANDB_API_KEY", None)
    return env


def serial_trials(trials: int, steps: int, tmp: Path, root: Path) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, "-c", _SERIAL, str(trials), str(steps), str(tmp / "serial")],
        cwd=tmp, env=_env(tmp, root), capture_output=True, text=True,
    )  # fmt: skip
    if proc.returncode != 0:
        raise RuntimeError(f"back-to-back trials failed:\n{proc.stderr[-3000:]}")
    out: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return out


def tune_trials(trials: int, steps: int, tmp: Path, root: Path, address: str) -> dict[str, Any]:
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "engine.sweep", "--kind", "ppo_rl_study", "--method", "grid",
         "--run-cap", str(trials), "--num-nodes", "1", "--agents-per-node", "1",
         "--cpus-per-node", "1", "--storage", f"file://{tmp}/tune",
         "--sweep-id", f"bench-{time.monotonic_ns()}", "--trial-timesteps", str(steps),
         "--checkpoint-every", str(steps), "--wandb", "disabled", "--address", address],
        cwd=tmp, env=_env(tmp, root), capture_output=True, text=True,
    )  # fmt: skip
    wall = time.monotonic() - started
    if proc.returncode != 0:
        raise RuntimeError(f"sweep failed:\n{proc.stderr[-3000:]}")
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    if summary["completed"] != trials:
        raise RuntimeError(f"sweep completed {summary['completed']} of {trials} trials")
    return {"wall_s": wall, "fit_wall_s": float(summary["wall_seconds"])}


def sweep_overhead(trials: int, steps: int, engine_root: Path | None = None) -> dict[str, Any]:
    """Trials/min through engine.sweep vs back to back; ratio >= 0.8 is the goal."""
    from engine.localray import local_ray_cluster

    root = (engine_root or REPO).resolve()
    with tempfile.TemporaryDirectory(prefix="phantom-bench-sweep-") as name:
        tmp = Path(name)
        # back to back first, with no Ray running: any noise from the cluster's own
        # processes only counts against engine.sweep
        serial = serial_trials(trials, steps, tmp, root)
        with local_ray_cluster(n_nodes=1, cpus_per_node=1) as cluster:
            tune = tune_trials(trials, steps, tmp, root, cluster.gcs_address)
    serial_rate = 60.0 * trials / serial["wall_s"]
    tune_rate = 60.0 * trials / tune["wall_s"]
    mean_train = sum(serial["trial_walls_s"]) / trials
    out = {
        "sweep_engine_root": str(root),
        "sweep_trials": trials,
        "sweep_trial_steps": steps,
        "sweep_serial_trials_per_min": serial_rate,
        "sweep_tune_trials_per_min": tune_rate,
        "sweep_tune_vs_serial": tune_rate / serial_rate,
        "sweep_serial_wall_s": serial["wall_s"],
        "sweep_tune_wall_s": tune["wall_s"],
        "sweep_tune_fit_wall_s": tune["fit_wall_s"],
        "sweep_mean_trial_train_s": mean_train,
        "sweep_tune_overhead_per_trial_s": (tune["wall_s"] - serial["wall_s"]) / trials,
    }
    log(
        f"sweep {trials} trials x {steps} steps: back to back {serial_rate:.2f}/min "
        f"({serial['wall_s']:.1f}s), engine.sweep {tune_rate:.2f}/min ({tune['wall_s']:.1f}s, "
        f"Tuner.fit {tune['fit_wall_s']:.1f}s): ratio {out['sweep_tune_vs_serial']:.2f}",
        "bench",
    )
    return out
