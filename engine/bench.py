"""Engine figures: env steps/s (1 and n envs), smoke-command wall time, sweep trials/min.

``python -m engine.bench [--quick]``; human-readable lines on stderr, the last stdout
line is one JSON object. Every figure comes with the baseline it is compared to,
measured in the same run:

* env steps/s: a single ``BehaviourEnv`` stepped in a Python loop is the baseline;
  ``DummyVecEnv(n)`` and ``SubprocVecEnv(n)`` are reported as ratios to it
  (vectorised steps count n env steps).
* smoke command: the seed's ``python -m engine.train --algo ppo --total-timesteps 5000
  --alpha 0.3 --device cpu`` (offline W&B, fresh temp dir), against the time the same
  interpreter needs just to import the engine, SB3/torch and wandb.
* sweep throughput: a Ray Tune sweep (``engine.sweep``) on a local 2-node loopback
  cluster, completed trials per minute with 1 and with 2 agents per node; the ratio
  is 2 agents / 1 agent.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent


def say(msg: str) -> None:
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


def env_steps_per_second(steps: int, n_envs: int) -> dict[str, float]:
    import numpy as np
    from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv

    from engine.envs import BehaviourEnv, make_behaviour_env, make_family

    env = BehaviourEnv(make_family(), alpha=0.3)
    env.reset(seed=0)
    rng = np.random.default_rng(0)
    actions = rng.integers(0, 4, size=steps)
    t0 = time.perf_counter()
    for a in actions:
        _, _, terminated, truncated, _ = env.step(int(a))
        if terminated or truncated:
            env.reset()
    single = steps / (time.perf_counter() - t0)

    def vec_rate(vec_cls: Any) -> float:
        venv = vec_cls([lambda: make_behaviour_env(alpha=0.3) for _ in range(n_envs)])
        venv.seed(0)
        venv.reset()
        batches = rng.integers(0, 4, size=(steps // n_envs, n_envs))
        t = time.perf_counter()
        for batch in batches:
            venv.step(batch)
        rate = batches.size / (time.perf_counter() - t)
        venv.close()
        return rate

    dummy = vec_rate(DummyVecEnv)
    subproc = vec_rate(SubprocVecEnv)
    return {
        "env_steps_per_s_1env": single,
        f"env_steps_per_s_dummy{n_envs}": dummy,
        f"env_steps_per_s_subproc{n_envs}": subproc,
        "dummy_vs_1env": dummy / single,
        "subproc_vs_1env": subproc / single,
    }


def _clean_env(tmp: Path) -> dict[str, str]:
    env = {
        **os.environ,
        "WANDB_MODE": "offline",
        "WANDB_SILENT": "true",
        "WANDB_DIR": str(tmp),
        "RAY_USAGE_STATS_ENABLED": "0",
        "PYTHONPATH": str(REPO),
    }
    env.pop("WANDB_API_KEY", None)
    return env


def smoke_wall_time() -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="phantom-bench-") as tmp:
        env = _clean_env(Path(tmp))
        t0 = time.perf_counter()
        subprocess.run(
            [sys.executable, "-c", "import engine.train, engine.metrics, wandb, stable_baselines3"],
            cwd=tmp,
            env=env,
            check=True,
        )
        imports = time.perf_counter() - t0
        t0 = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, "-m", "engine.train", "--algo", "ppo", "--total-timesteps", "5000",
             "--alpha", "0.3", "--device", "cpu"],
            cwd=tmp, env=env, capture_output=True, text=True,
        )  # fmt: skip
        smoke = time.perf_counter() - t0
        if proc.returncode != 0:
            raise RuntimeError(f"smoke command failed:\n{proc.stderr[-3000:]}")
    return {"smoke_wall_s": smoke, "import_wall_s": imports, "smoke_vs_imports": smoke / imports}


def sweep_trials_per_minute(run_cap: int, trial_steps: int) -> dict[str, float]:
    from engine.localray import local_ray_cluster

    out: dict[str, float] = {}
    with (
        local_ray_cluster(n_nodes=2, cpus_per_node=2) as cluster,
        tempfile.TemporaryDirectory(prefix="phantom-bench-sweep-") as tmp,
    ):
        for agents in (1, 2):
            proc = subprocess.run(
                [sys.executable, "-m", "engine.sweep", "--kind", "ppo_rl_study",
                 "--method", "grid", "--run-cap", str(run_cap), "--num-nodes", "2",
                 "--agents-per-node", str(agents), "--storage", f"file://{tmp}",
                 "--sweep-id", f"bench-a{agents}", "--trial-timesteps", str(trial_steps),
                 "--checkpoint-every", str(trial_steps), "--wandb", "disabled",
                 "--address", cluster.gcs_address],
                env=_clean_env(Path(tmp)), capture_output=True, text=True,
            )  # fmt: skip
            if proc.returncode != 0:
                raise RuntimeError(f"sweep failed:\n{proc.stderr[-3000:]}")
            summary = json.loads(proc.stdout.strip().splitlines()[-1])
            out[f"sweep_trials_per_min_{agents}agent"] = float(summary["trials_per_min"])
            say(f"sweep, {agents} agent(s)/node: {summary['trials_per_min']:.2f} trials/min")
    out["sweep_2agents_vs_1agent"] = (
        out["sweep_trials_per_min_2agent"] / out["sweep_trials_per_min_1agent"]
    )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m engine.bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="smaller workloads")
    parser.add_argument("--n-envs", type=int, default=4)
    parser.add_argument("--skip-sweep", action="store_true")
    args = parser.parse_args(argv)
    result: dict[str, Any] = {"cpu_count": os.cpu_count(), "load_avg_1m": os.getloadavg()[0]}
    steps = 20_000 if args.quick else 100_000
    result.update(env_steps_per_second(steps, args.n_envs))
    say(f"env steps/s: 1 env {result['env_steps_per_s_1env']:.0f}")
    result.update(smoke_wall_time())
    say(
        f"smoke command: {result['smoke_wall_s']:.1f}s (imports alone {result['import_wall_s']:.1f}s)"
    )
    if not args.skip_sweep:
        result.update(sweep_trials_per_minute(4 if args.quick else 8, 1000 if args.quick else 2000))
    print(json.dumps(result, sort_keys=True), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
