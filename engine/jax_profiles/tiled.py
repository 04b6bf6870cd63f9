"""JS and TV with one read of the bank for all agents: a blocked XLA program.

The reference (``divergence._pairwise_per_level``) maps over agents, so the bank is read
once per agent. Here the loop runs over blocks of ``block`` profiles instead, and every
agent is scored against the block while it is in cache: the bank is read once per pass
and each agent once per block.

Both metrics are written per element ``x = (l, s, a)`` of the flattened kernels, with
the agent side prepared once (``AgentSide``):

    w[j, x]  = w_total[j, l, s]                    (visitation weight of x's state, summing
                                                    to 1 over the agent's valid states)
    q[j, x]  = agent kernel, 0 where w == 0        (masked states never reach a sum)
    hq[j, x] = 1/2 q log q                         (0 log 0 = 0)

    TV: total[p, j] = sum_x w[j, x] * 1/2 |q[j, x] - k[p, x]|
    JS: total[p, j] = sum_x w[j, x] * max(hq[j, x] + 1/2 k log k - m log m, 0),
                      m = (q + k) / 2,  m log m = (t/2)(log t - log 2),  t = q + k

TV is exactly the per-state formula of ``divergence.py`` (w is constant over a state's
actions). For JS the per-element term is ``1/2 q log q + 1/2 k log k - m log m >= 0``
(convexity of ``x log x``), so clamping each element at 0 removes the same rounding
noise the reference clamps per state; the two agree to float32 rounding. One log per
(agent, profile, element) for ``m log m``; ``k log k`` costs one log per bank element
per block, shared by all agents.

The same ``AgentSide`` feeds the Pallas kernels (``pallas_kernels.py``).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp

__all__ = [
    "DEFAULT_BLOCK",
    "AgentSide",
    "agent_side",
    "element_terms",
    "tiled_total",
    "xlogx",
]

# Profiles per block, measured on XLA's CPU backend at 16 x 1536 x 4 with 16 agents: TV
# gains from 8 profiles (3 MB) per block, JS (bound by its log) is fastest one at a time.
# Even so the reference path is faster there (choice.AUTO), and on a TPU the Pallas
# kernels are: this path is the one-read XLA program, kept as a measured alternative.
DEFAULT_BLOCK = {"js": 1, "tv": 8}
LOG2 = math.log(2.0)


class AgentSide(NamedTuple):
    """Per-element agent arrays ``[J, X]`` (``X = L * S * A``), prepared once per pass."""

    q: jax.Array  # agent kernels, 0 where the weight is 0
    w: jax.Array  # visitation weight of each element's state, normalised over all states
    hq: jax.Array  # 1/2 q log q
    wq: jax.Array  # w * q (the KL product's agent operand)


def xlogx(x: jax.Array) -> jax.Array:
    """``x log x`` with ``0 log 0 = 0`` (and no NaN gradient path through ``log 0``)."""
    return x * jnp.log(jnp.where(x > 0, x, 1.0))


def agent_side(state_mask: jax.Array, agents: jax.Array, visitation: jax.Array | None) -> AgentSide:
    """Weights normalised over each agent's valid states; zero-mass agents get all zeros."""
    j, n_levels, n_states, n_actions = agents.shape
    v = jnp.ones(agents.shape[:-1], agents.dtype) if visitation is None else visitation
    w = jnp.where(state_mask[None], jnp.maximum(v.astype(agents.dtype), 0.0), 0.0)
    mass = w.sum((1, 2))
    w = w * (1.0 / jnp.where(mass > 0, mass, 1.0))[:, None, None]  # [J, L, S]
    w4 = jnp.broadcast_to(w[..., None], agents.shape)
    # the select (not a product) keeps NaN / inf on masked states out of every sum
    q = jnp.where(w4 > 0, agents, 0.0)
    flat = (j, n_levels * n_states * n_actions)
    return AgentSide(
        q=q.reshape(flat),
        w=w4.reshape(flat),
        hq=(0.5 * xlogx(q)).reshape(flat),
        wq=(w4 * q).reshape(flat),
    )


def mlogm(t: jax.Array) -> jax.Array:
    """``m log m`` for ``m = t / 2`` (``t = q + k >= 0``), one log."""
    return 0.5 * t * (jnp.log(jnp.where(t > 0, t, 1.0)) - LOG2)


def element_terms(
    metric: str, q: jax.Array, hq: jax.Array, k: jax.Array, hk: jax.Array | None
) -> jax.Array:
    """Per-element divergence of broadcastable agent (``q``, ``hq``) and profile (``k``,
    ``hk = 1/2 k log k``) operands."""
    if metric == "tv":
        return 0.5 * jnp.abs(q - k)
    assert hk is not None
    return jnp.maximum(hq + hk - mlogm(q + k), 0.0)


def _block_total(metric: str, side: AgentSide, k: jax.Array) -> jax.Array:
    """``[B, J]`` for a block of profiles ``k [B, X]``: one fused elementwise + reduce."""
    hk = 0.5 * xlogx(k) if metric == "js" else None
    terms = element_terms(
        metric,
        side.q[None],
        side.hq[None],
        k[:, None],
        None if hk is None else hk[:, None],
    )
    return (side.w[None] * terms).sum(-1)


def tiled_total(
    metric: str, kernels: jax.Array, side: AgentSide, block: int | None = None
) -> jax.Array:
    """Profile-major ``[P, J]`` JS or TV, reading ``kernels [P, ...]`` once, ``block``
    profiles at a time.

    ``P`` need not divide by ``block``: the last block starts at ``P - block`` (it
    overlaps the one before; only its new rows are kept), so the bank is never padded
    or copied.
    """
    if metric not in ("js", "tv"):
        raise ValueError(f"tiled_total scores js or tv, got {metric!r}")
    p = kernels.shape[0]
    k = kernels.reshape(p, -1)
    b = max(1, min(DEFAULT_BLOCK[metric] if block is None else block, p))
    n_blocks = -(-p // b)

    def one(start: jax.Array) -> jax.Array:
        return _block_total(metric, side, jax.lax.dynamic_slice_in_dim(k, start, b, 0))

    # lax.map, not a fori_loop over an output carry: no carry whose replication type
    # would differ from the body's under shard_map (sharding.py scores inside one)
    starts = jnp.minimum(jnp.arange(n_blocks) * b, p - b)
    blocks = jax.lax.map(one, starts)  # [n_blocks, b, J]
    tail = p - (n_blocks - 1) * b  # rows of the last block not already in the others
    return jnp.concatenate([blocks[:-1].reshape(-1, blocks.shape[-1]), blocks[-1, b - tail :]])
