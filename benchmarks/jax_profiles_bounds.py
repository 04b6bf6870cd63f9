"""The device's own limits for a profile-scoring pass, measured in the bench's process.

* read-only: one XLA reduction over a bank-sized float32 array (``jnp.sum``): the time
  any pass needs just to read the bank once (no write, unlike a copy);
* products (KL): ``[P, X] x [J, X]^T`` at the pass's shape with float32 accumulation:
  ``fp32`` and ``bf16x3`` on the float32 bank as the pass runs them
  (``divergence._product``), and ``bf16`` on a bfloat16 copy prepared beforehand (the
  chip's matmul rate on half the bytes; context, not a bound of a pass that reads float32);
* elementwise (JS, TV): on a TPU, ``pallas_kernels.roofline``: the kernel's own vector
  loop, as many grid steps as the pass, on a bank tile and agent tiles held in VMEM
  (no HBM traffic, no product): the pair terms at the rate the chip runs them.
  Elsewhere (no Mosaic) the pairs' arithmetic as an XLA program on cache-resident
  operands (``tiled.element_terms``), the CPU's figure.

A pass's bound: KL -- read-only; JS and TV -- the larger of read-only and elementwise
(a pass that overlaps its reads with its arithmetic, as the kernel's pipeline does,
cannot beat either).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from engine.jax_profiles import divergence as D
from engine.jax_profiles.tiled import element_terms

__all__ = ["Bounds", "make_bounds"]


class Bounds:
    """Compiled bound passes for one shape; each call blocks until done."""

    def __init__(
        self,
        read_only: Callable[[], Any],
        products: dict[str, Callable[[], Any]],
        elementwise: dict[str, Callable[[], Any]],
        elementwise_kind: str,
    ) -> None:
        self.read_only = read_only
        self.products = products
        self.elementwise = elementwise
        self.elementwise_kind = elementwise_kind


def _xla_arithmetic(metric: str, n_elements: int) -> Callable[[], Any]:
    """The pairs' arithmetic on ``n_elements`` (agent, profile, x) triples, on operands
    small enough to stay in cache: ``[16, 4096]`` agents against ``[16, 4096]`` profiles
    per step, the profiles nudged by the step index so that nothing is hoisted out of
    the loop."""
    bj = bp = 16
    xc = 4096
    reps = max(1, math.ceil(n_elements / (bj * bp * xc)))
    rng = np.random.default_rng(1)
    q = rng.random((bj, xc), np.float32)
    k = rng.random((bp, xc), np.float32)
    w = rng.random((bj, xc), np.float32) * 1e-6
    hq = 0.5 * q * np.log(q)
    hk = 0.5 * k * np.log(k)

    @jax.jit
    def run(q: jax.Array, k: jax.Array, w: jax.Array, hq: jax.Array, hk: jax.Array) -> jax.Array:
        def body(i: jax.Array, acc: jax.Array) -> jax.Array:
            kk = k * (1.0 + 1e-7 * i.astype(jnp.float32))
            terms = element_terms(metric, q[:, None], hq[:, None], kk[None], hk[None])
            return acc + jnp.sum(w[:, None] * terms)

        return jax.lax.fori_loop(0, reps, body, jnp.float32(0.0))

    ops = tuple(jax.device_put(a) for a in (q, k, w, hq, hk))
    compiled = run.lower(*ops).compile()
    return lambda: jax.block_until_ready(compiled(*ops))


def _blocking(fn: Callable[..., Any], *args: Any) -> Any:
    return jax.block_until_ready(fn(*args))


def _products(flat: jax.Array, n_agents: int) -> dict[str, Callable[[], Any]]:
    x = flat.shape[1]
    rng = np.random.default_rng(0)
    wq32 = jnp.asarray(rng.random((n_agents, x), np.float32) / x)
    out: dict[str, Callable[[], Any]] = {}
    for precision in ("fp32", "bf16x3"):
        product = jax.jit(D._product, static_argnames=("precision",))
        fn = product.lower(flat, wq32, precision=precision).compile()
        out[precision] = functools.partial(_blocking, fn, flat, wq32)
    dims = (((1,), (1,)), ((), ()))
    flat16, wq16 = flat.astype(jnp.bfloat16), wq32.astype(jnp.bfloat16)
    f16 = (
        jax.jit(lambda a, b: jax.lax.dot_general(a, b, dims, preferred_element_type=jnp.float32))
        .lower(flat16, wq16)
        .compile()
    )
    out["bf16"] = lambda: jax.block_until_ready(f16(flat16, wq16))
    return out


def make_bounds(
    bank_array: jax.Array, n_agents: int, metrics: tuple[str, ...], products: bool
) -> Bounds:
    """Compile the bound passes for ``bank_array [P, ...]`` and ``n_agents`` agents."""
    p = bank_array.shape[0]
    flat = bank_array.reshape(p, -1)
    x = flat.shape[1]
    read = jax.jit(jnp.sum).lower(flat).compile()

    def read_only() -> Any:
        return jax.block_until_ready(read(flat))

    on_tpu = jax.default_backend() == "tpu"
    elementwise: dict[str, Callable[[], Any]] = {}
    for metric in metrics:
        if metric not in ("js", "tv"):
            continue
        if on_tpu:
            from engine.jax_profiles import pallas_kernels as PK

            cfg = PK.default_config(metric)
            g = PK.groups(bank_array.shape, cfg)  # the planes the pass reads
            elementwise[metric] = PK.roofline(metric, p, n_agents, x, cfg, g=g).run
        else:
            elementwise[metric] = _xla_arithmetic(metric, n_agents * p * x)
    kind = "Pallas roofline, VMEM-held tiles" if on_tpu else "XLA arithmetic, cache-resident"
    return Bounds(read_only, _products(flat, n_agents) if products else {}, elementwise, kind)
