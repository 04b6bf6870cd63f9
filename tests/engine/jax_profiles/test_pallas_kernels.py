"""The one-read implementations (``tiled`` XLA, ``pallas`` Mosaic kernels, run with
``interpret=True`` off a TPU) against the reference path and a float64 NumPy loop.

Small shapes that hit every edge: masked states (agents hold NaN there), zero-probability
actions in agents and profiles, one agent, an agent with no visitation mass, an agent
equal to a profile (JS and TV exactly 0), P, J and X not multiples of their blocks,
several blocks of each, X narrower than the 128 lanes. On a TPU (the device script) the
same tests run the kernels compiled by Mosaic.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from engine.jax_profiles import alpha as AL
from engine.jax_profiles import bank as B
from engine.jax_profiles import choice as C
from engine.jax_profiles import divergence as D
from engine.jax_profiles import pallas_kernels as PK
from engine.jax_profiles import tiled as T

# All JAX tests share one xdist worker: JAX is imported and the programs common to
# several tests (the reference pass of a shape, the bank's log) compile once per run.
pytestmark = pytest.mark.xdist_group("jax")

# float32 vs float32 (reference) and vs float64 (NumPy): divergences are O(1) here
RTOL = 1e-5
ATOL = 2e-6


@functools.cache
def _xlogx_error() -> float:
    """The backend's float32 ``x log x`` against float64 on [0, 2], absolute. A TPU's log
    is its own approximation (XLA's and Mosaic's alike, a few 1e-5 here): JS against
    float64 is as exact as that, the kernel against the reference much closer."""
    x = np.concatenate([np.linspace(0.0, 2.0, 20001), np.logspace(-30, 0.3, 2001)])
    x32 = x.astype(np.float32)
    got = np.asarray(jax.jit(lambda t: t * jnp.log(jnp.where(t > 0, t, 1.0)))(x32), np.float64)
    x64 = x32.astype(np.float64)
    want = x64 * np.log(np.where(x64 > 0, x64, 1.0))
    return float(np.abs(got - want).max())


def _f64_atol(metric: str) -> float:
    """JS's per-element term is 1/2 q ln q + 1/2 k ln k - m ln m with weights summing to
    1: at most twice the ``x log x`` error (doubled again for the sums' rounding)."""
    return ATOL + (4 * _xlogx_error() if metric == "js" else 0.0)


def _kernels(rng: np.random.Generator, shape: tuple[int, ...], zero_frac: float) -> np.ndarray:
    raw = rng.gamma(0.6, size=shape) + 1e-4
    zero = rng.random(shape) < zero_frac
    keep = rng.integers(shape[-1], size=shape[:-1])
    np.put_along_axis(zero, keep[..., None], False, axis=-1)
    raw = np.where(zero, 0.0, raw)
    return (raw / raw.sum(-1, keepdims=True)).astype(np.float32)


def _case(
    p: int, j: int, shape: tuple[int, int, int], seed: int = 0
) -> tuple[B.ProfileBank, np.ndarray, np.ndarray]:
    n_levels, n_states, _ = shape
    rng = np.random.default_rng(seed)
    profiles = _kernels(rng, (p, *shape), zero_frac=0.3)
    mask = rng.random((n_levels, n_states)) < 0.7
    mask[0, 0] = True
    agents = _kernels(rng, (j, *shape), zero_frac=0.3)
    if j > 1:
        agents[1] = profiles[min(2, p - 1)]  # identical to a profile: JS = TV = 0 there
    agents[:, ~mask] = np.nan  # garbage on masked states must not reach a sum
    visitation = rng.random((j, n_levels, n_states)).astype(np.float32)
    if j > 2:
        visitation[2] = 0.0  # no mass: all divergences 0
    bank = B.make_bank(profiles, mask, np.full(p, B.HUMAN))
    return bank, agents, visitation


# agent_side as one program (eagerly, each of its ops would compile on its own)
_agent_side = jax.jit(T.agent_side)


def _numpy_total(
    metric: str, bank: B.ProfileBank, agents: np.ndarray, vis: np.ndarray
) -> np.ndarray:
    """float64 ``[J, P]`` from the per-state formulas of ``divergence.py``."""
    k = np.asarray(bank.kernels, np.float64)
    mask = np.asarray(bank.state_mask)
    out = np.zeros((agents.shape[0], k.shape[0]))
    for j in range(agents.shape[0]):
        w = np.where(mask, np.maximum(vis[j], 0.0), 0.0)
        if w.sum() == 0:
            continue
        w = w / w.sum()
        q = np.where(mask[..., None], agents[j], 0.0).astype(np.float64)
        for p in range(k.shape[0]):
            total = 0.0
            for lv, s in zip(*np.nonzero(w), strict=True):
                qa, ka = q[lv, s], k[p, lv, s]
                if metric == "tv":
                    d = 0.5 * np.abs(qa - ka).sum()
                else:
                    m = 0.5 * (qa + ka)
                    d = 0.5 * sum(
                        x * math.log(x / mm) for x, mm in zip(qa, m, strict=True) if x > 0
                    )
                    d += 0.5 * sum(
                        x * math.log(x / mm) for x, mm in zip(ka, m, strict=True) if x > 0
                    )
                total += w[lv, s] * d
            out[j, p] = total
    return out


SHAPES = [
    (37, 5, (2, 5, 3)),  # P, X = 30 not multiples of any block; J = 5 not a power of two
    (9, 1, (3, 4, 4)),  # one agent
    (3, 3, (1, 7, 2)),  # fewer profiles than a block
]


@pytest.mark.parametrize("metric", ["js", "tv"])
@pytest.mark.parametrize(("p", "j", "shape"), SHAPES)
@pytest.mark.parametrize("impl", ["tiled", "pallas"])
def test_one_read_paths_match_reference_and_numpy(
    metric: str, p: int, j: int, shape: tuple[int, int, int], impl: str
) -> None:
    bank, agents, vis = _case(p, j, shape)
    ref = np.asarray(D.divergence_total(bank, agents, vis, metric, impl="reference"))
    got = np.asarray(D.divergence_total(bank, agents, vis, metric, impl=impl))
    assert got.shape == (j, p) and np.isfinite(got).all()
    np.testing.assert_allclose(got, ref, rtol=RTOL, atol=ATOL)
    f64 = _numpy_total(metric, bank, agents, vis)
    np.testing.assert_allclose(got, f64, rtol=RTOL, atol=_f64_atol(metric))
    assert (got >= 0).all()
    if j > 1:  # agent 1 is profile 2
        assert abs(got[1, min(2, p - 1)]) < ATOL
    if j > 2:
        assert (got[2] == 0).all()


# Small tiles: 3 agent blocks (19 agents padded to 24), 3 profile blocks (the last
# partial: 37 = 16 + 16 + 5), 3 X tiles of 128 a plane (5 action planes of 300 columns,
# the last tile partial), 4 agents sharing each slab load; one agent a step over 4 full X
# tiles; the flat bank (one plane) with JS as t log2 t.
SMALL_TILES = [
    (37, 19, (3, 100, 5), PK.TileConfig(8, 16, 128, agents_per_step=4)),
    (20, 9, (2, 256, 4), PK.TileConfig(8, 8, 128, agents_per_step=1)),
    (20, 9, (2, 75, 4), PK.TileConfig(8, 8, 128, group_actions=False, log2=True)),
]


@pytest.mark.parametrize("metric", ["js", "tv"])
@pytest.mark.parametrize(("p", "j", "shape", "cfg"), SMALL_TILES)
def test_pallas_blocks_partial_tiles_and_padding(
    metric: str, p: int, j: int, shape: tuple[int, int, int], cfg: PK.TileConfig
) -> None:
    """Several agent, profile and X blocks, each kind with a partial last one: the bank's
    tail columns are zeroed in VMEM, its tail rows dropped, the agents padded."""
    g = PK.groups((p, *shape), cfg)
    lay = PK.layout(cfg, p, j, math.prod(shape) // g, g)
    assert lay.n_j > 1 and lay.n_x > 1 and lay.n_p > 1
    bank, agents, vis = _case(p, j, shape, seed=2)
    side = _agent_side(bank.state_mask, jnp.asarray(agents), jnp.asarray(vis))
    total = jax.jit(PK.pallas_total, static_argnames=("metric", "cfg"))
    got = np.asarray(total(metric, bank.kernels, side, cfg)).T
    ref = np.asarray(D.divergence_total(bank, agents, vis, metric, impl="reference"))
    np.testing.assert_allclose(got, ref, rtol=RTOL, atol=ATOL)
    f64 = _numpy_total(metric, bank, agents, vis)
    np.testing.assert_allclose(got, f64, rtol=RTOL, atol=_f64_atol(metric))
    assert abs(got[1, 2]) < ATOL and (got[2] == 0).all()


@pytest.mark.parametrize("metric", ["js", "tv"])
def test_roofline_computes_the_pair_terms_of_the_pass(metric: str) -> None:
    """The bench's elementwise bound runs the kernel's own vector loop, once per grid step
    of the pass, on the tile it holds: its sums are steps x sum_x w pair(q, k)."""
    cfg = PK.TileConfig(8, 8, 128, agents_per_step=2)
    bound = PK.roofline(metric, 20, 9, 300 * 4, cfg, g=4)
    k, q, w = (np.asarray(a, np.float64) for a in bound.operands)  # [G, BP|BJ, BX], [BJ, BX]
    qq, kk = q[:, :, None], k[:, None]
    pair = np.minimum(qq, kk) if metric == "tv" else _tlogt(qq + kk)  # [G, BJ, BP, BX]
    want = bound.steps * (w[:, None] * pair.sum(0)).sum(-1).T  # [BP, BJ]
    atol = bound.steps * w.sum(-1).max() * (_xlogx_error() if metric == "js" else 0.0)
    np.testing.assert_allclose(np.asarray(bound.run()), want, rtol=1e-5, atol=2 * atol)


def _tlogt(t: np.ndarray) -> np.ndarray:
    return t * np.log(t)


def test_tiled_block_sizes_agree() -> None:
    bank, agents, vis = _case(11, 4, (2, 3, 4), seed=3)
    side = _agent_side(bank.state_mask, jnp.asarray(agents), jnp.asarray(vis))
    tiled_total = jax.jit(T.tiled_total, static_argnames=("metric", "block"))
    outs = [np.asarray(tiled_total("js", bank.kernels, side, block=b)) for b in (1, 4, 11, 64)]
    for out in outs[1:]:
        np.testing.assert_allclose(out, outs[0], rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("impl", ["tiled", "pallas"])
@pytest.mark.parametrize("metric", ["js", "tv"])
def test_selection_is_the_same_on_every_path(impl: str, metric: str) -> None:
    bank, agents, vis = _case(37, 5, (2, 5, 3), seed=4)
    agents = np.where(np.isnan(agents), 0.25, agents).astype(np.float32)
    alphas = np.linspace(0, 1, 5).astype(np.float32)
    returns = np.asarray([0.1, 0.9, 0.4, 0.3, 0.2], np.float32)
    ref = AL.select_alpha(bank, alphas, agents, returns, vis, metric=metric, impl="reference")
    got = AL.select_alpha(bank, alphas, agents, returns, vis, metric=metric, impl=impl)
    assert int(got.choice) == int(ref.choice)
    np.testing.assert_array_equal(np.asarray(got.worst_profile), np.asarray(ref.worst_profile))
    np.testing.assert_allclose(
        np.asarray(got.robust_score), np.asarray(ref.robust_score), rtol=RTOL, atol=ATOL
    )


# --------------------------------------------------------------------------- KL precision


def test_tf32_rounding_keeps_ten_mantissa_bits() -> None:
    x = jnp.asarray([1.0 + 2**-11 + 2**-13, 1.0 + 2**-12, -(1.0 + 2**-11 + 2**-13), 3.0])
    got = np.asarray(D._round_operand(x, "tf32"))
    np.testing.assert_array_equal(got, [1.0 + 2**-10, 1.0, -(1.0 + 2**-10), 3.0])
    bf = np.asarray(D._round_operand(jnp.asarray([1.0 + 2**-9]), "bf16"))
    assert bf[0] in (1.0, 1.0 + 2**-7)


@pytest.mark.parametrize(
    ("precision", "u"), [("bf16x3", 2.0**-16), ("tf32", 2.0**-11), ("bf16", 2.0**-8)]
)
def test_reduced_precision_kl_error_is_bounded(precision: str, u: float) -> None:
    """Rounding the product's inputs to ``u`` relative (bf16x3: the dropped lo x lo and
    the split's rounding, ~2^-16) moves each cross term by at most ~2u of
    sum |w q log k| <= 2u * 18.4 (plus float32 rounding)."""
    bank, agents, vis = _case(37, 5, (2, 5, 3), seed=5)
    ref = np.asarray(D.divergence_total(bank, agents, vis, "kl", precision="fp32"))
    got = np.asarray(D.divergence_total(bank, agents, vis, "kl", precision=precision))
    err = np.abs(got - ref).max()
    assert err <= 2 * u * -math.log(B.KL_FLOOR) + 1e-5
    assert err > 0  # the rounding must show (on CPU it is emulated)


def test_bf16x3_split_keeps_sixteen_mantissa_bits() -> None:
    x = jnp.asarray([1.0 + 2**-9 + 2**-17, -3.0 - 2**-12, 1e-8 * (1 + 2**-10)])
    hi, lo = D._split_bf16(x)
    np.testing.assert_array_equal(np.asarray(hi), D._round_operand(hi, "bf16"))
    np.testing.assert_array_equal(np.asarray(lo), D._round_operand(lo, "bf16"))
    rel = np.abs(np.asarray(hi + lo) - np.asarray(x)) / np.abs(np.asarray(x))
    assert (rel <= 2.0**-16).all()


def test_bad_impl_precision_and_tiles_name_the_argument() -> None:
    bank, agents, vis = _case(3, 1, (1, 2, 2))
    with pytest.raises(ValueError, match="impl"):
        D.divergence_total(bank, agents, vis, "js", impl="cuda")
    with pytest.raises(ValueError, match="precision"):
        D.divergence_total(bank, agents, vis, "kl", precision="fp16")
    with pytest.raises(ValueError, match=r"block_agents=3 \(a multiple of 8\)"):
        PK.layout(PK.TileConfig(block_agents=3), 3, 1, 4)
    with pytest.raises(ValueError, match="agents_per_step=3"):
        PK.layout(PK.TileConfig(agents_per_step=3), 3, 1, 4)


def test_auto_follows_the_measured_table() -> None:
    for row in C.AUTO:
        assert row.impl in C.IMPLS and row.impl != "auto"
        assert row.precision in C.PRECISIONS and row.precision != "auto"
        assert row.measured, row
        got = D.resolve_impl(row.metric, "auto", row.backend, n_agents=row.min_agents)
        assert got == row.impl
        prec = D.resolve_precision(row.metric, "auto", row.backend, n_agents=row.min_agents)
        assert prec == row.precision
    # the CPU keeps today's choice; a backend nobody measured gets the reference in fp32
    for metric in D.METRICS:
        for backend in ("cpu", "gpu"):
            assert D.resolve_impl(metric, "auto", backend, n_agents=256) == "reference"
            assert D.resolve_precision(metric, "auto", backend, n_agents=256) == "fp32"
    assert D.resolve_impl("tv", "tiled", "tpu") == "tiled"
    assert D.resolve_impl("kl", "tiled", "cpu") == "reference"
    assert D.resolve_impl("kl", "pallas", "tpu") == "reference"  # XLA's dot reads once
    assert D.resolve_precision("js", "bf16", "tpu") == "fp32"  # the product is KL's


@pytest.mark.parametrize(
    ("metric", "n_agents", "p", "shape"),
    [
        ("js", 256, 4096, (16, 1536, 4)),  # the must-show size
        ("tv", 300, 4099, (3, 700, 5)),  # no dimension a multiple of its block
        ("js", 5, 37, (2, 5, 3)),  # X narrower than 128 lanes
    ],
)
def test_kernels_lower_for_a_tpu(metric: str, n_agents: int, p: int, shape: tuple) -> None:
    """No TPU here, but Pallas lowers the kernel to Mosaic for one: block shapes against
    the (8, 128) tiling, the scratch, the grid. What it cannot check (Mosaic's own
    compile, speed) is the device script's."""
    x = math.prod(shape)
    bank = jax.ShapeDtypeStruct((p, *shape), jnp.float32)
    agents = jax.ShapeDtypeStruct((n_agents, x), jnp.float32)

    def fn(kernels: jax.Array, q: jax.Array) -> jax.Array:
        side = T.AgentSide(q=q, w=q, hq=q, wq=q)
        return PK.pallas_total(metric, kernels, side, interpret=False)

    lowered = jax.jit(fn).trace(bank, agents).lower(lowering_platforms=("tpu",))
    assert "stablehlo.custom_call @tpu_custom_call" in lowered.as_text()


def test_a_bank_holding_its_action_planes_scores_the_same() -> None:
    """On a TPU the bank holds its kernels as action planes (the kernels' operand, no
    relayout a pass); here it is asked for. The pass on them, a slice of them
    (``first_profiles``) and the bank without them agree; the sharded pass drops them."""
    bank, agents, vis = _case(37, 5, (2, 5, 3), seed=6)
    assert (bank.planes is not None) == B.holds_planes()  # make_bank: on a TPU only
    assert not B.holds_planes("cpu") and B.holds_planes("tpu")
    bank = B.with_planes(bank, hold=False)
    held = B.with_planes(bank)
    k = np.asarray(bank.kernels)
    np.testing.assert_array_equal(np.asarray(held.planes)[2, 7], k[7, :, :, 2].reshape(-1))
    for metric in ("js", "tv"):
        want = np.asarray(D.divergence_total(bank, agents, vis, metric, impl="pallas"))
        got = np.asarray(D.divergence_total(held, agents, vis, metric, impl="pallas"))
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
        first = np.asarray(
            D.divergence_total(B.first_profiles(held, 11), agents, vis, metric, impl="pallas")
        )
        np.testing.assert_allclose(first, want[:, :11], rtol=1e-6, atol=1e-7)
    assert B.with_planes(held, hold=False).planes is None
