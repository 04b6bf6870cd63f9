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

Per output tile (a block of ``BP`` profiles x ``BJ`` agents) the grid walks ``X`` in tiles
of ``BX`` (the last grid axis, sequential on a TensorCore), with two accumulators in VMEM
scratch: ``[BJ, BP, 128]`` lane partials of the vector term (each agent's
``w * pair(q, k)`` over a ``[R, BX]`` slab of the bank folded to 128 lanes with vector
adds; ``AG`` agents share each load of the slab) and ``[BP, BJ]`` for the product
``g(k) . w^T`` (fp32 contract precision). The last X step reduces the lanes once and
writes ``[BP, BJ]``. The bank is read ``ceil(J / BJ)`` times, the agents ``ceil(P / BP)``.

Edges: ``P`` need not divide by ``BP`` (rows are independent: the rows of a partial last
block are computed and dropped); the agents are padded to a multiple of ``BJ`` with zero
weight and along ``X`` to the grid's width with zeros; the bank is never copied or
padded: a partial last X tile is zeroed past ``X`` in VMEM before use.

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
    "default_config",
    "layout",
    "pallas_total",
    "roofline",
]

METRICS = ("js", "tv")
TINY = 1e-30  # JS's floor on q: t ln t finite where q = k = 0 (a normal float32)
_LANES = 128
_SUBLANES = 8
_HI = jax.lax.Precision.HIGHEST
_NT = (((1,), (1,)), ((), ()))  # [M, K] x [N, K] -> [M, N]


@dataclasses.dataclass(frozen=True)
class TileConfig:
    """Tile sizes of one kernel (clipped to the problem by ``layout``)."""

    block_agents: int = 64  # BJ, a multiple of 8
    block_profiles: int = 256  # BP, a multiple of 8
    block_x: int = 512  # BX, a multiple of 128
    rows: int = 8  # R: bank rows per inner step, divides BP, a multiple of 8
    agents_per_step: int = 2  # AG: agents sharing one load of the bank slab, divides 8
    unroll: int = 1  # unroll of the inner loop over row slabs
    vmem_limit_mb: int | None = None  # Mosaic's scoped VMEM limit; None: its default
    # "rows": agents unrolled, a loop over row slabs; "agents": a loop over agents (their
    # rows broadcast to 8 sublanes in VMEM once a step), row slabs unrolled
    loop: str = "rows"
    # the bank-linear term: "mxu" (in the kernel, fp32 contract precision), "mxu3" (in the
    # kernel, bf16 hi/lo splits, three products), "xla" (an XLA dot beside the kernel),
    # "none" (left out: a wrong total, for timing the rest)
    linear: str = "mxu"
    tv_pair: str = "min"  # "min": w min(q, k) + the linear term; "abs": w |q - k| alone


# Measured on TPU v5e (JAX 0.10.2) by `python -m benchmarks.jax_profiles_sweep` in the
# device script's run; see divergence.AUTO for the figures. Smaller problems clip them.
_DEFAULTS = {
    "js": TileConfig(),
    "tv": TileConfig(),
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
    if cfg.rows < 8 or cfg.rows % 8 or cfg.block_profiles % cfg.rows:
        problems.append(f"rows={cfg.rows} (a multiple of 8 dividing block_profiles)")
    if cfg.agents_per_step not in (1, 2, 4, 8):
        problems.append(f"agents_per_step={cfg.agents_per_step} (1, 2, 4 or 8)")
    if cfg.unroll < 1:
        problems.append(f"unroll={cfg.unroll} (>= 1)")
    if cfg.loop not in ("rows", "agents"):
        problems.append(f"loop={cfg.loop!r} (rows or agents)")
    if cfg.linear not in ("mxu", "mxu3", "xla", "none"):
        problems.append(f"linear={cfg.linear!r} (mxu, mxu3, xla or none)")
    if cfg.tv_pair not in ("min", "abs"):
        problems.append(f"tv_pair={cfg.tv_pair!r} (min or abs)")
    if problems:
        raise ValueError("TileConfig: " + "; ".join(problems))


@dataclasses.dataclass(frozen=True)
class Layout:
    """One call's blocks: ``cfg`` clipped to ``P`` profiles, ``J`` agents, ``X`` elements."""

    bj: int
    bp: int
    bx: int
    rows: int
    lanes: int  # width of the lane partials: 128, or BX when BX = X is narrower
    n_j: int
    n_p: int
    n_x: int
    x_tail: int  # valid columns of the last X tile (BX when it is full)

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


def layout(cfg: TileConfig, p: int, j: int, x: int) -> Layout:
    _check_config(cfg)
    bj = min(cfg.block_agents, _round_up(j, _SUBLANES))
    bp = min(cfg.block_profiles, _round_up(p, _SUBLANES))
    rows = cfg.rows if bp % cfg.rows == 0 else _SUBLANES
    bx = _block_x(x, cfg.block_x)
    n_x = -(-x // bx)
    return Layout(
        bj=bj,
        bp=bp,
        bx=bx,
        rows=rows,
        lanes=_LANES if bx % _LANES == 0 else bx,
        n_j=-(-j // bj),
        n_p=-(-p // bp),
        n_x=n_x,
        x_tail=x - (n_x - 1) * bx,
    )


def _abs_tv(metric: str, cfg: TileConfig) -> bool:
    return metric == "tv" and cfg.tv_pair == "abs"


def agent_operands(
    metric: str, side: AgentSide, cfg: TileConfig | None = None
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """``(q, w, a)``: the kernel's agent operands ``[J, X]`` and the agent-only term ``[J]``."""
    if metric == "tv":
        if cfg is not None and _abs_tv(metric, cfg):
            return side.q, side.w, jnp.zeros(side.q.shape[:1], jnp.float32)
        return side.q, side.w, 0.5 * (side.w * side.q).sum(1)
    # 1/2 q ln 2q = hq + 1/2 ln2 q
    a = (side.w * (side.hq + (0.5 * LOG2) * side.q)).sum(1)
    return jnp.maximum(side.q, TINY), 0.5 * side.w, a


def _pair(metric: str, q: jax.Array, k: jax.Array, cfg: TileConfig) -> jax.Array:
    """The per-pair term before its weight: ``min(q, k)`` (TV), ``t ln t`` (JS)."""
    if metric == "tv":
        return jnp.abs(q - k) if cfg.tv_pair == "abs" else jnp.minimum(q, k)
    t = q + k
    return t * jnp.log(t)


def _linear(metric: str, k: jax.Array) -> jax.Array:
    """The bank's factor of the product term: ``k`` (TV), ``k ln 2k`` (JS, 0 at k = 0)."""
    if metric == "tv":
        return k
    return k * jnp.log(jnp.maximum(2.0 * k, TINY))


def _scales(metric: str, cfg: TileConfig) -> tuple[float, float]:
    """``(c_linear, c_pair)``: the kernel's total is ``c_linear lin - c_pair pairs``."""
    if metric == "js":
        return 1.0, 1.0
    return (0.0, -0.5) if cfg.tv_pair == "abs" else (0.5, 1.0)


def _has_linear(metric: str, cfg: TileConfig) -> bool:
    return not _abs_tv(metric, cfg) and cfg.linear != "none"


def _split(x: jax.Array) -> tuple[jax.Array, jax.Array]:
    hi = x.astype(jnp.bfloat16)
    return hi, (x - hi.astype(jnp.float32)).astype(jnp.bfloat16)


def _linear_product(g: jax.Array, w: jax.Array, how: str) -> jax.Array:
    """``[BP, BJ] = g [BP, BX] . w [BJ, BX]^T`` with float32 accumulation."""
    if how == "mxu3":
        (g_hi, g_lo), (w_hi, w_lo) = _split(g), _split(w)
        out = jax.lax.dot_general(g_hi, w_hi, _NT, preferred_element_type=jnp.float32)
        out += jax.lax.dot_general(g_hi, w_lo, _NT, preferred_element_type=jnp.float32)
        return out + jax.lax.dot_general(g_lo, w_hi, _NT, preferred_element_type=jnp.float32)
    return jax.lax.dot_general(g, w, _NT, precision=(_HI, _HI), preferred_element_type=jnp.float32)


def _fold(e: jax.Array, lanes: int) -> jax.Array:
    """``[R, BX] -> [R, lanes]``: the lane chunks of ``e`` added up."""
    part = e[:, :lanes]
    for c in range(1, e.shape[1] // lanes):
        part = part + e[:, c * lanes : (c + 1) * lanes]
    return part


def _scratch(lay: Layout, cfg: TileConfig) -> list[Any]:
    """The pair loop's VMEM: lane partials ``[BJ, BP, lanes]``; for the agent loop each
    agent's ``q`` and ``w`` rows broadcast to 8 sublanes, ``[BJ, 8, BX]``."""
    out = [pltpu.VMEM((lay.bj, lay.bp, lay.lanes), jnp.float32)]
    if cfg.loop == "agents":
        out += [pltpu.VMEM((lay.bj, _SUBLANES, lay.bx), jnp.float32)] * 2
    return out


def _accumulate_pairs(
    metric: str,
    k_ref: Any,
    q_ref: Any,
    w_ref: Any,
    scratch: Any,
    lay: Layout,
    cfg: TileConfig,
) -> None:
    if cfg.loop == "agents":
        acc_ref, qb_ref, wb_ref = scratch
        _pairs_agent_loop(metric, k_ref, q_ref, w_ref, acc_ref, qb_ref, wb_ref, lay, cfg)
    else:
        _pairs_row_loop(metric, k_ref, q_ref, w_ref, scratch[0], lay, cfg)


def _pairs_agent_loop(
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
    """``acc[j, r, :] += fold(w[j] * pair(q[j], k[r]))``: a loop over agents (``AG`` a
    step, rows read from the broadcast copies by a dynamic leading index), the tile's row
    slabs of 8 unrolled."""
    bx, lanes = lay.bx, lay.lanes
    for j in range(lay.bj):  # each agent's row on 8 sublanes, once a grid step
        qb_ref[j] = jnp.broadcast_to(q_ref[j : j + 1, :], (_SUBLANES, bx))
        wb_ref[j] = jnp.broadcast_to(w_ref[j : j + 1, :], (_SUBLANES, bx))
    ag = min(cfg.agents_per_step, lay.bj)

    def body(g: jax.Array, carry: int) -> int:
        j0 = g * ag
        qs = [qb_ref[j0 + i] for i in range(ag)]
        ws = [wb_ref[j0 + i] for i in range(ag)]
        for r0 in range(0, lay.bp, _SUBLANES):
            k = k_ref[r0 : r0 + _SUBLANES, :]
            for i in range(ag):
                part = _fold(_pair(metric, qs[i], k, cfg) * ws[i], lanes)
                acc_ref[j0 + i, r0 : r0 + _SUBLANES, :] += part
        return carry

    jax.lax.fori_loop(0, lay.bj // ag, body, 0, unroll=min(cfg.unroll, lay.bj // ag))


def _pairs_row_loop(
    metric: str,
    k_ref: Any,
    q_ref: Any,
    w_ref: Any,
    acc_ref: Any,
    lay: Layout,
    cfg: TileConfig,
) -> None:
    """``acc[j, r, :] += fold_128(w[j] * pair(q[j], k[r]))`` for every agent of the block
    and every bank row of the tile. Agents are unrolled (static slices of their row);
    ``AG`` of them share each ``[R, BX]`` load of the bank inside a loop over row slabs."""
    rows, lanes, bx = lay.rows, lay.lanes, lay.bx
    ag = min(cfg.agents_per_step, lay.bj)
    for j0 in range(0, lay.bj, ag):
        qs = [jnp.broadcast_to(q_ref[j : j + 1, :], (rows, bx)) for j in range(j0, j0 + ag)]
        ws = [jnp.broadcast_to(w_ref[j : j + 1, :], (rows, bx)) for j in range(j0, j0 + ag)]

        def body(r: jax.Array, carry: int, j0: int = j0, qs: Any = qs, ws: Any = ws) -> int:
            r0 = pl.multiple_of(r * rows, rows)
            k = k_ref[pl.ds(r0, rows), :]
            for i in range(len(qs)):
                part = _fold(_pair(metric, qs[i], k, cfg) * ws[i], lanes)
                acc_ref[j0 + i, pl.ds(r0, rows), :] += part
            return carry

        jax.lax.fori_loop(0, lay.bp // rows, body, 0, unroll=min(cfg.unroll, lay.bp // rows))


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
    *scratch: Any,
    metric: str,
    lay: Layout,
    cfg: TileConfig,
) -> None:
    s = pl.program_id(2)
    acc_ref = scratch[0]
    in_kernel = _has_linear(metric, cfg) and cfg.linear in ("mxu", "mxu3")

    @pl.when(s == 0)
    def _zero() -> None:
        acc_ref[...] = jnp.zeros(acc_ref.shape, jnp.float32)
        mxu_ref[...] = jnp.zeros(mxu_ref.shape, jnp.float32)

    if lay.x_tail != lay.bx:  # the last X tile runs past X: zero its tail in VMEM

        @pl.when(s == lay.n_x - 1)
        def _mask() -> None:
            col = jax.lax.broadcasted_iota(jnp.int32, (lay.bp, lay.bx), 1)
            k_ref[...] = jnp.where(col < lay.x_tail, k_ref[...], 0.0)

    if in_kernel:
        mxu_ref[...] += _linear_product(_linear(metric, k_ref[...]), w_ref[...], cfg.linear)
    _accumulate_pairs(metric, k_ref, q_ref, w_ref, scratch, lay, cfg)

    @pl.when(s == lay.n_x - 1)
    def _finish() -> None:
        c_lin, c_pair = _scales(metric, cfg)
        o_ref[...] = c_lin * mxu_ref[...] - c_pair * _lane_sums(acc_ref, lay)


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
    interpret = _interpret() if interpret is None else interpret
    p = kernels.shape[0]
    bank = kernels.reshape(p, -1)
    x = bank.shape[1]
    j = side.q.shape[0]
    lay = layout(cfg, p, j, x)
    q, w, a = agent_operands(metric, side, cfg)
    pad = ((0, lay.j_pad - j), (0, lay.x_pad - x))
    if pad != ((0, 0), (0, 0)):  # zero weight: padded agents and columns add nothing
        q = jnp.pad(q, pad, constant_values=TINY if metric == "js" else 0.0)
        w = jnp.pad(w, pad)
    out = pl.pallas_call(
        functools.partial(_kernel, metric=metric, lay=lay, cfg=cfg),
        out_shape=_out_struct((lay.n_j, p, lay.bj), bank),
        grid=(lay.n_j, lay.n_p, lay.n_x),
        in_specs=[
            pl.BlockSpec((lay.bp, lay.bx), lambda a, b, s: (b, s)),
            pl.BlockSpec((lay.bj, lay.bx), lambda a, b, s: (a, s)),
            pl.BlockSpec((lay.bj, lay.bx), lambda a, b, s: (a, s)),
        ],
        out_specs=pl.BlockSpec((None, lay.bp, lay.bj), lambda a, b, s: (a, b, 0)),
        scratch_shapes=[pltpu.VMEM((lay.bp, lay.bj), jnp.float32), *_scratch(lay, cfg)],
        compiler_params=_compiler_params(cfg, ("parallel", "parallel", "arbitrary")),
        interpret=interpret,
        name=f"profiles_{metric}",
    )(bank, q, w)
    total = out.transpose(1, 0, 2).reshape(p, lay.j_pad)[:, :j] + a[None, :]
    if _has_linear(metric, cfg) and cfg.linear == "xla":
        lin = jax.lax.dot_general(_linear(metric, bank), w[:j, :x], _NT, precision=(_HI, _HI))
        total = total + _scales(metric, cfg)[0] * lin
    return jnp.maximum(total, 0.0)


# --------------------------------------------------------------------------- the bound


def _roofline_kernel(
    k_ref: Any,
    q_ref: Any,
    w_ref: Any,
    o_ref: Any,
    *scratch: Any,
    metric: str,
    lay: Layout,
    cfg: TileConfig,
    steps: int,
) -> None:
    s = pl.program_id(0)
    acc_ref = scratch[0]

    @pl.when(s == 0)
    def _zero() -> None:
        acc_ref[...] = jnp.zeros(acc_ref.shape, jnp.float32)

    _accumulate_pairs(metric, k_ref, q_ref, w_ref, scratch, lay, cfg)

    @pl.when(s == steps - 1)
    def _finish() -> None:
        o_ref[...] = _lane_sums(acc_ref, lay)


class Roofline(NamedTuple):
    run: Callable[[], jax.Array]  # blocks until done; ``[BP, BJ]`` lane sums
    operands: tuple[jax.Array, jax.Array, jax.Array]  # the held tiles k, q, w
    steps: int  # grid steps, as many as the pass's


def roofline(metric: str, p: int, j: int, x: int, cfg: TileConfig | None = None) -> Roofline:
    """The pass's vector loop alone: as many grid steps as ``pallas_total`` takes at
    ``[P, J, X]``, each scoring the same ``[BJ, BX]`` agents against the same ``[BP, BX]``
    bank tile, fetched into VMEM once (the block index never changes). No HBM traffic,
    no product, one epilogue: the pair terms at the rate the chip runs this loop."""
    cfg = default_config(metric) if cfg is None else cfg
    lay = layout(cfg, p, j, x)
    full = dataclasses.replace(lay, n_j=1, n_p=1, n_x=1, x_tail=lay.bx)
    keys = jax.random.split(jax.random.PRNGKey(0), 3)
    k = jax.random.uniform(keys[0], (lay.bp, lay.bx), jnp.float32)
    q = jax.random.uniform(keys[1], (lay.bj, lay.bx), jnp.float32)
    w = jax.random.uniform(keys[2], (lay.bj, lay.bx), jnp.float32) / (lay.bx * lay.steps)

    def fixed(s: jax.Array) -> tuple[int, int]:
        return (0, 0)

    call = pl.pallas_call(
        functools.partial(_roofline_kernel, metric=metric, lay=full, cfg=cfg, steps=lay.steps),
        out_shape=jax.ShapeDtypeStruct((lay.bp, lay.bj), jnp.float32),
        grid=(lay.steps,),
        in_specs=[
            pl.BlockSpec((lay.bp, lay.bx), fixed),
            pl.BlockSpec((lay.bj, lay.bx), fixed),
            pl.BlockSpec((lay.bj, lay.bx), fixed),
        ],
        out_specs=pl.BlockSpec((lay.bp, lay.bj), fixed),
        scratch_shapes=_scratch(lay, cfg),
        compiler_params=_compiler_params(cfg, ("arbitrary",)),
        interpret=_interpret(),
        name=f"roofline_{metric}",
    )
    compiled = jax.jit(call).lower(k, q, w).compile()
    return Roofline(lambda: jax.block_until_ready(compiled(k, q, w)), (k, q, w), lay.steps)


# --------------------------------------------------------------------------- KL's product


@dataclasses.dataclass(frozen=True)
class ProductConfig:
    """Tiles of KL's product kernel (clipped to the problem)."""

    block_profiles: int = 1024  # BP, a multiple of 8
    block_x: int = 512  # BX, a multiple of 128
    max_agents: int = 1024  # one agent block up to this many (else blocks of 512)
    vmem_limit_mb: int | None = None


def _product_kernel(
    k_ref: Any,
    hi_ref: Any,
    lo_ref: Any,
    o_ref: Any,
    acc_ref: Any,
    *,
    n_x: int,
    x_tail: int,
    passes: int,
) -> None:
    s = pl.program_id(2)

    @pl.when(s == 0)
    def _zero() -> None:
        acc_ref[...] = jnp.zeros(acc_ref.shape, jnp.float32)

    k = k_ref[...]
    if x_tail != k.shape[1]:  # the last X tile runs past X: garbage there, zero it
        col = jax.lax.broadcasted_iota(jnp.int32, k.shape, 1)
        k = jnp.where((s < n_x - 1) | (col < x_tail), k, 0.0)
    k_hi = k.astype(jnp.bfloat16)
    acc = jnp.dot(k_hi, hi_ref[...], preferred_element_type=jnp.float32)
    if passes == 3:
        k_lo = (k - k_hi.astype(jnp.float32)).astype(jnp.bfloat16)
        acc += jnp.dot(k_hi, lo_ref[...], preferred_element_type=jnp.float32)
        acc += jnp.dot(k_lo, hi_ref[...], preferred_element_type=jnp.float32)
    acc_ref[...] += acc

    @pl.when(s == n_x - 1)
    def _finish() -> None:
        o_ref[...] = acc_ref[...]


def pallas_cross(
    log_kernels: jax.Array,
    wq: jax.Array,
    precision: str = "bf16x3",
    cfg: ProductConfig | None = None,
    interpret: bool | None = None,
) -> jax.Array:
    """KL's product ``[P, J] = logk[P, X] . wq[J, X]^T`` on the MXU, float32 accumulation:
    ``bf16x3`` (each operand split into bfloat16 ``hi + lo``; ``hi hi + hi lo + lo hi``)
    or ``bf16`` (``hi hi``). The bank is read once (one agent block up to
    ``max_agents``) and split in VMEM; the agents' splits are made once, transposed to
    ``[X, J]``, beside the kernel."""
    if precision not in ("bf16x3", "bf16"):
        raise ValueError(f"pallas_cross takes bf16x3 or bf16, got {precision!r}")
    cfg = ProductConfig() if cfg is None else cfg
    interpret = _interpret() if interpret is None else interpret
    p = log_kernels.shape[0]
    bank = log_kernels.reshape(p, -1)
    x = bank.shape[1]
    j = wq.shape[0]
    bj = _round_up(j, _LANES) if j <= cfg.max_agents else 512
    bp = min(cfg.block_profiles, _round_up(p, _SUBLANES))
    bx = _block_x(x, cfg.block_x)
    n_j, n_p, n_x = -(-j // bj), -(-p // bp), -(-x // bx)
    hi, lo = _split(wq)
    pad = ((0, n_j * bj - j), (0, n_x * bx - x))
    hi, lo = jnp.pad(hi, pad).T, jnp.pad(lo, pad).T  # [X, J]: the MXU's (K, N) layout
    out = pl.pallas_call(
        functools.partial(
            _product_kernel,
            n_x=n_x,
            x_tail=x - (n_x - 1) * bx,
            passes=3 if precision == "bf16x3" else 1,
        ),
        out_shape=_out_struct((p, n_j * bj), bank),
        grid=(n_j, n_p, n_x),
        in_specs=[
            pl.BlockSpec((bp, bx), lambda a, b, s: (b, s)),
            pl.BlockSpec((bx, bj), lambda a, b, s: (s, a)),
            pl.BlockSpec((bx, bj), lambda a, b, s: (s, a)),
        ],
        out_specs=pl.BlockSpec((bp, bj), lambda a, b, s: (b, a)),
        scratch_shapes=[pltpu.VMEM((bp, bj), jnp.float32)],
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", "arbitrary"),
            vmem_limit_bytes=None if cfg.vmem_limit_mb is None else cfg.vmem_limit_mb << 20,
        ),
        interpret=interpret,
        name="profiles_kl_product",
    )(bank, hi, lo)
    return out[:, :j]
