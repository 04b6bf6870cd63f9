"""Divergences between J agent kernels and all P bank profiles in one compiled pass.

Notation: agent kernel ``q_j(a|l,s)``, profile kernel ``k_p(a|l,s)``, valid states
``state_mask[l, s]``, agent state-visitation weights ``v_j[l, s] >= 0`` (uniform over
valid states when not given). Masked states get weight 0, whatever the kernels hold
there. Per-state divergences (natural log, ``0 log 0 = 0``):

* KL  ``d_KL = sum_a q(a) * (log q(a) - log max(k(a), floor))``.
  The floor (``ProfileBank.floor``, default ``1e-8``) makes a profile that gives an
  action zero probability cost at most ``-log(floor) ~= 18.4`` nats per unit of agent
  mass on that action, instead of ``inf``: scores stay finite and ordered, and
  gradients/argmaxes stay meaningful. It is KL against ``max(k, floor)``, which
  differs from ``k`` by at most ``A * floor`` in total mass.
* JS  ``d_JS = 1/2 KL(q || m) + 1/2 KL(k || m)``, ``m = (q + k) / 2``; in ``[0, log 2]``,
  needs no floor.
* TV  ``d_TV = 1/2 sum_a |q(a) - k(a)|``; in ``[0, 1]``.

Aggregation with visitation weights ``w = v * state_mask``:

    per_level[j, p, l] = sum_s w[j,l,s] d(q_j, k_p)(l,s) / W[j,l],   W[j,l] = sum_s w[j,l,s]
    total[j, p]        = sum_{l,s} w[j,l,s] d(q_j, k_p)(l,s) / sum_l W[j,l]
                       = sum_l (W[j,l] / sum_l' W[j,l']) per_level[j, p, l]

A level (or agent) with zero weight gets 0.

Structure used for speed: KL splits into an agent-only term and a cross term,

    total_KL[j, p] = sum_x wq[j, x] log q[j, x]  -  sum_x wq[j, x] logk[p, x],
    wq[j, x] = (w[j, l, s] / sum W[j]) q[j, l, s, a],  x = (l, s, a) flattened,

so all J x P cross terms are one matrix product ``logk[P, X] @ wq[J, X]^T`` over the
flattened kernel (one read of the bank), and the self term is agent-only work fused
into the same program (``total = self - cross``). ``precision`` picks the product's
inputs, always accumulated in float32:

* ``fp32``: ``precision=HIGHEST``, float32 everywhere (TPU's default f32 matmul would
  use bf16 passes; HIGHEST is six of them);
* ``bf16x3``: each input split into two bfloat16 parts ``hi + lo``, three products
  ``hi hi + hi lo + lo hi`` (about 16 mantissa bits; half of fp32's MXU passes);
* ``tf32``: TF32 inputs on a GPU (10-bit mantissa; on TPU the same 3-pass algorithm);
* ``bf16``: bfloat16 inputs (8-bit mantissa);
* ``auto`` (default): ``choice.AUTO`` per backend and candidate count.

On CPU the reduced precisions are emulated by rounding (and splitting) the operands
(XLA's CPU dot ignores the algorithm), so their error on a selection can be measured
anywhere.

JS and TV have no such split in XLA. Implementations (``impl``, static):

* ``reference``: pairwise with ``lax.map`` over agents, reading the bank once per agent
  (memory O(P L S) per agent); the definition the others are tested against.
* ``tiled`` (``tiled.py``): one XLA loop over blocks of profiles with every agent scored
  against the block, so the bank is read once per pass.
* ``pallas`` (``pallas_kernels.py``): Mosaic TPU kernels (``interpret=True`` elsewhere),
  a tile of the bank read once for a block of agents, the separable terms on the MXU and
  only the per-pair term on the vector unit. KL has no kernel of its own: XLA's dot reads
  the bank once, and a Pallas product measured no faster (bf16x3 4.33 ms against XLA's
  4.18 at 4096 x 256 on a TPU v5e, device run 2).
* ``auto`` (default): ``choice.AUTO``, measured per backend and shape. Inside
  ``shard_map`` ``auto`` keeps to the XLA paths (the reference), whose per-device
  programs XLA partitions itself; a Pallas kernel there is an explicit ``impl="pallas"``.

Shapes are static, so new data with the same shapes never recompiles.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax.scipy.special import xlogy

from engine.jax_profiles import tiled
from engine.jax_profiles.bank import ProfileBank
from engine.jax_profiles.choice import (
    IMPLS,
    METRICS,
    PRECISIONS,
    check,
    resolve_impl,
    resolve_precision,
)

__all__ = [
    "IMPLS",
    "METRICS",
    "PRECISIONS",
    "Divergences",
    "divergence_total",
    "divergences",
    "per_level_divergences",
    "resolve_impl",
    "resolve_precision",
    "total_divergences",
    "validate_agents",
]

_HI = jax.lax.Precision.HIGHEST


class Divergences(NamedTuple):
    per_level: jax.Array  # float32 [J, P, L]
    total: jax.Array  # float32 [J, P]


class _Weights(NamedTuple):
    q: jax.Array  # [J, L, S, A] agent kernels, zero on masked states
    level: jax.Array  # [J, L, S] normalised within each level
    total: jax.Array  # [J, L, S] normalised over all levels
    level_frac: jax.Array  # [J, L] share of each level in the total


def _weights(state_mask: jax.Array, agents: jax.Array, visitation: jax.Array | None) -> _Weights:
    mask = state_mask[None]
    v = jnp.ones(agents.shape[:-1], agents.dtype) if visitation is None else visitation
    w = jnp.where(mask, jnp.maximum(v.astype(agents.dtype), 0.0), 0.0)
    level_mass = w.sum(-1)  # [J, L]
    total_mass = level_mass.sum(-1)  # [J]
    safe_level = jnp.where(level_mass > 0, level_mass, 1.0)
    safe_total = jnp.where(total_mass > 0, total_mass, 1.0)
    return _Weights(
        q=jnp.where(mask[..., None], agents, 0.0),
        level=w / safe_level[..., None],
        total=w / safe_total[:, None, None],
        level_frac=level_mass / safe_total[:, None],
    )


def _varies_over_a_mesh(x: jax.Array) -> bool:
    """True inside ``shard_map`` for a value split over its mesh axes."""
    aval = jax.typeof(x)
    for name in ("manual_axis_type", "vma"):
        value = getattr(aval, name, None)
        if value is not None:
            return bool(getattr(value, "varying", value))
    return False


def _round_operand(x: jax.Array, precision: str) -> jax.Array:
    """Round float32 ``x`` to bf16 / tf32 inputs (round to nearest, float32 storage)."""
    if precision == "bf16":
        return x.astype(jnp.bfloat16).astype(jnp.float32)
    # tf32 keeps 10 of float32's 23 mantissa bits: add half an ulp of tf32, truncate
    bits = jax.lax.bitcast_convert_type(x, jnp.uint32)
    bits = (bits + jnp.uint32(1 << 12)) & jnp.uint32(0xFFFFE000)
    return jax.lax.bitcast_convert_type(bits, jnp.float32)


def _split_bf16(x: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``x = hi + lo`` to about 16 mantissa bits, both bfloat16 values (float32 storage)."""
    hi = _round_operand(x, "bf16")
    return hi, _round_operand(x - hi, "bf16")


def _product(log_kernels_flat: jax.Array, wq: jax.Array, precision: str) -> jax.Array:
    """``[P, X] x [J, X] -> [P, J]`` with float32 accumulation and ``precision`` inputs.

    The bank-major output keeps XLA's CPU GEMM on the fast layout (asking for ``[J, P]``
    directly makes it transpose the operands).
    """
    dims = (((1,), (1,)), ((), ()))
    if precision == "fp32":
        return jax.lax.dot_general(log_kernels_flat, wq, dims, precision=_HI)
    backend = jax.default_backend()
    if backend == "cpu":
        if precision == "bf16x3":  # hi hi + hi lo + lo hi, each product exact in float32
            (a_hi, a_lo), (b_hi, b_lo) = _split_bf16(log_kernels_flat), _split_bf16(wq)
            out = jax.lax.dot_general(a_hi, b_hi, dims, precision=_HI)
            out = out + jax.lax.dot_general(a_hi, b_lo, dims, precision=_HI)
            return out + jax.lax.dot_general(a_lo, b_hi, dims, precision=_HI)
        a, b = _round_operand(log_kernels_flat, precision), _round_operand(wq, precision)
        return jax.lax.dot_general(a, b, dims, precision=_HI)
    presets = jax.lax.DotAlgorithmPreset
    if precision == "bf16":
        algorithm = presets.BF16_BF16_F32
    elif precision == "tf32" and backend == "gpu":
        algorithm = presets.TF32_TF32_F32
    else:
        algorithm = presets.BF16_BF16_F32_X3
    return jax.lax.dot_general(log_kernels_flat, wq, dims, precision=algorithm)


def _pairwise_per_level(bank: ProfileBank, wt: _Weights, metric: str) -> jax.Array:
    """[J, P, L] for JS/TV: one agent at a time against the whole bank."""
    k = bank.kernels
    # sum_a k log k is per profile: computed once, not once per agent
    neg_ent_k = xlogy(k, k).sum(-1) if metric == "js" else jnp.zeros((), k.dtype)  # [P, L, S]

    def one(args: tuple[jax.Array, jax.Array]) -> jax.Array:
        qj, wj = args  # [L, S, A], [L, S]
        if metric == "js":
            m = 0.5 * (qj[None] + k)
            per_state = 0.5 * xlogy(qj, qj).sum(-1)[None] + 0.5 * neg_ent_k - xlogy(m, m).sum(-1)
            # cancellation can leave -1e-8 where q == k
            per_state = jnp.maximum(per_state, 0.0)
        else:
            per_state = 0.5 * jnp.abs(qj[None] - k).sum(-1)
        return jnp.einsum("pls,ls->pl", per_state, wj, precision=_HI)

    return jax.lax.map(one, (wt.q, wt.level))


def _kl_per_level(bank: ProfileBank, wt: _Weights) -> jax.Array:
    j, n_levels = wt.level.shape[:2]
    wq = wt.level[..., None] * wt.q  # [J, L, S, A]
    neg_ent = xlogy(wt.q, wt.q).sum(-1)  # [J, L, S]
    self_term = (wt.level * neg_ent).sum(-1)  # [J, L]
    p = bank.log_kernels.shape[0]
    cross = jnp.einsum(
        "jlx,plx->jpl",
        wq.reshape(j, n_levels, -1),
        bank.log_kernels.reshape(p, n_levels, -1),
        precision=_HI,
    )
    return self_term[:, None, :] - cross


def _kl_total(
    state_mask: jax.Array,
    log_kernels: jax.Array,
    agents: jax.Array,
    visitation: jax.Array | None,
    precision: str = "fp32",
) -> jax.Array:
    """``[P, J]`` total KL as ``self_term[j] - cross[p, j]`` with one matrix product.

    Shaped for XLA's CPU backend (profiled at 256 x 16 x 1536 x 4, see ``bench.py``): the
    GEMM is compute-bound there, so the rest is one ``[J, X]`` pass (``wq``) and ``[J, L, S]``
    work that XLA hands to the GEMM's library fusion.
    """
    j = agents.shape[0]
    p = log_kernels.shape[0]
    v = jnp.ones(agents.shape[:-1], agents.dtype) if visitation is None else visitation
    w = jnp.where(state_mask[None], jnp.maximum(v.astype(agents.dtype), 0.0), 0.0)
    mass = w.sum((1, 2))
    w = w * (1.0 / jnp.where(mass > 0, mass, 1.0))[:, None, None]  # [J, L, S]; 0 if mass == 0
    # Every select below tests w > 0 (w is 0 on masked states), so garbage there (NaN, inf)
    # never reaches a sum.
    w4 = w[..., None]
    wq = jnp.where(w4 > 0, agents * w4, 0.0).reshape(j, -1)

    # Self term per state, sum_a q log q with 0 log 0 = 0, one action slice at a time: a
    # [J, L, S] loop XLA vectorises, where a reduce over the 4-wide minor axis or over the
    # flat [J, X] product is a second pass over X (up to 0.5 ms of the pass at bench size).
    def xlogx(q: jax.Array) -> jax.Array:
        return q * jnp.log(jnp.where(q > 0, q, 1.0))

    neg_ent = xlogx(agents[..., 0])
    for a in range(1, agents.shape[-1]):
        neg_ent = neg_ent + xlogx(agents[..., a])
    self_term = jnp.where(w > 0, w * neg_ent, 0.0).sum((1, 2))
    return self_term[None, :] - _product(log_kernels.reshape(p, -1), wq, precision)


def per_level_divergences(
    bank: ProfileBank, agents: jax.Array, visitation: jax.Array | None, metric: str
) -> Divergences:
    """Pure (traceable) per-level and total divergences; ``metric`` must be static."""
    check(metric)
    wt = _weights(bank.state_mask, agents.astype(jnp.float32), visitation)
    kl = metric == "kl"
    per_level = _kl_per_level(bank, wt) if kl else _pairwise_per_level(bank, wt, metric)
    total = jnp.einsum("jpl,jl->jp", per_level, wt.level_frac, precision=_HI)
    return Divergences(per_level=per_level, total=total)


def total_divergences(
    bank: ProfileBank,
    agents: jax.Array,
    visitation: jax.Array | None,
    metric: str,
    impl: str = "auto",
    precision: str = "auto",
) -> jax.Array:
    """Pure (traceable) aggregated divergences, profile-major ``[P, J]``.

    The hot path of scoring and selection: for KL a single matrix product. ``metric``,
    ``impl`` and ``precision`` (KL's product only) must be static.
    """
    check(metric, impl, precision)
    n_agents = agents.shape[0]
    chosen = resolve_impl(metric, impl, n_agents=n_agents)
    if impl == "auto" and chosen != "reference" and _varies_over_a_mesh(bank.kernels):
        # inside shard_map (sharding.py) the reference, whose per-device program XLA
        # partitions itself; a Pallas kernel there is an explicit impl="pallas"
        chosen = "reference"
    impl = chosen
    precision = resolve_precision(metric, precision, n_agents=n_agents)
    agents = agents.astype(jnp.float32)
    if impl == "pallas":
        # imported here: Pallas only loads when a kernel is asked for
        from engine.jax_profiles import pallas_kernels

        side = tiled.agent_side(bank.state_mask, agents, visitation)
        planes = bank.planes
        if planes is not None and not _varies_over_a_mesh(planes):
            # the action planes the bank holds (on a TPU): no relayout in the pass
            return pallas_kernels.planes_total(metric, planes, side)
        return pallas_kernels.pallas_total(metric, bank.kernels, side)
    if metric == "kl":
        return _kl_total(bank.state_mask, bank.log_kernels, agents, visitation, precision)
    if impl == "tiled":
        side = tiled.agent_side(bank.state_mask, agents, visitation)
        return tiled.tiled_total(metric, bank.kernels, side)
    wt = _weights(bank.state_mask, agents, visitation)
    per_level = _pairwise_per_level(bank, wt, metric)
    return jnp.einsum("jpl,jl->pj", per_level, wt.level_frac, precision=_HI)


_divergences_jit = jax.jit(per_level_divergences, static_argnames=("metric",))
_total_jit = jax.jit(total_divergences, static_argnames=("metric", "impl", "precision"))


def validate_agents(bank: ProfileBank, agents: Any, visitation: Any) -> None:
    """Raise ``ValueError`` naming the argument when shapes do not match the bank."""
    _, n_levels, n_states, n_actions = bank.shape
    shape = tuple(getattr(agents, "shape", ()))
    if len(shape) != 4 or shape[1:] != (n_levels, n_states, n_actions):
        raise ValueError(
            f"agents must have shape [J, {n_levels}, {n_states}, {n_actions}] (bank L, S, A), "
            f"got {shape}"
        )
    if visitation is not None:
        vshape = tuple(getattr(visitation, "shape", ()))
        if vshape != shape[:3]:
            raise ValueError(f"visitation must have shape [J, L, S] = {shape[:3]}, got {vshape}")


def divergences(
    bank: ProfileBank, agents: Any, visitation: Any = None, metric: str = "kl"
) -> Divergences:
    """Per-level ``[J, P, L]`` and total ``[J, P]`` divergences of agents from every profile."""
    check(metric)
    validate_agents(bank, agents, visitation)
    v = None if visitation is None else jnp.asarray(visitation, jnp.float32)
    return _divergences_jit(bank, jnp.asarray(agents, jnp.float32), v, metric=metric)


def divergence_total(
    bank: ProfileBank,
    agents: Any,
    visitation: Any = None,
    metric: str = "kl",
    *,
    impl: str = "auto",
    precision: str = "auto",
) -> jax.Array:
    """Aggregated divergences ``[J, P]`` (the cheaper pass when per-level is not needed)."""
    check(metric, impl, precision)
    validate_agents(bank, agents, visitation)
    v = None if visitation is None else jnp.asarray(visitation, jnp.float32)
    out = _total_jit(
        bank, jnp.asarray(agents, jnp.float32), v, metric=metric, impl=impl, precision=precision
    )
    return out.T
