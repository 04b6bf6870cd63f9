"""Where a JS / TV kernel pass goes on a TPU: the bank's relayout, the kernel, its roofline.

    python -m benchmarks.jax_profiles_layout [--profiles 4096 --candidates 256,16
                                              --metric tv,js --repeats 5]

For tuning ``pallas_kernels`` on the chip (``benchmarks/jax_profiles_device.sh``, step 6).
On one bank of ``[P, 16, 1536, 4]`` float32 kernels (its layout as XLA keeps a jit's
output, the way ``build_bank`` returns it), per metric and candidate count, each timed in
the same process (medians of ``--repeats``):

* ``relayout``: ``bank_planes`` alone, the bank as the kernel reads it (``[A, P, L S]``
  action planes, or ``[1, P, X]`` flat), written out;
* ``kernel``: ``planes_total`` on planes made beforehand, for a few tile configurations
  (flat and action planes, JS's ``t ln t`` and ``t log2 t``), each against its own
  ``roofline`` (the same vector loop on VMEM-held tiles);
* ``pass``: ``pallas_total`` on the 4-D bank (relayout + kernel), the default config;
* KL: XLA's bf16x3 pass on the 4-D log kernels against the same three bf16 products on
  a bank stored split (``hi``, ``lo`` bfloat16 ``[P, X]``) and the read-only pass.

The last line is one JSON object with every row.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import sys
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from benchmarks.jax_profiles_sweep import median_s, rel_err
from engine.jax_profiles import divergence as D
from engine.jax_profiles import pallas_kernels as PK
from engine.jax_profiles import tiled as T

TC = PK.TileConfig
# (label, config) per metric: the default first
CONFIGS = {
    "tv": [
        ("planes 128/512/256 ag2 (default)", TC(128, 512, 256, 2, 96)),
        ("flat (old default)", TC(128, 512, 512, 2, 96, group_actions=False)),
        ("planes 128/512/512 ag1", TC(128, 512, 512, 1, 100)),
        ("planes 128/256/256 ag2", TC(128, 256, 256, 2, 96)),
        ("planes 128/512/128 ag4", TC(128, 512, 128, 4, 96)),
        ("planes 64/512/256 ag2", TC(64, 512, 256, 2, 96)),
    ],
    "js": [
        ("planes 128/512/256 ag1 (default)", TC(128, 512, 256, 1, 96)),
        ("flat (old default)", TC(128, 256, 1024, 1, 64, group_actions=False)),
        ("planes 128/256/256 ag2", TC(128, 256, 256, 2, 64)),
        ("planes 128/256/256 ag1", TC(128, 256, 256, 1, 64)),
        ("planes 128/256/512 ag1", TC(128, 256, 512, 1, 96)),
        ("planes 128/256/128 ag2", TC(128, 256, 128, 2, 64)),
        ("planes 128/256/256 ag1 log2", TC(128, 256, 256, 1, 64, log2=True)),
    ],
}


def _parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profiles", type=int, default=4096)
    ap.add_argument("--levels", type=int, default=16)
    ap.add_argument("--states", type=int, default=1536)
    ap.add_argument("--actions", type=int, default=4)
    ap.add_argument("--candidates", default="256,16")
    ap.add_argument("--metric", default="tv,js")
    ap.add_argument("--configs", type=int, default=99, help="configs a metric (default first)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--no-kl", action="store_true")
    args = ap.parse_args(argv)
    args.counts = [int(c) for c in args.candidates.split(",")]
    args.metrics = [m for m in args.metric.split(",") if m]
    return args


def _kl_rows(
    log_kernels: jax.Array,
    side: T.AgentSide,
    mask: jax.Array,
    q: Any,
    vis: Any,
    read_s: float,
    repeats: int,
) -> dict[str, Any]:
    """XLA's bf16x3 pass on the 4-D log kernels against three bf16 products on a bank
    kept split into bfloat16 hi + lo ``[P, X]`` (the split made once, beforehand)."""
    p = log_kernels.shape[0]
    flat = log_kernels.reshape(p, -1)
    hi = flat.astype(jnp.bfloat16)
    lo = (flat - hi.astype(jnp.float32)).astype(jnp.bfloat16)
    hi, lo = jax.block_until_ready((hi, lo))
    dims = (((1,), (1,)), ((), ()))

    def split3(hi: jax.Array, lo: jax.Array, wq: jax.Array) -> jax.Array:
        w_hi = wq.astype(jnp.bfloat16)
        w_lo = (wq - w_hi.astype(jnp.float32)).astype(jnp.bfloat16)
        f32 = jnp.float32
        out = jax.lax.dot_general(hi, w_hi, dims, preferred_element_type=f32)
        out += jax.lax.dot_general(hi, w_lo, dims, preferred_element_type=f32)
        return out + jax.lax.dot_general(lo, w_hi, dims, preferred_element_type=f32)

    def split2(hi: jax.Array, lo: jax.Array, wq: jax.Array) -> jax.Array:
        w_hi = wq.astype(jnp.bfloat16)
        f32 = jnp.float32
        out = jax.lax.dot_general(hi, w_hi, dims, preferred_element_type=f32)
        return out + jax.lax.dot_general(lo, w_hi, dims, preferred_element_type=f32)

    out: dict[str, Any] = {"metric": "kl", "candidates": int(side.q.shape[0])}
    ref = jax.jit(functools.partial(D._product, precision="fp32")).lower(flat, side.wq).compile()
    want = ref(flat, side.wq)
    for name, fn, ops in (
        (
            "xla_bf16x3_4d",
            jax.jit(functools.partial(D._kl_total, mask, precision="bf16x3")),
            (log_kernels, q, vis),
        ),
        (
            "xla_bf16x3_flat_product",
            jax.jit(functools.partial(D._product, precision="bf16x3")),
            (flat, side.wq),
        ),
        ("stored_split_3_products", jax.jit(split3), (hi, lo, side.wq)),
        ("stored_split_2_products", jax.jit(split2), (hi, lo, side.wq)),
        (
            "xla_bf16_4d",
            jax.jit(functools.partial(D._kl_total, mask, precision="bf16")),
            (log_kernels, q, vis),
        ),
    ):
        compiled = fn.lower(*ops).compile()
        got = compiled(*ops)
        s = median_s(functools.partial(compiled, *ops), repeats)
        out[f"{name}_ms"] = round(s * 1e3, 4)
        out[f"{name}_over_read"] = round(s / read_s, 3)
        if "product" in name:
            out[f"{name}_rel_err"] = rel_err(got, want)
    print("kl:", out)
    return out


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    shape = (args.profiles, args.levels, args.states, args.actions)

    @jax.jit
    def make(key: jax.Array) -> tuple[jax.Array, jax.Array]:
        k = jax.random.uniform(key, shape, jnp.float32) ** 4
        k = k / k.sum(-1, keepdims=True)
        return k, jnp.log(jnp.maximum(k, 1e-8))

    kernels, log_kernels = jax.block_until_ready(make(jax.random.PRNGKey(0)))
    fmt = getattr(kernels, "format", None) or getattr(kernels, "layout", None)
    print(f"jax {jax.__version__} on {jax.devices()[0].device_kind}; bank {shape}; layout {fmt}")
    flat = jax.block_until_ready(kernels.reshape(args.profiles, -1) + 0.0)
    read = jax.jit(jnp.sum).lower(flat).compile()
    read_s = median_s(functools.partial(read, flat), args.repeats)
    print(f"read-only (flat copy): {read_s * 1e3:.3f} ms ({flat.nbytes / read_s / 1e9:.0f} GB/s)")
    read4 = jax.jit(jnp.sum).lower(kernels).compile()
    read4_s = median_s(functools.partial(read4, kernels), args.repeats)
    print(f"read-only (4-D bank): {read4_s * 1e3:.3f} ms")
    del flat
    rows: list[dict[str, Any]] = []
    planes_fn = {g: jax.jit(functools.partial(PK.bank_planes, g=g)) for g in (1, args.actions)}
    planes = {}
    for g, fn in planes_fn.items():
        relayout = fn.lower(kernels).compile()
        planes[g] = jax.block_until_ready(relayout(kernels))
        s = median_s(functools.partial(relayout, kernels), args.repeats)
        rows.append({"what": "relayout", "groups": g, "ms": round(s * 1e3, 4)})
        print(f"relayout to {planes[g].shape}: {s * 1e3:.3f} ms")
    rng = np.random.default_rng(1)
    mask = jnp.ones(shape[1:3], bool)
    agent_side = jax.jit(T.agent_side)
    for c in args.counts:
        q = rng.random((c, *shape[1:]), np.float32) ** 4
        q /= q.sum(-1, keepdims=True)
        vis = rng.random((c, *shape[1:3]), np.float32)
        qd, visd = jnp.asarray(q), jnp.asarray(vis)
        side = jax.block_until_ready(agent_side(mask, qd, visd))
        for metric in args.metrics:
            first = None
            for label, cfg in CONFIGS[metric][: args.configs]:
                g = PK.groups(shape, cfg)
                tag = f"{metric} C={c} {label}"
                try:
                    t0 = time.perf_counter()
                    fn = jax.jit(functools.partial(PK.planes_total, metric, cfg=cfg))
                    compiled = fn.lower(planes[g], side).compile()
                    out = jax.block_until_ready(compiled(planes[g], side))
                    bound = PK.roofline(metric, shape[0], c, kernels[0].size, cfg, g=g)
                    roof_s = median_s(bound.run, args.repeats)
                    compile_s = time.perf_counter() - t0
                except Exception as exc:  # a tile that does not fit: say so, go on
                    print(f"{tag}: FAILED {type(exc).__name__}: {str(exc)[:300]}")
                    continue
                s = median_s(functools.partial(compiled, planes[g], side), args.repeats)
                first = out if first is None else first
                row = {
                    "what": "kernel",
                    "metric": metric,
                    "candidates": c,
                    "config": label,
                    "cfg": dataclasses.asdict(cfg),
                    "ms": round(s * 1e3, 4),
                    "roofline_ms": round(roof_s * 1e3, 4),
                    "over_roofline": round(s / roof_s, 3),
                    "rel_err_vs_first": rel_err(out, first),
                    "compile_s": round(compile_s, 1),
                }
                rows.append(row)
                print(
                    f"{tag}: {s * 1e3:.3f} ms, roofline {roof_s * 1e3:.3f} ms "
                    f"({s / roof_s:.2f}x), vs first {row['rel_err_vs_first']:.1e}"
                )
            for label, cfg in (CONFIGS[metric][0], CONFIGS[metric][1]):
                fn = jax.jit(functools.partial(PK.pallas_total, metric, cfg=cfg))
                compiled = fn.lower(kernels, side).compile()
                s = median_s(functools.partial(compiled, kernels, side), args.repeats)
                rows.append(
                    {
                        "what": "pass",
                        "metric": metric,
                        "candidates": c,
                        "config": label,
                        "ms": round(s * 1e3, 4),
                    }
                )
                print(f"{metric} C={c} {label}: pass on the 4-D bank {s * 1e3:.3f} ms")
        if not args.no_kl:
            rows.append(_kl_rows(log_kernels, side, mask, qd, visd, read4_s, args.repeats))
    print(json.dumps({"read_only_ms": round(read_s * 1e3, 4), "rows": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
