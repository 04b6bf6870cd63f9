"""The one-read implementations (``tiled`` XLA, ``pallas`` kernels run with
``interpret=True`` here) against the reference path and a float64 NumPy loop.

Small shapes that hit every edge: masked states (agents hold NaN there), zero-probability
actions in agents and profiles, one agent, an agent with no visitation mass, an agent
equal to a profile (JS and TV exactly 0), P not a multiple of any block, X not a
multiple of the tile, several agent blocks and X splits.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from engine.jax_profiles import alpha as AL
from engine.jax_profiles import bank as B
from engine.jax_profiles import divergence as D
from engine.jax_profiles import pallas_kernels as PK
from engine.jax_profiles import tiled as T

# All JAX tests share one xdist worker: JAX is imported and the programs common to
# several tests (the reference pass of a shape, the bank's log) compile once per run.
pytestmark = pytest.mark.xdist_group("jax")

# float32 vs float32 (reference) and vs float64 (NumPy): divergences are O(1) here
RTOL = 1e-5
ATOL = 2e-6


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
    np.testing.assert_allclose(got, _numpy_total(metric, bank, agents, vis), rtol=RTOL, atol=ATOL)
    assert (got >= 0).all()
    if j > 1:  # agent 1 is profile 2
        assert abs(got[1, min(2, p - 1)]) < ATOL
    if j > 2:
        assert (got[2] == 0).all()


@pytest.mark.parametrize(("p", "j", "shape"), SHAPES)
def test_pallas_kl_matches_reference(p: int, j: int, shape: tuple[int, int, int]) -> None:
    bank, agents, vis = _case(p, j, shape, seed=1)
    ref = np.asarray(D.divergence_total(bank, agents, vis, "kl", impl="reference"))
    got = np.asarray(D.divergence_total(bank, agents, vis, "kl", impl="pallas"))
    assert np.isfinite(got).all()
    # KL terms reach -log(1e-8) = 18.4 per unit mass: float32 sums of them
    np.testing.assert_allclose(got, ref, rtol=RTOL, atol=1e-5)


@pytest.mark.parametrize("metric", ["kl", "js", "tv"])
def test_pallas_several_agent_blocks_and_x_splits(metric: str) -> None:
    """Small tiles: 3 agent blocks (one padded), 5 profile blocks (last partial) and X in
    splits of several tiles each (last tile partial), summed outside the kernel."""
    bank, agents, vis = _case(19, 5, (3, 5, 3), seed=2)  # X = 45
    small = PK.KernelConfig(block_agents=2, block_profiles=4, block_x=8, target_programs=40)
    if metric == "kl":
        small = PK.KernelConfig(block_agents=16, block_profiles=16, block_x=16, target_programs=3)
    assert PK.grid_programs(metric, 19, 5, 45, small) > 3

    @jax.jit  # one program: run eagerly, each of agent_side's ops would compile on its own
    def total(bank: B.ProfileBank, agents: jax.Array, vis: jax.Array) -> jax.Array:
        side = T.agent_side(bank.state_mask, agents, vis)
        if metric == "kl":
            self_term = 2.0 * (side.w * side.hq).sum(1)
            return self_term[None] - PK.pallas_cross(bank.log_kernels, side.wq, "fp32", small)
        return PK.pallas_total(metric, bank.kernels, side, small)

    got = total(bank, jnp.asarray(agents), jnp.asarray(vis))
    ref = D.divergence_total(bank, agents, vis, metric, impl="reference").T
    np.testing.assert_allclose(np.asarray(got), np.asarray(ref), rtol=RTOL, atol=1e-5)


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


@pytest.mark.parametrize("precision", ["tf32", "bf16"])
@pytest.mark.parametrize("impl", ["reference", "pallas"])
def test_reduced_precision_kl_error_is_bounded(precision: str, impl: str) -> None:
    """Rounding the product's inputs to ``u`` (tf32 2^-11, bf16 2^-8 relative) moves each
    cross term by at most ~2u of sum |w q log k| <= 2u * 18.4 (plus float32 rounding)."""
    bank, agents, vis = _case(37, 5, (2, 5, 3), seed=5)
    ref = np.asarray(D.divergence_total(bank, agents, vis, "kl", impl="reference"))
    got = np.asarray(D.divergence_total(bank, agents, vis, "kl", impl=impl, precision=precision))
    u = 2.0**-11 if precision == "tf32" else 2.0**-8
    assert np.abs(got - ref).max() <= 2 * u * -math.log(B.KL_FLOOR) + 1e-5
    if impl == "reference":  # on CPU the rounding is emulated: it must show
        assert np.abs(got - ref).max() > 0


def test_bad_impl_and_precision_name_the_argument() -> None:
    bank, agents, vis = _case(3, 1, (1, 2, 2))
    with pytest.raises(ValueError, match="impl"):
        D.divergence_total(bank, agents, vis, "js", impl="cuda")
    with pytest.raises(ValueError, match="precision"):
        D.divergence_total(bank, agents, vis, "kl", precision="fp16")
    with pytest.raises(ValueError, match="power of two"):
        PK.pallas_total(
            "tv",
            bank.kernels,
            _agent_side(bank.state_mask, jnp.asarray(agents), None),
            PK.KernelConfig(block_agents=3, block_profiles=4, block_x=4),
        )


def test_auto_picks_by_backend() -> None:
    assert D.resolve_impl("kl", "auto", "gpu") == "pallas"
    assert D.resolve_impl("js", "auto", "gpu") == "pallas"
    assert D.resolve_impl("kl", "auto", "cpu") == "reference"
    assert D.resolve_impl("js", "auto", "cpu") == "reference"
    assert D.resolve_impl("tv", "tiled", "tpu") == "tiled"
    assert D.resolve_impl("kl", "tiled", "cpu") == "reference"


@pytest.mark.parametrize(
    ("metric", "n_agents", "precision"),
    [
        ("kl", 16, "fp32"),
        ("kl", 300, "tf32"),
        ("kl", 3, "bf16"),
        ("js", 256, "fp32"),
        ("js", 5, "fp32"),
        ("tv", 1, "fp32"),
        ("tv", 16, "fp32"),
    ],
)
def test_kernels_lower_through_triton_for_a_gpu(metric: str, n_agents: int, precision: str) -> None:
    """No GPU here, but the Triton lowering runs for a CUDA target (compute capability
    9.0): power-of-two tiles, masked loads, the fast log's inline PTX, the dot's
    precision. What it cannot check (ptxas, speed) is the device script's."""
    p, x = 4099, 3 * 7 * 5  # neither a multiple of a block
    bank = jax.ShapeDtypeStruct((p, 3, 7, 5), jnp.float32)
    agents = jax.ShapeDtypeStruct((n_agents, x), jnp.float32)

    def fn(kernels: jax.Array, q: jax.Array) -> jax.Array:
        if metric == "kl":
            return PK.pallas_cross(kernels, q, precision, interpret=False)
        side = T.AgentSide(q=q, w=q, hq=q, wq=q)
        return PK.pallas_total(metric, kernels, side, interpret=False)

    lowered = jax.jit(fn).trace(bank, agents).lower(lowering_platforms=("cuda",))
    text = lowered.as_text()
    assert "stablehlo.custom_call @__gpu$xla.gpu.triton" in text
    assert ("lg2.approx.f32" in text) == (metric == "js")  # the fast log, JS only
