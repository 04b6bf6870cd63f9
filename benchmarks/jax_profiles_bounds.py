"""The device's own limits for a profile-scoring pass, measured in the bench's process.

* read-only: one XLA reduction over a bank-sized float32 array (``jnp.sum``): the time
  any pass needs just to read the bank once (no write, unlike a copy);
* product fp32 / bf16: ``[P, X] x [J, X]^T`` at the pass's shape, float32 inputs with
  ``precision=HIGHEST``, and bfloat16 inputs (a bf16 copy prepared beforehand) with float32
  accumulation: KL's product at the chip's matmul rate;
* arithmetic (JS / TV): the per-element arithmetic of ``tiled.element_terms`` for
  ``J x P x X`` (agent, profile, element) triples on operands that stay in cache, so
  it reads (almost) no memory: the pairs' arithmetic at the chip's rate with XLA's own
  ``log``.

A pass's bound: KL -- read-only (the must-show compares KL at 16 candidates with it);
JS and TV -- read-only + arithmetic (one read of the bank plus the arithmetic).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from engine.jax_profiles.tiled import element_terms

__all__ = ["Bounds", "make_bounds"]


class Bounds:
    """Compiled bound passes for one shape; each call blocks until done."""

    def __init__(
        self,
        read_only: Callable[[], Any],
        products: dict[str, Callable[[], Any]],
        arithmetic: dict[str, Callable[[], Any]],
    ) -> None:
        self.read_only = read_only
        self.products = products
        self.arithmetic = arithmetic


def _arith_fn(metric: str, n_elements: int) -> Callable[[], Any]:
    """The pairs' arithmetic on ``n_elements`` (agent, profile, x) triples, on operands
    small enough to stay in cache: ``[BJ, X']`` agents against ``[BP, X']`` profiles per
    step (256 x 256 x 4096 on a GPU, 16 x 16 x 4096 elsewhere), the profiles nudged by
    the step index so that nothing is hoisted out of the loop."""
    bj = bp = 256 if jax.default_backend() == "gpu" else 16
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

    prods: dict[str, Callable[[], Any]] = {}
    if products:
        rng = np.random.default_rng(0)
        wq32 = jnp.asarray(rng.random((n_agents, x), np.float32) / x)
        dims = (((1,), (1,)), ((), ()))
        hi = jax.lax.Precision.HIGHEST
        f32 = (
            jax.jit(lambda a, b: jax.lax.dot_general(a, b, dims, precision=hi))
            .lower(flat, wq32)
            .compile()
        )
        flat16 = flat.astype(jnp.bfloat16)
        wq16 = wq32.astype(jnp.bfloat16)
        f16 = (
            jax.jit(
                lambda a, b: jax.lax.dot_general(a, b, dims, preferred_element_type=jnp.float32)
            )
            .lower(flat16, wq16)
            .compile()
        )
        prods["fp32"] = lambda: jax.block_until_ready(f32(flat, wq32))
        prods["bf16"] = lambda: jax.block_until_ready(f16(flat16, wq16))

    arith: dict[str, Callable[[], Any]] = {}
    for metric in metrics:
        if metric in ("js", "tv"):
            arith[metric] = _arith_fn(metric, n_agents * p * x)
    return Bounds(read_only, prods, arith)
