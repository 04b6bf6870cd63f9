"""Pallas kernels for KL, JS and TV: each tile of the bank read once for a block of agents.

Lowered through Triton on a GPU; anywhere else they run with ``interpret=True`` (how the
test suite checks their numbers on CPU). The formulas and the agent-side operands are
those of ``tiled.py``; KL's product is ``cross[p, j] = sum_x logk[p, x] wq[j, x]`` and
``total = self_term[j] - cross[p, j]`` (``divergence._kl_total``).

Grid ``(agent blocks, profile blocks, splits of X)``. Program ``(a, b, s)`` holds a
``[BJ, BP]`` accumulator in registers and loops over its share of ``X`` in tiles of
``BX``: it loads one ``[BP, BX]`` bank tile and the ``[BJ, BX]`` agent tiles, scores all
``BJ x BP`` pairs on it (``[BJ, BP, BX]`` elementwise + reduce for JS / TV, a
``[BJ, BX] x [BX, BP]`` dot for KL) and adds them up. Grid steps run in parallel on a GPU,
so nothing is accumulated across them: program ``(a, b, s)`` writes its own partial
``out[s, a, b]`` and the few partials are summed outside. The agent-block axis is the
fastest-launched one (CUDA x), so the programs that share a bank tile run together and
all but the first find it in L2: one read of the bank from HBM per pass when the whole
agent set is one block (up to 16 agents for JS / TV, 64 for KL) or close to it beyond.

Rows past ``P`` and columns past ``X`` are masked loads (``other=0``), so neither needs
to divide by a block; agents are padded to a multiple of ``BJ`` with zero weight.
Triton wants power-of-two tensor sizes: all block sizes are powers of two.

JS's log can be the GPU's ``lg2.approx.f32`` (``fast_log``, relative error ~2^-22, one
special-function instruction instead of libdevice's ~20): the kernel is compute-bound
on that log at 256 candidates.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu

from engine.jax_profiles.tiled import LOG2, AgentSide

__all__ = [
    "PRECISIONS",
    "KernelConfig",
    "default_config",
    "grid_programs",
    "pallas_cross",
    "pallas_total",
]

PRECISIONS = ("fp32", "tf32", "bf16")  # as divergence.PRECISIONS


@dataclasses.dataclass(frozen=True)
class KernelConfig:
    """Tile sizes (powers of two) and launch settings of one kernel."""

    block_agents: int  # BJ
    block_profiles: int  # BP
    block_x: int  # BX
    target_programs: int = 1024  # split X until the grid has about this many programs
    num_warps: int = 4
    num_stages: int = 2
    fast_log: bool = False  # JS: lg2.approx.f32 on GPU (exact log when interpreted)


def _pow2_at_least(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def default_config(metric: str, n_agents: int, *, on_gpu: bool) -> KernelConfig:
    """Tiles sized for a GPU's registers; the agent block covers up to 16 (JS / TV) or
    64 (KL) agents, so the bank is read once from HBM for up to that many."""
    if metric == "kl":
        # tl.dot wants every side >= 16
        bj = min(64, max(16, _pow2_at_least(n_agents)))
        return KernelConfig(block_agents=bj, block_profiles=64, block_x=64)
    bj = min(16, _pow2_at_least(n_agents))
    return KernelConfig(block_agents=bj, block_profiles=16, block_x=32, fast_log=on_gpu)


def _check_config(cfg: KernelConfig) -> None:
    for name in ("block_agents", "block_profiles", "block_x"):
        v = getattr(cfg, name)
        if v < 1 or v & (v - 1):
            raise ValueError(f"KernelConfig.{name} must be a power of two, got {v}")


def _layout(cfg: KernelConfig, p: int, j: int, x: int) -> tuple[int, int, int, int, int]:
    """``(agent blocks, profile blocks, splits, tiles per split, padded agents)``."""
    n_j = -(-j // cfg.block_agents)
    n_p = -(-p // cfg.block_profiles)
    n_tiles = -(-x // cfg.block_x)
    want = max(1, -(-cfg.target_programs // (n_j * n_p)))
    per_split = -(-n_tiles // min(want, n_tiles))
    n_split = -(-n_tiles // per_split)
    return n_j, n_p, n_split, per_split, n_j * cfg.block_agents


def _fast_log(t: jax.Array) -> jax.Array:
    [lg2] = plgpu.elementwise_inline_asm(
        "lg2.approx.f32 $0, $1;",
        args=[t],
        constraints="=f,f",
        pack=1,
        result_shape_dtypes=[jax.ShapeDtypeStruct(t.shape, t.dtype)],
    )
    return lg2 * LOG2


def _kernel(
    *refs: Any,
    metric: str,
    cfg: KernelConfig,
    n_profiles: int,
    n_x: int,
    per_split: int,
    precision: str,
    fast_log: bool,
) -> None:
    """Refs: KL ``(logk, wq, out)``, TV ``(k, q, w, out)``, JS ``(k, q, w, hq, out)``."""
    k_ref, *agent_refs, o_ref = refs
    bj, bp, bx = cfg.block_agents, cfg.block_profiles, cfg.block_x
    ja, pb, sp = pl.program_id(0), pl.program_id(1), pl.program_id(2)
    p0 = pb * bp
    agents = pl.ds(ja * bj, bj)
    row_ok = (p0 + jax.lax.broadcasted_iota(jnp.int32, (bp, 1), 0)) < n_profiles
    log = _fast_log if fast_log else jnp.log

    def tile(t: jax.Array | int) -> jax.Array:
        x0 = pl.multiple_of((sp * per_split + t) * bx, bx)
        col_ok = (x0 + jax.lax.broadcasted_iota(jnp.int32, (1, bx), 1)) < n_x
        cols = pl.ds(x0, bx)
        k = plgpu.load(k_ref.at[pl.ds(p0, bp), cols], mask=row_ok & col_ok, other=0.0)
        q, *rest = (plgpu.load(r.at[agents, cols], mask=col_ok, other=0.0) for r in agent_refs)
        if metric == "kl":
            return _dot(q, k, precision)  # q is wq here
        w = rest[0]
        if metric == "tv":
            terms = 0.5 * jnp.abs(q[:, None, :] - k[None])
        else:
            hq = rest[1]
            hk = 0.5 * k * log(jnp.where(k > 0, k, 1.0))
            t_ = q[:, None, :] + k[None]
            mlogm = 0.5 * t_ * (log(jnp.where(t_ > 0, t_, 1.0)) - LOG2)
            terms = jnp.maximum(hq[:, None, :] + hk[None] - mlogm, 0.0)
        return jnp.sum(w[:, None, :] * terms, axis=2)

    # the first tile starts the sum (a zeros carry would not be typed as varying across
    # the mesh like the bank under shard_map)
    acc = jax.lax.fori_loop(1, per_split, lambda t, acc: acc + tile(t), tile(0))
    o_ref[...] = acc[None]


def _dot(wq: jax.Array, k: jax.Array, precision: str) -> jax.Array:
    """``[BJ, BX] x [BP, BX]^T -> [BJ, BP]`` with float32 accumulation."""
    dims = (((1,), (1,)), ((), ()))
    if precision == "bf16":
        return jax.lax.dot_general(
            wq.astype(jnp.bfloat16),
            k.astype(jnp.bfloat16),
            dims,
            preferred_element_type=jnp.float32,
        )
    prec = jax.lax.Precision.HIGHEST if precision == "fp32" else jax.lax.Precision.DEFAULT
    return jax.lax.dot_general(wq, k, dims, precision=(prec, prec))


def _call(
    metric: str,
    bank_flat: jax.Array,
    agent_ops: tuple[jax.Array, ...],
    cfg: KernelConfig,
    precision: str,
    interpret: bool,
) -> jax.Array:
    """``[P, J]`` of summed per-split partials (KL: the cross term)."""
    _check_config(cfg)
    p, x = bank_flat.shape
    j = agent_ops[0].shape[0]
    n_j, n_p, n_split, per_split, j_pad = _layout(cfg, p, j, x)
    if j_pad != j:  # zero-weight agents: they add nothing and are sliced off
        agent_ops = tuple(jnp.pad(a, ((0, j_pad - j), (0, 0))) for a in agent_ops)
    kernel = _kernel_partial(
        metric, cfg, p, x, per_split, precision, fast_log=cfg.fast_log and not interpret
    )
    bj, bp = cfg.block_agents, cfg.block_profiles
    partial = pl.pallas_call(
        kernel,
        out_shape=_out_struct((n_split, j_pad, n_p * bp), bank_flat),
        grid=(n_j, n_p, n_split),
        out_specs=pl.BlockSpec((1, bj, bp), lambda a, b, s: (s, a, b)),
        compiler_params=plgpu.CompilerParams(num_warps=cfg.num_warps, num_stages=cfg.num_stages),
        interpret=interpret,
        name=f"profiles_{metric}",
    )(bank_flat, *agent_ops)
    return partial.sum(0)[:j, :p].T


def _out_struct(shape: tuple[int, ...], like: jax.Array) -> jax.ShapeDtypeStruct:
    """float32 ``shape`` varying over the mesh axes ``like`` varies over: inside
    ``shard_map`` (``sharding.py``) a kernel's output must say so. JAX has named that
    type ``manual_axis_type`` (and ``vma`` before it)."""
    aval = jax.typeof(like)
    for name in ("manual_axis_type", "vma"):
        value = getattr(aval, name, None)
        if value is None:
            continue
        try:
            return jax.ShapeDtypeStruct(shape, jnp.float32, **{name: value})
        except TypeError:
            continue
    return jax.ShapeDtypeStruct(shape, jnp.float32)


def _kernel_partial(
    metric: str,
    cfg: KernelConfig,
    n_profiles: int,
    n_x: int,
    per_split: int,
    precision: str,
    *,
    fast_log: bool,
) -> Any:
    def kernel(*refs: Any) -> None:
        _kernel(
            *refs,
            metric=metric,
            cfg=cfg,
            n_profiles=n_profiles,
            n_x=n_x,
            per_split=per_split,
            precision=precision,
            fast_log=fast_log,
        )

    return kernel


def _interpret() -> bool:
    return jax.default_backend() != "gpu"


def pallas_total(
    metric: str,
    kernels: jax.Array,
    side: AgentSide,
    cfg: KernelConfig | None = None,
    interpret: bool | None = None,
) -> jax.Array:
    """Profile-major ``[P, J]`` JS or TV from the bank's kernels ``[P, L, S, A]``.

    ``interpret``: ``None`` interprets off a GPU; ``False`` lowers through Triton (also
    for a GPU target from a CPU-only process, as the tests do).
    """
    if metric not in ("js", "tv"):
        raise ValueError(f"pallas_total scores js or tv, got {metric!r}")
    interpret = _interpret() if interpret is None else interpret
    if cfg is None:
        cfg = default_config(metric, side.q.shape[0], on_gpu=not interpret)
    flat = kernels.reshape(kernels.shape[0], -1)
    ops = (side.q, side.w) if metric == "tv" else (side.q, side.w, side.hq)
    return _call(metric, flat, ops, cfg, "fp32", interpret)


def pallas_cross(
    log_kernels: jax.Array,
    wq: jax.Array,
    precision: str = "fp32",
    cfg: KernelConfig | None = None,
    interpret: bool | None = None,
) -> jax.Array:
    """KL's product ``[P, J] = logk[P, X] . wq[J, X]^T`` with float32 accumulation."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    interpret = _interpret() if interpret is None else interpret
    if cfg is None:
        cfg = default_config("kl", wq.shape[0], on_gpu=not interpret)
    flat = log_kernels.reshape(log_kernels.shape[0], -1)
    return _call("kl", flat, (wq,), cfg, precision, interpret)


def grid_programs(metric: str, p: int, j: int, x: int, cfg: KernelConfig) -> int:
    """Programs one call launches (for the bench's printout)."""
    n_j, n_p, n_split, _, _ = _layout(cfg, p, j, x)
    return n_j * n_p * n_split
