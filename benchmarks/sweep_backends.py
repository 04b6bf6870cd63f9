"""Trials/min of one sweep through ``engine.sweep``'s two backends, measured in the same run.

    .venv/bin/python -m benchmarks.sweep_backends [--trials 3] [--steps 1024]

The same sweep (the first ``--trials`` points of the ``ppo_rl_study`` grid, each trained for
``--steps`` steps, one trial at a time on one 1-CPU loopback Ray node) runs first through the
Ray Tune backend (W&B disabled) and then through the W&B backend: one ``wandb.agent`` task
pulling runs from a sweep on the local W&B emulator (temp run dir, free port, stopped at the
end), each run logging online to it. Both are timed around the whole ``engine.sweep``
command, so start-up counts on both sides. The ratio is W&B over Tune.

What the W&B side pays that Tune does not: the agent asks the sweep controller for its next
run by a heartbeat every 5 s (``wandb.agents.pyagent``'s fixed ``HEARTBEAT_SLEEP_SECONDS``),
so each run waits up to one cycle for its command; each run starts and finishes a wandb-core
session and uploads its final-weights artifact. Also true of the W&B backend, but not
measured here: wandb-core sends history in batches of ~15 s (file_stream's default
interval), so the console's online cadence source sees a run's rows up to ~15 s late; and
that source lists the newest 20 runs of a project (one ``Runs`` page), so a sweep with more
runs than that shows only its newest.

Last stdout line: one JSON object. Exit 0, or 1 when a side failed.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from benchmarks.engine_sweep import REPO, tune_trials
from emulators.wandb import client
from engine.logs import log

KEY_ENV = "PHANTOM_BENCH_WANDB_KEY"  # the key is handed over by this name, never printed
ENTITY, PROJECT = "bench", "sweep-backends"


@contextmanager
def _environ(values: dict[str, str]) -> Iterator[None]:
    """``values`` in this process's env for the block: the local Ray cluster started inside
    it hands them to its workers, where the W&B agents run."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def wandb_trials(
    trials: int, steps: int, tmp: Path, address: str, env: dict[str, str]
) -> dict[str, Any]:
    """The same sweep through ``--backend wandb``; wall time around the whole command."""
    import subprocess

    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "engine.sweep", "--backend", "wandb", "--kind", "ppo_rl_study",
         "--method", "grid", "--run-cap", str(trials), "--num-nodes", "1",
         "--agents-per-node", "1", "--cpus-per-node", "1", "--storage", f"file://{tmp}/wandb",
         "--trial-timesteps", str(steps), "--checkpoint-every", str(steps), "--wandb", "online",
         "--wandb-project", PROJECT, "--wandb-entity", ENTITY, "--address", address],
        cwd=tmp, env=env, capture_output=True, text=True,
    )  # fmt: skip
    wall = time.monotonic() - started
    if proc.returncode != 0:
        raise RuntimeError(f"W&B sweep failed:\n{proc.stderr[-3000:]}")
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    if summary["completed"] != trials:
        raise RuntimeError(f"W&B sweep completed {summary['completed']} of {trials} runs")
    return {"wall_s": wall, "fit_wall_s": float(summary["wall_seconds"]), "id": summary["sweep_id"]}


def sweep_backends(trials: int, steps: int) -> dict[str, Any]:
    """Trials/min through Tune and through W&B, same sweep, same cluster, same run."""
    from engine.localray import local_ray_cluster

    key = secrets.token_hex(20)
    with tempfile.TemporaryDirectory(prefix="phantom-bench-backends-") as name:
        tmp = Path(name)
        (tmp / "wandb").mkdir()
        info = client.start(tmp / "emu", environ={**os.environ, KEY_ENV: key}, key_env=KEY_ENV)
        try:
            wandb_env = {
                "WANDB_BASE_URL": info.base_url,
                "WANDB_API_KEY": key,
                # the agents' runs read it in the Ray workers (the Tune side passes
                # --wandb disabled to its trials)
                "WANDB_MODE": "online",
                "WANDB_DIR": str(tmp / "wandb"),
                "WANDB_SILENT": "true",
                "WANDB_ERROR_REPORTING": "false",
                "NO_PROXY": "127.0.0.1,localhost",
                "no_proxy": "127.0.0.1,localhost",
                "RAY_USAGE_STATS_ENABLED": "0",
                "NO_GCE_CHECK": "True",
            }
            with (
                _environ(wandb_env),
                local_ray_cluster(n_nodes=1, cpus_per_node=1) as cluster,
            ):
                tune = tune_trials(trials, steps, tmp, REPO, cluster.gcs_address)
                env = {**os.environ, "PYTHONPATH": str(REPO)}
                wb = wandb_trials(trials, steps, tmp, cluster.gcs_address, env)
        finally:
            client.stop(tmp / "emu")
    tune_rate = 60.0 * trials / tune["wall_s"]
    wandb_rate = 60.0 * trials / wb["wall_s"]
    out = {
        "trials": trials,
        "trial_steps": steps,
        "tune_trials_per_min": round(tune_rate, 3),
        "wandb_trials_per_min": round(wandb_rate, 3),
        "wandb_vs_tune": round(wandb_rate / tune_rate, 3),
        "tune_wall_s": round(tune["wall_s"], 2),
        "wandb_wall_s": round(wb["wall_s"], 2),
        "wandb_overhead_per_trial_s": round((wb["wall_s"] - tune["wall_s"]) / trials, 2),
    }
    log(
        f"sweep {trials} trials x {steps} steps: Tune {tune_rate:.2f}/min "
        f"({tune['wall_s']:.1f}s), W&B {wandb_rate:.2f}/min ({wb['wall_s']:.1f}s): "
        f"W&B/Tune {out['wandb_vs_tune']:.2f}",
        "bench",
    )
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="benchmarks.sweep_backends", description=__doc__)
    ap.add_argument("--trials", type=int, default=3, help="the sweep's run cap (default 3)")
    ap.add_argument("--steps", type=int, default=1024, help="steps per trial (default 1024)")
    args = ap.parse_args(argv)
    if args.trials < 1 or args.steps < 64:
        print("benchmarks.sweep_backends: --trials >= 1 and --steps >= 64", file=sys.stderr)
        return 2
    try:
        result = sweep_backends(args.trials, args.steps)
    except RuntimeError as exc:
        print(f"benchmarks.sweep_backends: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(result, sort_keys=True), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
