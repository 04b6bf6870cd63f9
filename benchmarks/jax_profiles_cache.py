"""Benchmark: a second process builds the same-shaped bank against a cold one.

    python -m benchmarks.jax_profiles_cache [--profiles 256 --levels 16 --states 1536
                                               --actions 4 --candidates 16 --metric kl]

Two child processes run one after the other with the same fresh cache directory
(``engine.jax_profiles.compile_cache``: JAX's persistent compilation cache and, under
``programs/``, the compiled programs themselves, ``program_cache``; a temporary directory
unless ``--cache-dir``): the first compiles and writes the cache (cold), the second loads
it. Each child times importing JAX and opening the device (``jax.devices()``: on a TPU
the chip, seconds that no cache can save and no bank build causes), then (1) building the
bench's bank (``benchmarks.jax_profiles._make_inputs``, phase by phase: host NumPy,
``build_bank``, the slice to P profiles, the agents) and (2) the first scoring +
selection pass, as a user's first ``select_alpha`` pays it (trace and compile, or load,
then run), with JAX's own compile-stage durations, the programs loaded or compiled and
JAX's cache hits and misses (monitoring events). Printed: each process's phases and the
second / cold ratios of bank build + first pass (the must-show) and of the whole process.

The last line is one JSON object with the figures.
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

__all__ = ["main"]

_CHILD_TIMEOUT_S = 900


def _parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="python -m benchmarks.jax_profiles_cache",
        description="Cold vs second-process bank build through the persistent compile cache.",
    )
    ap.add_argument("--profiles", type=int, default=256)
    ap.add_argument("--levels", type=int, default=16)
    ap.add_argument("--states", type=int, default=1536)
    ap.add_argument("--actions", type=int, default=4)
    ap.add_argument("--candidates", type=int, default=16)
    ap.add_argument("--metric", choices=("kl", "js", "tv"), default="kl")
    ap.add_argument("--cache-dir", default=None, help="cache directory (default: a fresh temp)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    for name in ("profiles", "levels", "states", "actions", "candidates"):
        if getattr(args, name) < 1:
            ap.error(f"--{name} must be >= 1")
    if args.actions < 2:
        ap.error("--actions must be >= 2")
    return args


def _shape_argv(args: argparse.Namespace) -> list[str]:
    return [
        f"--{name}={getattr(args, name)}"
        for name in ("profiles", "levels", "states", "actions", "candidates", "metric")
    ]


def _child(args: argparse.Namespace) -> int:
    t0 = time.perf_counter()
    import jax
    from jax import monitoring

    from benchmarks import jax_profiles as bench
    from engine.jax_profiles import program_cache
    from engine.jax_profiles.alpha import select_alpha
    from engine.jax_profiles.compile_cache import compilation_cache

    import_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    platform = jax.devices()[0].platform  # opens the device (a TPU: the chip)
    open_s = time.perf_counter() - t0

    counts = {"hits": 0, "misses": 0, "program_hits": 0, "program_misses": 0}
    stages: dict[str, float] = {}  # JAX's compile-stage durations, summed by stage

    def on_event(event: str, **kwargs: Any) -> None:
        if event == "/jax/compilation_cache/cache_hits":
            counts["hits"] += 1
        elif event == "/jax/compilation_cache/cache_misses":
            counts["misses"] += 1
        elif event == program_cache.HIT_EVENT:
            counts["program_hits"] += 1
        elif event == program_cache.MISS_EVENT:
            counts["program_misses"] += 1

    def on_duration(event: str, duration_secs: float, **kwargs: Any) -> None:
        if event.startswith(("/jax/core/compile/", "/jax/compilation_cache/")):
            name = event.rsplit("/", 1)[-1]
            stages[name] = stages.get(name, 0.0) + duration_secs

    monitoring.register_event_listener(on_event)
    monitoring.register_event_duration_secs_listener(on_duration)
    bench_args = bench._parse([*_shape_argv(args), "--baseline-repeats=0"])
    phases: dict[str, float] = {}
    with compilation_cache(args.cache_dir):
        t0 = last = time.perf_counter()

        def mark(phase: str) -> None:
            nonlocal last
            now = time.perf_counter()
            phases[phase] = now - last
            last = now

        bank, alphas, agents, returns, visitation = bench._make_inputs(bench_args, mark)
        jax.block_until_ready(bank)
        build_s = time.perf_counter() - t0
        build_counts = dict(counts)
        build_stages = dict(stages)
        t0 = time.perf_counter()
        # the product's entry point: the pass a user's first select_alpha pays
        out = select_alpha(bank, alphas, agents, returns, visitation, metric=args.metric)
        jax.block_until_ready(out)
        pass_s = time.perf_counter() - t0
    print(
        json.dumps(
            {
                "import_s": import_s,
                "open_s": open_s,
                "build_s": build_s,
                "first_pass_s": pass_s,
                "build_phases_s": phases,
                "build_compile_stages_s": build_stages,
                "compile_stages_s": stages,
                "build_hits": build_counts["hits"],
                "build_misses": build_counts["misses"],
                "build_program_hits": build_counts["program_hits"],
                "build_program_misses": build_counts["program_misses"],
                "hits": counts["hits"],
                "misses": counts["misses"],
                "program_hits": counts["program_hits"],
                "program_misses": counts["program_misses"],
                "platform": platform,
            }
        )
    )
    return 0


def run_child(args: argparse.Namespace, cache_dir: str) -> dict[str, Any]:
    """One child process; its JSON figures."""
    cmd = [
        sys.executable,
        "-m",
        "benchmarks.jax_profiles_cache",
        "--child",
        f"--cache-dir={cache_dir}",
        *_shape_argv(args),
    ]
    env = dict(os.environ)
    proc = subprocess.run(
        cmd, capture_output=True, text=True, timeout=_CHILD_TIMEOUT_S, env=env, check=False
    )
    if proc.returncode != 0:
        raise RuntimeError(f"child failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    if args.child:
        return _child(args)
    with tempfile.TemporaryDirectory(prefix="phantom-jax-cache-") as tmp:
        cache_dir = args.cache_dir or str(Path(tmp) / "jax")
        cold = run_child(args, cache_dir)
        warm = run_child(args, cache_dir)
    print(
        f"bank P={args.profiles} L={args.levels} S={args.states} A={args.actions}, "
        f"{args.candidates} candidates, {args.metric}, on {cold['platform']}"
    )
    for name, r in (("cold", cold), ("second process", warm)):
        print(
            f"{name:>15}: import {r['import_s']:.2f} s, device open {r['open_s']:.2f} s; "
            f"bank build {r['build_s']:.2f} s (programs loaded {r['build_program_hits']}, "
            f"compiled {r['build_program_misses']}; XLA cache hits {r['build_hits']}, "
            f"misses {r['build_misses']}); first pass {r['first_pass_s']:.2f} s (in all: "
            f"programs loaded {r['program_hits']}, compiled {r['program_misses']}; "
            f"XLA cache hits {r['hits']}, misses {r['misses']})"
        )
        print(
            f"{'':>15}  build phases: "
            + ", ".join(f"{k} {v:.2f} s" for k, v in r["build_phases_s"].items())
        )
        print(
            f"{'':>15}  JAX compile stages (build + first pass): "
            + ", ".join(f"{k} {v:.2f} s" for k, v in sorted(r["compile_stages_s"].items()))
        )
    build_ratio = warm["build_s"] / cold["build_s"]
    total_ratio = (warm["build_s"] + warm["first_pass_s"]) / (
        cold["build_s"] + cold["first_pass_s"]
    )

    def whole(r: dict[str, Any]) -> float:
        return float(r["import_s"] + r["open_s"] + r["build_s"] + r["first_pass_s"])

    process_ratio = whole(warm) / whole(cold)
    print(
        f"second process / cold: bank build {build_ratio:.3f}, "
        f"bank build + first pass {total_ratio:.3f} (must show: < 0.25); with import and "
        f"device open {process_ratio:.3f}"
    )
    print(
        json.dumps(
            {
                "cold": cold,
                "warm": warm,
                "build_ratio": round(build_ratio, 4),
                "build_and_first_pass_ratio": round(total_ratio, 4),
                "process_ratio": round(process_ratio, 4),
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
