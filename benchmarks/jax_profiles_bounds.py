"""The device's own limits for a profile-scoring pass, measured in the bench's process.

* read-only: one XLA reduction over a bank-sized float32 array (``jnp.sum``): the time
  any pass needs just to read the bank once (no write, unlike a copy);
* product fp32 / bf16: ``[P, X] x [J, X]^T`` at the pass's shape, float32 inputs with
  ``precision=HIGHEST``, and bfloat16 inputs (a bf16 copy prepared beforehand) with float32
  accumulation: KL's product at the chip's matmul rate;
* arithmetic (JS / TV): the per-element arithmetic of ``tiled.element_terms`` on
  ``J x P x X`` values generated from iotas inside one fused reduction, so it reads no
  memory: the pairs' arithmetic at the chip's rate with XLA's own ``log``.

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

_ROWS_PER_CALL = 1 << 14  # rows of the generated [rows, X] arithmetic: fits any int32 index


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


def _arith_fn(metric: str, rows: int, x: int, reps: int) -> Callable[[], Any]:
    """``reps`` x ``[rows, x]`` generated elements scored and summed (no memory read)."""

    @jax.jit
    def run(seed: jax.Array) -> jax.Array:
        def body(i: jax.Array, acc: jax.Array) -> jax.Array:
            r = jax.lax.broadcasted_iota(jnp.float32, (rows, x), 0) + i.astype(jnp.float32)
            c = jax.lax.broadcasted_iota(jnp.float32, (rows, x), 1)
            u = r * 0.618034 + c * 0.0137 + seed
            q = u - jnp.floor(u)  # in [0, 1)
            k = 1.0 - q * 0.5
            w = q * 1e-6
            hq = 0.5 * q * q  # stand-ins: loaded operands in the kernel, no log here
            hk = 0.25 * k
            terms = element_terms(metric, q, hq, k, hk)
            return acc + jnp.sum(w * terms)

        return jax.lax.fori_loop(0, reps, body, jnp.float32(0.0))

    seed = jnp.float32(0.25)
    compiled = run.lower(seed).compile()
    return lambda: jax.block_until_ready(compiled(seed))


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
    pairs_rows = n_agents * p  # one row per (agent, profile) pair, X elements each
    rows = min(_ROWS_PER_CALL, pairs_rows)
    reps = math.ceil(pairs_rows / rows)
    for metric in metrics:
        if metric in ("js", "tv"):
            arith[metric] = _arith_fn(metric, rows, x, reps)
    return Bounds(read_only, prods, arith)
