"""Engine figures: env steps/s, smoke-command wall time, sweep overhead, notice latency.

``python -m benchmarks.engine_suite [--quick] [--only env,smoke,sweep,notice]``; human-readable lines on
stderr, the last stdout line is one JSON object. Every figure comes with the baseline it is
compared to, measured in the same run:

* env steps/s: a single ``BehaviourEnv`` stepped in a Python loop is the baseline;
  ``DummyVecEnv(n)`` and ``SubprocVecEnv(n)`` are reported as ratios to it
  (vectorised steps count n env steps).
* smoke command: the seed's ``python -m engine.train --algo ppo --total-timesteps 5000
  --alpha 0.3 --device cpu`` (offline W&B, fresh temp dir), against the time the same
  interpreter needs just to import the engine, SB3/torch and wandb.
* sweep overhead (``benchmarks.engine_sweep``): trials/min through ``engine.sweep`` (Ray Tune,
  local loopback cluster, one trial at a time) against the same trials back to back in one
  process; goal >= 0.8.
* preemption notice (``benchmarks.engine_notice``): SIGTERM -> notice checkpoint complete, against
  the same trainer's periodic checkpoint write time.
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

from engine.cliargs import bounded_text, positive_int
from engine.logs import log

REPO = Path(__file__).resolve().parent.parent


def say(msg: str) -> None:
    log(msg, "bench")


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


SECTIONS = ("env", "smoke", "sweep", "notice")


def _sections(text: str) -> list[str]:
    chosen = [t.strip() for t in text.split(",") if t.strip()]
    bad = [t for t in chosen if t not in SECTIONS]
    if bad or not chosen:
        raise argparse.ArgumentTypeError(
            f"expected a comma list of {', '.join(SECTIONS)}, got {text[:80]!r}"
        )
    return chosen


def _engine_root(text: str) -> str:
    root = Path(bounded_text(text)).expanduser()
    if not (root / "engine" / "train.py").is_file():
        raise argparse.ArgumentTypeError(
            f"{text[:200]!r} is not a checkout holding engine/train.py (e.g. an export of "
            "an older commit: git archive <commit> | tar -x -C DIR)"
        )
    return str(root.resolve())


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.engine_suite", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="smaller workloads")
    parser.add_argument("--n-envs", type=positive_int, default=4)
    parser.add_argument("--skip-sweep", action="store_true", help="same as leaving out sweep")
    parser.add_argument(
        "--only", type=_sections, default=list(SECTIONS), help="sections: env,smoke,sweep,notice"
    )
    parser.add_argument("--sweep-trials", type=positive_int, default=None, help="default 8 (3)")
    parser.add_argument(
        "--sweep-trial-steps",
        type=positive_int,
        default=None,
        help="default 8192 (1024 with --quick); ppo_rl_study's own trials are 20000",
    )
    parser.add_argument(
        "--engine-root",
        type=_engine_root,
        default=None,
        help="measure the sweep with another checkout's engine (before/after figures)",
    )
    parser.add_argument("--notice-repeat", type=positive_int, default=None, help="default 3 (1)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    sections = [x for x in args.only if not (args.skip_sweep and x == "sweep")]
    result: dict[str, Any] = {"cpu_count": os.cpu_count(), "load_avg_1m": os.getloadavg()[0]}
    if "env" in sections:
        result.update(env_steps_per_second(20_000 if args.quick else 100_000, args.n_envs))
        say(f"env steps/s: 1 env {result['env_steps_per_s_1env']:.0f}")
    if "smoke" in sections:
        result.update(smoke_wall_time())
        say(
            f"smoke command: {result['smoke_wall_s']:.1f}s "
            f"(imports alone {result['import_wall_s']:.1f}s)"
        )
    if "sweep" in sections:
        from benchmarks.engine_sweep import sweep_overhead

        trials = args.sweep_trials or (3 if args.quick else 8)
        steps = args.sweep_trial_steps or (1024 if args.quick else 8192)
        root = Path(args.engine_root) if args.engine_root else None
        result.update(sweep_overhead(trials, steps, root))
    if "notice" in sections:
        from benchmarks.engine_notice import notice_latency

        result.update(notice_latency(args.notice_repeat or (1 if args.quick else 3)))
    print(json.dumps(result, sort_keys=True), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
