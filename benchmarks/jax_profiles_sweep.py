"""Benchmark: the Pallas kernels' tile sizes on this device, each against the same bounds.

    python -m benchmarks.jax_profiles_sweep [--profiles 4096 --candidates 16,256
                                               --metric js,tv,kl --repeats 5]

For tuning ``pallas_kernels.default_config`` on a GPU: for each metric and candidate
count, the kernel alone (agent side prepared beforehand) at a few tile configurations,
the default first, with the read-only pass of the bank and (JS, TV) the pairs'
arithmetic measured in the same run (``jax_profiles_bounds``). A configuration that
does not compile is reported and skipped. Random kernels; no selection, no reference.

The last line is one JSON object with the figures.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from benchmarks.jax_profiles_bounds import make_bounds
from engine.jax_profiles import pallas_kernels as PK
from engine.jax_profiles import tiled as T

__all__ = ["main"]

# (BJ, BP, BX, warps) tried besides the default
CANDIDATES = {
    "kl": [(16, 64, 128, 4), (32, 64, 64, 4), (64, 128, 32, 8), (16, 32, 256, 4)],
    "js": [(16, 16, 16, 4), (16, 32, 16, 8), (32, 16, 16, 8), (8, 32, 32, 4)],
    "tv": [(16, 16, 16, 4), (16, 32, 16, 8), (32, 16, 16, 8), (8, 32, 32, 4)],
}


def _parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.jax_profiles_sweep")
    ap.add_argument("--profiles", type=int, default=4096)
    ap.add_argument("--levels", type=int, default=16)
    ap.add_argument("--states", type=int, default=1536)
    ap.add_argument("--actions", type=int, default=4)
    ap.add_argument("--candidates", default="16,256", help="comma list of agent counts")
    ap.add_argument("--metric", default="js,tv,kl", help="comma list of kl, js, tv")
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args(argv)
    args.counts = [int(c) for c in args.candidates.split(",") if c.strip()]
    args.metrics = [m.strip() for m in args.metric.split(",") if m.strip()]
    bad = [m for m in args.metrics if m not in CANDIDATES]
    if bad or not args.metrics or any(c < 1 for c in args.counts) or args.repeats < 1:
        ap.error("--metric takes kl, js, tv; --candidates and --repeats must be >= 1")
    return args


def _median(fn: Any, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(fn())
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    rng = np.random.default_rng(0)
    shape = (args.profiles, args.levels, args.states, args.actions)
    k = rng.random(shape, np.float32)
    k /= k.sum(-1, keepdims=True)
    kernels = jax.device_put(k)
    log_kernels = jax.device_put(np.log(k))
    del k
    mask = jnp.asarray(np.ones(shape[1:3], bool))
    print(f"jax {jax.__version__} on {jax.devices()[0].device_kind}; bank {shape}")
    results = []
    for c in args.counts:
        q = rng.random((c, *shape[1:]), np.float32)
        q /= q.sum(-1, keepdims=True)
        side = jax.block_until_ready(T.agent_side(mask, jnp.asarray(q), None))
        bounds = make_bounds(kernels, c, tuple(args.metrics), products=False)
        read_s = _median(bounds.read_only, args.repeats)
        for metric in args.metrics:
            arith_s = _median(bounds.arithmetic[metric], args.repeats) if metric != "kl" else 0.0
            bound_s = read_s + arith_s
            default = PK.default_config(metric, c, on_gpu=jax.default_backend() == "gpu")
            configs = [default] + [
                PK.KernelConfig(bj, bp, bx, num_warps=w, fast_log=default.fast_log)
                for bj, bp, bx, w in CANDIDATES[metric]
            ]
            for cfg in configs:
                if metric == "kl":
                    fn = jax.jit(lambda lk, wq, cfg=cfg: PK.pallas_cross(lk, wq, "fp32", cfg))
                    operands: tuple[Any, ...] = (log_kernels, side.wq)
                else:
                    fn = jax.jit(lambda kk, s, m=metric, cfg=cfg: PK.pallas_total(m, kk, s, cfg))
                    operands = (kernels, side)
                label = f"{metric} C={c} BJ={cfg.block_agents} BP={cfg.block_profiles} "
                label += f"BX={cfg.block_x} warps={cfg.num_warps}"
                try:
                    compiled = fn.lower(*operands).compile()
                    jax.block_until_ready(compiled(*operands))
                except Exception as exc:  # a tile that does not fit: report, go on
                    print(f"{label}: FAILED {type(exc).__name__}: {str(exc)[:200]}")
                    continue
                s = _median(
                    lambda compiled=compiled, operands=operands: compiled(*operands), args.repeats
                )
                row = {
                    "metric": metric,
                    "candidates": c,
                    "config": [cfg.block_agents, cfg.block_profiles, cfg.block_x, cfg.num_warps],
                    "default": cfg == default,
                    "ms": round(s * 1e3, 4),
                    "bound_ms": round(bound_s * 1e3, 4),
                    "over_bound": round(s / bound_s, 3),
                }
                results.append(row)
                print(
                    f"{label}{' (default)' if row['default'] else ''}: {row['ms']:.3f} ms, "
                    f"{row['over_bound']:.2f}x the bound ({row['bound_ms']:.3f} ms)"
                )
    print(json.dumps({"rows": results}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
