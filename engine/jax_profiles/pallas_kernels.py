"""JS and TV as Pallas TPU (Mosaic) kernels: each tile of the bank read once for a block of
agents, the pair terms accumulated in VMEM.

Both metrics are split into an agent-only term ``a[j]``, a term linear in the bank (a
matrix product on the MXU) and the one term that is per (agent, profile, element), on the
vector unit. With the agent side of ``tiled.py`` (``q`` the agent kernels and ``w`` the
visitation weight of each element's state, both 0 where ``w == 0``; ``x = (l, s, a)``):

    TV: total[p, j] = a[j] + 1/2 sum_x w k[p, x]     - sum_x w min(q, k),
        a[j] = 1/2 sum_x w q                  (|q - k| = q + k - 2 min(q, k))
    JS: total[p, j] = a[j] + sum_x w' k ln(2k)      - sum_x w' t ln t,  t = q + k,
        a[j] = 1/2 sum_x w q ln(2q),  w' = w / 2

The JS split is ``1/2 q ln q + 1/2 k ln k - m ln m = 1/2 q ln 2q + 1/2 k ln 2k - 1/2 t ln t``
with ``m = t / 2``: only ``t ln t`` is per pair (one log), and ``k ln 2k`` costs one log
per bank element per agent block. Each element's term is >= 0 (convexity), so the
reference clamps per state and the tiled loop per element; here the sum is clamped at 0
(the split cancels to float32 rounding where ``q == k``). Where ``w == 0`` nothing reaches
a sum: ``q`` is 0 there (NaN and inf on masked states never get in), and JS's ``q`` is
raised to ``TINY`` so that ``t ln t`` is finite where ``q = k = 0``.

The product's inputs are split into bfloat16 ``hi + lo`` in VMEM and summed as
``hi hi + hi lo + lo hi`` (float32 accumulation): each term within 3 * 2^-18 of its value,
a few 1e-7 of the largest divergence where measured, at half the MXU passes of fp32's
contract precision (TV 82.6 against 89.0 ms at 4096 x 256 with the same tiles, JS 144.6
against 150.6).

The bank is read as ``A`` action planes ``[A, P, L S]`` (``bank_planes``; a bank built on
a TPU holds them, ``ProfileBank.planes``, so the pass lays nothing out), the agents'
``q`` likewise and ``w`` as one ``[J, L S]`` row, since a state's actions share its
weight: the A pair terms of a state are added first, then weighted and folded once (TV
2.25 vector operations a pair, not 3). On the TPU v5e at 4096 x 256 this took TV from
59.5 to 44.2 ms and JS from 116.2 to 97.3 (kernel alone, same run), and holding the
planes saves the 10.6 ms relayout a pass (the 4-D kernels are kept action-minor there:
``(0, 1, 3, 2)``, tiles of 4 x 128; the flat ``[P, X]`` view cost 15.4 ms).

Per output tile (``BP`` profiles x ``BJ`` agents) the grid walks the planes' columns in
tiles of ``BX`` (the last grid axis, sequential on a TensorCore) with two accumulators in
VMEM scratch: ``[BJ, BP, 128]`` lane partials of the vector term and ``[BP, BJ]`` for the
product. Each grid step first copies every agent's ``q`` rows (``[BJ, A, 8, BX]``) and
``w`` row (``[BJ, 8, BX]``) onto 8 sublanes; a loop over agents (``AG`` a step, read by a
dynamic leading index) then runs the tile's row slabs of 8 unrolled: ``w * sum_a
pair(q_a, k_a)`` on ``[8, BX]`` slabs, folded to 128 lanes with vector adds, added to
the agent's partials. The product's bank factor is summed over the planes first (one
product a step). The last X step reduces the lanes once and writes ``[BP, BJ]``. The bank
is read ``ceil(J / BJ)`` times, the agents ``ceil(P / BP)`` times. (Measured against it on
the TPU v5e: agents unrolled with a loop over row slabs, 1.1-1.6x slower; fully unrolled
tiles, 1.6-1.8x; the product in fp32 contract precision or as an XLA dot beside the
kernel; TV as ``w |q - k|`` alone, 4 vector operations a pair to ``min``'s 3; JS's pair as
``t log2 t``, 1.2x: the chip's log is natural.) ``group_actions=False`` reads the flat
bank (one plane), the kernel before the planes.

Edges: ``P`` need not divide by ``BP`` (rows are independent: the rows of a partial last
block are computed and dropped); the agents are padded to a multiple of ``BJ`` with zero
weight and along ``X`` to the grid's width with zeros; the bank is never padded: a partial
last X tile is zeroed past ``X`` in VMEM before use.

Off a TPU the kernels run with ``interpret=True`` (how the tests check them on CPU).
``roofline`` is the same vector loop on a tile held in VMEM: the bench's elementwise
bound for the pass.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from engine.jax_profiles.tiled import LOG2, AgentSide

__all__ = [
    "METRICS",
    "TINY",
    "Layout",
    "Roofline",
    "TileConfig",
    "agent_operands",
    "bank_planes",
    "default_config",
    "groups",
    "layout",
    "pallas_total",
    "planes_total",
    "roofline",
]

METRICS = ("js", "tv")
TINY = 1e-30  # JS's floor on q: t ln t finite where q = k = 0 (a normal float32)
_LANES = 128
_SUBLANES = 8
_NT = (((1,), (1,)), ((), ()))  # [M, K] x [N, K] -> [M, N]


@dataclasses.dataclass(frozen=True)
class TileConfig:
    """Tile sizes of one kernel (clipped to the problem by ``layout``)."""

    block_agents: int = 64  # BJ, a multiple of 8
    block_profiles: int = 256  # BP, a multiple of 8
    block_x: int = 512  # BX, a multiple of 128
    agents_per_step: int = 2  # AG: agents sharing each load of a bank slab; divides BJ
    vmem_limit_mb: int | None = None  # Mosaic's scoped VMEM limit; None: its default
    group_actions: bool = True  # the A actions of a state as A planes sharing one weight
    log2: bool = False  # JS's pair as t log2 t (ln 2 folded into the weight)


# Measured on one TPU v5e (JAX 0.10.2) at 4096 profiles x 256 agents, the kernel alone on
# the bank's action planes, `python -m benchmarks.jax_profiles_layout --candidates 256`:
# TV 44.2 ms (roofline 41.1) against 44.4-47.0 with four other tiles and 59.5 for the flat
# bank's best (roofline 55.2); JS 97.3 (roofline 93.4) against 98.4-101.6 with four other
# tiles, 116.2 flat, and 114-118 with t log2 t (the chip's log is natural: log2 is a log
# and a product). Smaller problems clip the blocks.
_DEFAULTS = {
    "js": TileConfig(128, 512, 256, agents_per_step=1, vmem_limit_mb=96),
    "tv": TileConfig(128, 512, 256, agents_per_step=2, vmem_limit_mb=96),
}


def default_config(metric: str) -> TileConfig:
    if metric not in METRICS:
        raise ValueError(f"the Pallas kernels score {' or '.join(METRICS)}, got {metric!r}")
    return _DEFAULTS[metric]


def _check_config(cfg: TileConfig) -> None:
    problems = []
    if cfg.block_agents < 8 or cfg.block_agents % 8:
        problems.append(f"block_agents={cfg.block_agents} (a multiple of 8)")
    if cfg.block_profiles < 8 or cfg.block_profiles % 8:
        problems.append(f"block_profiles={cfg.block_profiles} (a multiple of 8)")
    if cfg.block_x < _LANES or cfg.block_x % _LANES:
        problems.append(f"block_x={cfg.block_x} (a multiple of 128)")
    if cfg.agents_per_step not in (1, 2, 4, 8):
        problems.append(f"agents_per_step={cfg.agents_per_step} (1, 2, 4 or 8)")
    if problems:
        raise ValueError("TileConfig: " + "; ".join(problems))


@dataclasses.dataclass(frozen=True)
class Layout:
    """One call's blocks: ``cfg`` clipped to ``P`` profiles, ``J`` agents, ``X`` elements."""

    bj: int
    bp: int
    bx: int
    lanes: int  # width of the lane partials: 128, or BX when BX = X is narrower
    n_j: int
    n_p: int
    n_x: int
    x_tail: int  # valid columns of the last X tile (BX when it is full)
    groups: int = 1  # G: planes of the bank and the agents (the actions), one weight row

    @property
    def steps(self) -> int:
        return self.n_j * self.n_p * self.n_x

    @property
    def j_pad(self) -> int:
        return self.n_j * self.bj

    @property
    def x_pad(self) -> int:
        return self.n_x * self.bx


def _round_up(n: int, m: int) -> int:
    return -(-n // m) * m


def _block_x(x: int, want: int) -> int:
    """``X`` itself when it fits; else the widest multiple of 128 up to ``want`` that
    divides ``X`` (no partial tile), unless that is under half of ``want``."""
    if x <= want:
        return x
    if x % _LANES == 0:
        best = max(d for d in range(_LANES, want + 1, _LANES) if x % d == 0)
        if 2 * best >= want:
            return best
    return want


def layout(cfg: TileConfig, p: int, j: int, x: int, groups: int = 1) -> Layout:
    """Blocks for ``P`` profiles, ``J`` agents and ``X`` columns a plane, ``groups`` planes."""
    _check_config(cfg)
    bj = min(cfg.block_agents, _round_up(j, _SUBLANES))
    bp = min(cfg.block_profiles, _round_up(p, _SUBLANES))
    bx = _block_x(x, cfg.block_x)
    n_x = -(-x // bx)
    return Layout(
        bj=bj,
        bp=bp,
        bx=bx,
        lanes=_LANES if bx % _LANES == 0 else bx,
        n_j=-(-j // bj),
        n_p=-(-p // bp),
        n_x=n_x,
        x_tail=x - (n_x - 1) * bx,
        groups=groups,
    )


def agent_operands(
    metric: str, side: AgentSide, log2: bool = False
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """``(q, w, a)``: the kernel's agent operands ``[J, X]`` and the agent-only term ``[J]``
    (JS's ``w`` carries the pair term's factor: 1/2, and ln 2 when it is ``t log2 t``)."""
    if metric == "tv":
        return side.q, side.w, 0.5 * (side.w * side.q).sum(1)
    # 1/2 q ln 2q = hq + 1/2 ln2 q
    a = (side.w * (side.hq + (0.5 * LOG2) * side.q)).sum(1)
    return jnp.maximum(side.q, TINY), (0.5 * LOG2 if log2 else 0.5) * side.w, a


def _pair(metric: str, q: jax.Array, k: jax.Array, log2: bool = False) -> jax.Array:
    """The per-pair term before its weight: ``min(q, k)`` (TV), ``t ln t`` or ``t log2 t``
    (JS)."""
    if metric == "tv":
        return jnp.minimum(q, k)
    t = q + k
    return t * (jnp.log2(t) if log2 else jnp.log(t))


def _linear(metric: str, k: jax.Array, log2: bool = False) -> jax.Array:
    """The bank's factor of the product term: ``k`` (TV), ``k ln 2k`` (JS, 0 at k = 0;
    ``k log2 2k`` when the weight carries ln 2)."""
    if metric == "tv":
        return k
    k2 = jnp.maximum(2.0 * k, TINY)
    return k * (jnp.log2(k2) if log2 else jnp.log(k2))


def _linear_scale(metric: str) -> float:
    """The product's weight in the total (TV's is ``1/2 sum_x w k``)."""
    return 0.5 if metric == "tv" else 1.0


def _split(x: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``x = hi + lo`` to about 16 mantissa bits, both bfloat16 (Mosaic keeps the rounding
    it is asked for; XLA may fold convert pairs, so this split stays in the kernel)."""
    hi = x.astype(jnp.bfloat16)
    return hi, (x - hi.astype(jnp.float32)).astype(jnp.bfloat16)


def _linear_product(g: jax.Array, w: jax.Array) -> jax.Array:
    """``[BP, BJ] = g [BP, BX] . w [BJ, BX]^T``: three bfloat16 products, float32 sums."""
    (g_hi, g_lo), (w_hi, w_lo) = _split(g), _split(w)
    out = jax.lax.dot_general(g_hi, w_hi, _NT, preferred_element_type=jnp.float32)
    out += jax.lax.dot_general(g_hi, w_lo, _NT, preferred_element_type=jnp.float32)
    return out + jax.lax.dot_general(g_lo, w_hi, _NT, preferred_element_type=jnp.float32)


def _fold(e: jax.Array, lanes: int) -> jax.Array:
    """``[R, BX] -> [R, lanes]``: the lane chunks of ``e`` added up."""
    part = e[:, :lanes]
    for c in range(1, e.shape[1] // lanes):
        part = part + e[:, c * lanes : (c + 1) * lanes]
    return part


def _scratch(lay: Layout) -> list[Any]:
    """The pair loop's VMEM: lane partials ``[BJ, BP, lanes]``, and each agent's ``q``
    (``[BJ, G, 8, BX]``) and ``w`` (``[BJ, 8, BX]``) rows broadcast to 8 sublanes."""
    return [
        pltpu.VMEM((lay.bj, lay.bp, lay.lanes), jnp.float32),
        pltpu.VMEM((lay.bj, lay.groups, _SUBLANES, lay.bx), jnp.float32),
        pltpu.VMEM((lay.bj, _SUBLANES, lay.bx), jnp.float32),
    ]


def _accumulate_pairs(
    metric: str,
    k_ref: Any,
    q_ref: Any,
    w_ref: Any,
    acc_ref: Any,
    qb_ref: Any,
    wb_ref: Any,
    lay: Layout,
    cfg: TileConfig,
) -> None:
    """``acc[j, r, :] += fold(w[j] * sum_g pair(q[g, j], k[g, r]))`` for every agent and
    bank row of the tile: a loop over agents (``AG`` a step, their rows read from the
    broadcast copies by a dynamic leading index), the tile's row slabs of 8 unrolled. The
    G planes share the weight: one product and one fold for G pair terms."""
    bx, lanes, g_n = lay.bx, lay.lanes, lay.groups
    for j in range(lay.bj):  # each agent's rows on 8 sublanes, once a grid step
        for g in range(g_n):
            qb_ref[j, g] = jnp.broadcast_to(q_ref[g, j : j + 1, :], (_SUBLANES, bx))
        wb_ref[j] = jnp.broadcast_to(w_ref[j : j + 1, :], (_SUBLANES, bx))
    ag = min(cfg.agents_per_step, lay.bj)

    def body(i_step: jax.Array, carry: int) -> int:
        j0 = i_step * ag
        qs = [[qb_ref[j0 + i, g] for g in range(g_n)] for i in range(ag)]
        ws = [wb_ref[j0 + i] for i in range(ag)]
        for r0 in range(0, lay.bp, _SUBLANES):
            ks = [k_ref[g, r0 : r0 + _SUBLANES, :] for g in range(g_n)]
            for i in range(ag):
                e = _pair(metric, qs[i][0], ks[0], cfg.log2)
                for g in range(1, g_n):
                    e = e + _pair(metric, qs[i][g], ks[g], cfg.log2)
                acc_ref[j0 + i, r0 : r0 + _SUBLANES, :] += _fold(e * ws[i], lanes)
        return carry

    jax.lax.fori_loop(0, lay.bj // ag, body, 0)


def _lane_sums(acc_ref: Any, lay: Layout) -> jax.Array:
    """``[BP, BJ]``: each agent's lane partials ``acc[j] [BP, lanes]`` summed, as column j."""
    col = jax.lax.broadcasted_iota(jnp.int32, (lay.bp, lay.bj), 1)

    def one(j: jax.Array, out: jax.Array) -> jax.Array:
        return jnp.where(col == j, jnp.sum(acc_ref[j], axis=1, keepdims=True), out)

    return jax.lax.fori_loop(0, lay.bj, one, jnp.zeros((lay.bp, lay.bj), jnp.float32))


def _kernel(
    k_ref: Any,
    q_ref: Any,
    w_ref: Any,
    o_ref: Any,
    mxu_ref: Any,
    acc_ref: Any,
    qb_ref: Any,
    wb_ref: Any,
    *,
    metric: str,
    lay: Layout,
    cfg: TileConfig,
) -> None:
    s = pl.program_id(2)

    @pl.when(s == 0)
    def _zero() -> None:
        acc_ref[...] = jnp.zeros(acc_ref.shape, jnp.float32)
        mxu_ref[...] = jnp.zeros(mxu_ref.shape, jnp.float32)

    if lay.x_tail != lay.bx:  # the last X tile runs past X: zero its tail in VMEM

        @pl.when(s == lay.n_x - 1)
        def _mask() -> None:
            col = jax.lax.broadcasted_iota(jnp.int32, (lay.groups, lay.bp, lay.bx), 2)
            k_ref[...] = jnp.where(col < lay.x_tail, k_ref[...], 0.0)

    lin = _linear(metric, k_ref[0], cfg.log2)
    for g in range(1, lay.groups):  # the planes share the weight row: one product
        lin = lin + _linear(metric, k_ref[g], cfg.log2)
    mxu_ref[...] += _linear_product(lin, w_ref[...])
    _accumulate_pairs(metric, k_ref, q_ref, w_ref, acc_ref, qb_ref, wb_ref, lay, cfg)

    @pl.when(s == lay.n_x - 1)
    def _finish() -> None:
        o_ref[...] = _linear_scale(metric) * mxu_ref[...] - _lane_sums(acc_ref, lay)


def _compiler_params(cfg: TileConfig, semantics: tuple[Any, ...]) -> Any:
    limit = None if cfg.vmem_limit_mb is None else cfg.vmem_limit_mb << 20
    return pltpu.CompilerParams(dimension_semantics=semantics, vmem_limit_bytes=limit)


def _interpret() -> bool:
    return jax.default_backend() != "tpu"


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


def groups(kernels_shape: tuple[int, ...], cfg: TileConfig) -> int:
    """Planes the kernel reads a bank of ``kernels_shape`` as: its actions (the last axis)
    when ``cfg.group_actions``, else 1."""
    return int(kernels_shape[-1]) if cfg.group_actions and len(kernels_shape) > 2 else 1


def bank_planes(kernels: jax.Array, g: int) -> jax.Array:
    """``[G, P, X / G]``: ``kernels [P, ..., A]`` as ``G`` planes (action ``a``'s plane holds
    ``k[p, l, s, a]`` at column ``l * S + s``; ``G = 1``: the flat bank)."""
    p = kernels.shape[0]
    if g == 1:
        return kernels.reshape(1, p, -1)
    return kernels.reshape(p, -1, g).transpose(2, 0, 1)  # bank.action_planes, any rank


def pallas_total(
    metric: str,
    kernels: jax.Array,
    side: AgentSide,
    cfg: TileConfig | None = None,
    interpret: bool | None = None,
) -> jax.Array:
    """Profile-major ``[P, J]`` JS or TV of the agents (``side``) against ``kernels [P, ...]``.

    ``interpret``: ``None`` compiles with Mosaic on a TPU and interprets elsewhere.
    """
    cfg = default_config(metric) if cfg is None else cfg
    planes = bank_planes(kernels, groups(kernels.shape, cfg))
    return planes_total(metric, planes, side, cfg, interpret)


def planes_total(
    metric: str,
    planes: jax.Array,
    side: AgentSide,
    cfg: TileConfig | None = None,
    interpret: bool | None = None,
) -> jax.Array:
    """``pallas_total`` on the bank already laid out as ``bank_planes`` ``[G, P, X / G]``."""
    cfg = default_config(metric) if cfg is None else cfg
    interpret = _interpret() if interpret is None else interpret
    g, p, x = planes.shape
    j = side.q.shape[0]
    lay = layout(cfg, p, j, x, g)
    q, w, a = agent_operands(metric, side, cfg.log2)
    # the agents as planes too; w is the same for a state's actions: one row
    q = q.reshape(j, x, g).transpose(2, 0, 1)
    w = w.reshape(j, x, g)[:, :, 0]
    pad = ((0, lay.j_pad - j), (0, lay.x_pad - x))
    if pad != ((0, 0), (0, 0)):  # zero weight: padded agents and columns add nothing
        q = jnp.pad(q, ((0, 0), *pad), constant_values=TINY if metric == "js" else 0.0)
        w = jnp.pad(w, pad)
    out = pl.pallas_call(
        functools.partial(_kernel, metric=metric, lay=lay, cfg=cfg),
        out_shape=_out_struct((lay.n_j, p, lay.bj), planes),
        grid=(lay.n_j, lay.n_p, lay.n_x),
        in_specs=[
            pl.BlockSpec((g, lay.bp, lay.bx), lambda a, b, s: (0, b, s)),
            pl.BlockSpec((g, lay.bj, lay.bx), lambda a, b, s: (0, a, s)),
            pl.BlockSpec((lay.bj, lay.bx), lambda a, b, s: (a, s)),
        ],
        out_specs=pl.BlockSpec((None, lay.bp, lay.bj), lambda a, b, s: (a, b, 0)),
        scratch_shapes=[pltpu.VMEM((lay.bp, lay.bj), jnp.float32), *_scratch(lay)],
        compiler_params=_compiler_params(cfg, ("parallel", "parallel", "arbitrary")),
        interpret=interpret,
        name=f"profiles_{metric}",
    )(planes, q, w)
    total = out.transpose(1, 0, 2).reshape(p, lay.j_pad)[:, :j] + a[None, :]
    return jnp.maximum(total, 0.0)


# --------------------------------------------------------------------------- the bound


def _roofline_kernel(
    k_ref: Any,
    q_ref: Any,
    w_ref: Any,
    o_ref: Any,
    acc_ref: Any,
    qb_ref: Any,
    wb_ref: Any,
    *,
    metric: str,
    lay: Layout,
    cfg: TileConfig,
    steps: int,
) -> None:
    s = pl.program_id(0)

    @pl.when(s == 0)
    def _zero() -> None:
        acc_ref[...] = jnp.zeros(acc_ref.shape, jnp.float32)

    _accumulate_pairs(metric, k_ref, q_ref, w_ref, acc_ref, qb_ref, wb_ref, lay, cfg)

    @pl.when(s == steps - 1)
    def _finish() -> None:
        o_ref[...] = _lane_sums(acc_ref, lay)


class Roofline(NamedTuple):
    run: Callable[[], jax.Array]  # blocks until done; ``[BP, BJ]`` lane sums
    operands: tuple[jax.Array, jax.Array, jax.Array]  # the held tiles k, q, w
    steps: int  # grid steps, as many as the pass's


def roofline(
    metric: str, p: int, j: int, x: int, cfg: TileConfig | None = None, g: int = 1
) -> Roofline:
    """The pass's vector loop alone: as many grid steps as ``pallas_total`` takes at
    ``[P, J, X]``, each scoring the same ``[BJ, BX]`` agents against the same ``[BP, BX]``
    bank tile, fetched into VMEM once (the block index never changes). No HBM traffic,
    no product, one epilogue: the pair terms at the rate the chip runs this loop."""
    cfg = default_config(metric) if cfg is None else cfg
    lay = layout(cfg, p, j, x // g, g)
    full = dataclasses.replace(lay, n_j=1, n_p=1, n_x=1, x_tail=lay.bx)
    keys = jax.random.split(jax.random.PRNGKey(0), 3)
    k = jax.random.uniform(keys[0], (g, lay.bp, lay.bx), jnp.float32)
    q = jax.random.uniform(keys[1], (g, lay.bj, lay.bx), jnp.float32)
    w = jax.random.uniform(keys[2], (lay.bj, lay.bx), jnp.float32) / (lay.bx * lay.steps * g)

    def fixed(s: jax.Array) -> tuple[int, ...]:
        return (0, 0)

    def fixed3(s: jax.Array) -> tuple[int, ...]:
        return (0, 0, 0)

    call = pl.pallas_call(
        functools.partial(_roofline_kernel, metric=metric, lay=full, cfg=cfg, steps=lay.steps),
        out_shape=jax.ShapeDtypeStruct((lay.bp, lay.bj), jnp.float32),
        grid=(lay.steps,),
        in_specs=[
            pl.BlockSpec((g, lay.bp, lay.bx), fixed3),
            pl.BlockSpec((g, lay.bj, lay.bx), fixed3),
            pl.BlockSpec((lay.bj, lay.bx), fixed),
        ],
        out_specs=pl.BlockSpec((lay.bp, lay.bj), fixed),
        scratch_shapes=_scratch(lay),
        compiler_params=_compiler_params(cfg, ("arbitrary",)),
        interpret=_interpret(),
        name=f"roofline_{metric}",
    )
    compiled = jax.jit(call).lower(k, q, w).compile()
    return Roofline(lambda: jax.block_until_ready(compiled(k, q, w)), (k, q, w), lay.steps)
