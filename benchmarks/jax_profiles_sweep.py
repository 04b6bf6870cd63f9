"""Benchmark: the TPU kernels' tile sizes, and KL's product precisions, against the bounds.

    python -m benchmarks.jax_profiles_sweep [--profiles 4096 --candidates 16,256
                                               --metric js,tv,kl --repeats 5]

For tuning ``pallas_kernels`` (JS, TV) and the KL rows of ``choice.AUTO`` on a TPU:

* JS, TV: for each candidate count, the kernel alone (agent side prepared beforehand) at
  a few tile configurations, the default first, each with its own elementwise roofline
  (``pallas_kernels.roofline``: the same vector loop on VMEM-held tiles) and the
  read-only pass of the bank, measured in the same run; each configuration's result is
  checked against the default's. A configuration that does not compile is reported and
  skipped.
* KL: for each candidate count, the product ``[P, X] x [J, X]^T`` as the pass runs it
  in ``fp32``, ``bf16x3`` and ``bf16`` (``divergence._product``), against the read-only
  pass, and the reduced precisions' error relative to fp32 (``max |d| / max |fp32|``).

Random kernels; no selection, no reference (``benchmarks.jax_profiles`` has those).
Off a TPU the kernels are interpreted: run it there only at tiny sizes (a test does).
The last line is one JSON object with the figures.
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from engine.jax_profiles import divergence as D
from engine.jax_profiles import pallas_kernels as PK
from engine.jax_profiles import tiled as T

__all__ = ["main"]

TC = PK.TileConfig
# tried besides the default, in this order (``--configs N`` takes the first N): fewer
# reads of the bank (BJ) and of the agents (BP), wider X tiles, more agents a step
CANDIDATES = [
    TC(128, 256, 512, agents_per_step=2, vmem_limit_mb=48),
    TC(64, 512, 512, agents_per_step=2, vmem_limit_mb=48),
    TC(128, 512, 512, agents_per_step=2, vmem_limit_mb=96),
    TC(64, 256, 1024, agents_per_step=1),
    TC(64, 256, 512, agents_per_step=2),
    TC(64, 256, 512, agents_per_step=4),
    TC(128, 256, 1024, agents_per_step=1, vmem_limit_mb=64),
]


def _parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.jax_profiles_sweep")
    ap.add_argument("--profiles", type=int, default=4096)
    ap.add_argument("--levels", type=int, default=16)
    ap.add_argument("--states", type=int, default=1536)
    ap.add_argument("--actions", type=int, default=4)
    ap.add_argument("--candidates", default="16,256", help="comma list of agent counts")
    ap.add_argument("--metric", default="js,tv,kl", help="comma list of kl, js, tv")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument(
        "--configs",
        default=str(len(CANDIDATES)),
        help="how many CANDIDATES to try besides the default, per candidate count "
        "(one number, or a comma list matching --candidates)",
    )
    args = ap.parse_args(argv)
    args.counts = [int(c) for c in args.candidates.split(",") if c.strip()]
    args.metrics = [m.strip() for m in args.metric.split(",") if m.strip()]
    n_configs = [int(n) for n in args.configs.split(",") if n.strip()]
    if len(n_configs) == 1:
        n_configs *= len(args.counts)
    if len(n_configs) != len(args.counts) or min(n_configs, default=0) < 0:
        ap.error("--configs: one count >= 0, or one per --candidates entry")
    args.n_configs = dict(zip(args.counts, n_configs, strict=True))
    bad = [m for m in args.metrics if m not in ("kl", "js", "tv")]
    if bad or not args.metrics or any(c < 1 for c in args.counts) or args.repeats < 1:
        ap.error("--metric takes kl, js, tv; --candidates and --repeats must be >= 1")
    return args


def median_s(fn: Callable[[], Any], repeats: int) -> float:
    """The median of ``repeats`` timed calls of ``fn`` after one untimed (compile, warm-up)."""
    jax.block_until_ready(fn())
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(fn())
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def rel_err(a: Any, b: Any) -> float:
    """The largest absolute difference relative to the largest magnitude of ``b``."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.abs(a - b).max() / max(float(np.abs(b).max()), 1e-30))


def _sweep_kernels(
    metric: str, c: int, kernels: jax.Array, side: T.AgentSide, read_s: float, args: Any
) -> list[dict[str, Any]]:
    p, x = kernels.shape[0], kernels[0].size
    default = PK.default_config(metric)
    configs = [default, *CANDIDATES[: args.n_configs[c]]]
    rows: list[dict[str, Any]] = []
    first = None
    seen = set()
    roofs: dict[Any, float] = {}
    for cfg in configs:
        g = PK.groups(kernels.shape, cfg)
        lay = PK.layout(cfg, p, c, x // g, g)
        key = (lay, cfg.agents_per_step)
        label = f"{metric} C={c} BJ={lay.bj} BP={lay.bp} BX={lay.bx} AG={cfg.agents_per_step}"
        if key in seen:  # clipped to the same blocks as one already run
            continue
        seen.add(key)
        roof_key = key
        try:
            t0 = time.perf_counter()
            fn = jax.jit(lambda k, s, cfg=cfg: PK.pallas_total(metric, k, s, cfg))
            compiled = fn.lower(kernels, side).compile()
            out = jax.block_until_ready(compiled(kernels, side))
            if roof_key not in roofs:
                bound = PK.roofline(metric, p, c, x, cfg, g=PK.groups(kernels.shape, cfg))
                bound.run()
                roofs[roof_key] = median_s(bound.run, args.repeats)
            compile_s = time.perf_counter() - t0
        except Exception as exc:  # a tile that does not fit: report, go on
            print(f"{label}: FAILED {type(exc).__name__}: {str(exc)[:400]}")
            continue
        s = median_s(functools.partial(compiled, kernels, side), args.repeats)
        roof_s = roofs[roof_key]
        if first is None:
            first = out
        row = {
            "metric": metric,
            "candidates": c,
            "config": label,
            "default": cfg == default,
            "ms": round(s * 1e3, 4),
            "roofline_ms": round(roof_s * 1e3, 4),
            "read_only_ms": round(read_s * 1e3, 4),
            "over_roofline": round(s / roof_s, 3),
            "over_bound": round(s / max(roof_s, read_s), 3),
            "rel_err_vs_default": rel_err(out, first),
            "compile_s": round(compile_s, 2),
        }
        rows.append(row)
        print(
            f"{label}{' (default)' if row['default'] else ''}: {row['ms']:.3f} ms, roofline "
            f"{row['roofline_ms']:.3f} ms ({row['over_roofline']:.2f}x), read-only "
            f"{row['read_only_ms']:.3f} ms; vs default {row['rel_err_vs_default']:.1e}; "
            f"compile {compile_s:.1f} s"
        )
    return rows


def _sweep_kl(c: int, log_kernels: jax.Array, wq: jax.Array, read_s: float, args: Any) -> dict:
    flat = log_kernels.reshape(log_kernels.shape[0], -1)
    out: dict[str, Any] = {"metric": "kl", "candidates": c, "read_only_ms": round(read_s * 1e3, 4)}
    ref = None
    for precision in ("fp32", "bf16x3", "bf16"):
        fn = jax.jit(lambda a, b, pr=precision: D._product(a, b, pr)).lower(flat, wq).compile()
        got = jax.block_until_ready(fn(flat, wq))
        s = median_s(functools.partial(fn, flat, wq), args.repeats)
        ref = got if ref is None else ref
        out[f"{precision}_ms"] = round(s * 1e3, 4)
        out[f"{precision}_over_read_only"] = round(s / read_s, 3)
        out[f"{precision}_rel_err"] = rel_err(got, ref)
    print(
        f"kl C={c}: read-only {read_s * 1e3:.3f} ms; product "
        + "; ".join(
            f"{pr} {out[f'{pr}_ms']:.3f} ms ({out[f'{pr}_over_read_only']:.2f}x, "
            f"err {out[f'{pr}_rel_err']:.1e})"
            for pr in ("fp32", "bf16x3", "bf16")
        )
    )
    return out


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    rng = np.random.default_rng(0)
    shape = (args.profiles, args.levels, args.states, args.actions)
    k = rng.random(shape, np.float32) ** 4  # peaked rows, some near-zero actions
    k /= k.sum(-1, keepdims=True)
    kernels = jax.device_put(k)
    log_kernels = jax.device_put(np.log(np.maximum(k, 1e-8)))
    del k
    mask = jnp.asarray(np.ones(shape[1:3], bool))
    print(f"jax {jax.__version__} on {jax.devices()[0].device_kind}; bank {shape}")
    flat = kernels.reshape(args.profiles, -1)
    read = jax.jit(jnp.sum).lower(flat).compile()
    read_s = median_s(lambda: read(flat), args.repeats)
    print(
        f"read-only pass of the bank: {read_s * 1e3:.3f} ms ({flat.nbytes / read_s / 1e9:.1f} GB/s)"
    )
    results: list[dict[str, Any]] = []
    agent_side = jax.jit(T.agent_side)
    for c in args.counts:
        q = rng.random((c, *shape[1:]), np.float32) ** 4
        q /= q.sum(-1, keepdims=True)
        vis = rng.random((c, *shape[1:3]), np.float32)
        side = jax.block_until_ready(agent_side(mask, jnp.asarray(q), jnp.asarray(vis)))
        for metric in args.metrics:
            if metric == "kl":
                results.append(_sweep_kl(c, log_kernels, side.wq, read_s, args))
            else:
                results += _sweep_kernels(metric, c, kernels, side, read_s, args)
    print(json.dumps({"read_only_ms": round(read_s * 1e3, 4), "rows": results}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
