"""engine.jax_profiles kernels against plain NumPy references (float64 loops).

Tolerances: float32 JAX vs float64 NumPy, ``rtol = 1e-4, atol = 1e-5`` on divergences
and scores (KL terms reach ``-log(1e-8) ~= 18.4`` per unit mass, so float32 rounding
stays ~1e-6 relative); counts are exact; smoothed kernels ``atol = 1e-6``.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.jax_profiles import alpha as AL
from engine.jax_profiles import bank as B
from engine.jax_profiles import divergence as D
from engine.jax_profiles.sharding import step_key

# All JAX tests share one xdist worker: JAX is imported and common programs compile once.
pytestmark = pytest.mark.xdist_group("jax")

RTOL, ATOL = 1e-4, 1e-5
SETTINGS = settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
# a few fixed shapes so compiled functions are reused across examples
SHAPES = st.sampled_from([(1, 1, 2), (2, 3, 3), (3, 5, 4)])  # (L, S, A)
COUNTS = st.sampled_from([(1, 1), (3, 2), (5, 3)])  # (P, J)


# --------------------------------------------------------------------------- helpers


def random_kernels(
    rng: np.random.Generator, shape: tuple[int, ...], zero_frac: float = 0.3
) -> np.ndarray:
    """Random kernels with exactly-zero actions (at least one non-zero per row)."""
    raw = rng.gamma(0.7, size=shape) + 1e-3
    zero = rng.random(shape) < zero_frac
    keep = rng.integers(shape[-1], size=shape[:-1])
    np.put_along_axis(zero, keep[..., None], False, axis=-1)
    raw = np.where(zero, 0.0, raw)
    return (raw / raw.sum(-1, keepdims=True)).astype(np.float32)


def random_mask(rng: np.random.Generator, n_levels: int, n_states: int) -> np.ndarray:
    return rng.random((n_levels, n_states)) < 0.7


def ref_per_state(metric: str, q: np.ndarray, k: np.ndarray, floor: float) -> float:
    q = q.astype(np.float64)
    k = k.astype(np.float64)
    if metric == "kl":
        return float(
            sum(
                qa * (math.log(qa) - math.log(max(ka, floor)))
                for qa, ka in zip(q, k, strict=True)
                if qa > 0
            )
        )
    if metric == "tv":
        return 0.5 * float(np.abs(q - k).sum())
    m = 0.5 * (q + k)

    def kl(a: np.ndarray, b: np.ndarray) -> float:
        return float(sum(x * math.log(x / y) for x, y in zip(a, b, strict=True) if x > 0))

    return 0.5 * kl(q, m) + 0.5 * kl(k, m)


def ref_divergences(
    metric: str,
    kernels: np.ndarray,
    agents: np.ndarray,
    mask: np.ndarray,
    visitation: np.ndarray | None,
    floor: float = B.KL_FLOOR,
) -> tuple[np.ndarray, np.ndarray]:
    p_count, n_levels, n_states, _ = kernels.shape
    j_count = agents.shape[0]
    per_level = np.zeros((j_count, p_count, n_levels))
    total = np.zeros((j_count, p_count))
    for j in range(j_count):
        for p in range(p_count):
            num_total = den_total = 0.0
            for lv in range(n_levels):
                num = den = 0.0
                for s in range(n_states):
                    if not mask[lv, s]:
                        continue
                    w = 1.0 if visitation is None else max(float(visitation[j, lv, s]), 0.0)
                    if w == 0.0:
                        continue
                    d = ref_per_state(metric, agents[j, lv, s], kernels[p, lv, s], floor)
                    num += w * d
                    den += w
                per_level[j, p, lv] = num / den if den > 0 else 0.0
                num_total += num
                den_total += den
            total[j, p] = num_total / den_total if den_total > 0 else 0.0
    return per_level, total


# count_actions as one program (eagerly, each of its ops would compile on its own)
_count_actions = jax.jit(B.count_actions, static_argnums=(4, 5, 6))


def make_test_bank(rng: np.random.Generator, p: int, shape: tuple[int, int, int]) -> B.ProfileBank:
    n_levels, n_states, n_actions = shape
    kernels = random_kernels(rng, (p, n_levels, n_states, n_actions))
    mask = random_mask(rng, n_levels, n_states)
    kinds = rng.integers(0, 3, size=p)
    kinds[0] = B.HUMAN
    return B.make_bank(kernels, mask, kinds)


# --------------------------------------------------------------------------- bank


@SETTINGS
@given(seed=st.integers(0, 2**31 - 1), shape=SHAPES, prior=st.sampled_from([0.0, 0.5, 1.0]))
def test_trajectory_kernels_match_numpy(
    seed: int, shape: tuple[int, int, int], prior: float
) -> None:
    n_levels, n_states, n_actions = shape
    rng = np.random.default_rng(seed)
    n, t = 4, 6
    level = rng.integers(0, n_levels, size=(n, t)).astype(np.int32)
    state = rng.integers(0, n_states, size=(n, t)).astype(np.int32)
    action = rng.integers(0, n_actions, size=(n, t)).astype(np.int32)
    mask = rng.random((n, t)) < 0.6
    # padding steps may hold garbage indices
    level[~mask] = -7
    action[~mask] = n_actions + 3
    state_mask = random_mask(rng, n_levels, n_states)

    counts = np.zeros((n_levels, n_states, n_actions))
    np.add.at(counts, (level[mask], state[mask], action[mask]), 1.0)
    got_counts = _count_actions(
        jnp.asarray(level),
        jnp.asarray(state),
        jnp.asarray(action),
        jnp.asarray(mask),
        n_levels,
        n_states,
        n_actions,
    )
    np.testing.assert_array_equal(np.asarray(got_counts), counts)

    expect = np.full_like(counts, 1.0 / n_actions)
    for lv in range(n_levels):
        for s in range(n_states):
            row = counts[lv, s] + prior
            if state_mask[lv, s] and row.sum() > 0:
                expect[lv, s] = row / row.sum()
    got = B.kernels_from_trajectories(level, state, action, mask, state_mask, n_actions, prior)
    np.testing.assert_allclose(np.asarray(got), expect, atol=1e-6)

    # batched over profiles: one vmapped call gives each profile's own kernel
    got_b = B.kernels_from_trajectories(
        np.stack([level, level]),
        np.stack([state, state]),
        np.stack([action, action]),
        np.stack([mask, np.zeros_like(mask)]),
        state_mask,
        n_actions,
        prior,
    )
    np.testing.assert_allclose(np.asarray(got_b[0]), expect, atol=1e-6)
    empty = np.where(state_mask[..., None], 1.0 / n_actions, 1.0 / n_actions)
    np.testing.assert_allclose(
        np.asarray(got_b[1]), np.broadcast_to(empty, expect.shape), atol=1e-6
    )


def test_trajectory_bad_index_names_field() -> None:
    level = np.zeros((1, 2), np.int32)
    state = np.array([[0, 9]], np.int32)
    action = np.zeros((1, 2), np.int32)
    mask = np.ones((1, 2), bool)
    with pytest.raises(ValueError, match=r"'state'.*mask=False"):
        B.kernels_from_trajectories(level, state, action, mask, np.ones((1, 3), bool), 2)
    with pytest.raises(ValueError, match="share one shape"):
        B.kernels_from_trajectories(level, state[:, :1], action, mask, np.ones((1, 3), bool), 2)


@SETTINGS
@given(seed=st.integers(0, 2**31 - 1), shape=SHAPES)
def test_contamination_mixtures(seed: int, shape: tuple[int, int, int]) -> None:
    n_levels, n_states, n_actions = shape
    rng = np.random.default_rng(seed)
    human = random_kernels(rng, shape, zero_frac=0.2)
    mask = random_mask(rng, n_levels, n_states)
    key = jax.random.PRNGKey(seed)
    eps_list = (0.1, 0.5)
    kernels, eps, code = B.contamination_kernels(key, human, mask, eps_list, n_biased=2)
    kernels = np.asarray(kernels, np.float64)
    assert kernels.shape == (len(eps_list) * 4, *shape)
    assert list(code) == [0, 1, 1, 2] * 2
    np.testing.assert_allclose(kernels.sum(-1), 1.0, atol=1e-5)
    uniform = np.full(shape, 1.0 / n_actions)
    for i in range(len(code)):
        other = (kernels[i] - (1 - eps[i]) * human) / eps[i]
        np.testing.assert_allclose(kernels[i][~mask], uniform[~mask], atol=1e-6)
        o = other[mask]
        if code[i] == 0:
            np.testing.assert_allclose(o, 1.0 / n_actions, atol=1e-5)
        elif code[i] == 1:  # one state-independent action preference
            np.testing.assert_allclose(o, np.broadcast_to(o[:1], o.shape), atol=1e-4)
        else:  # all mass on an action the human finds least likely
            np.testing.assert_allclose(o.max(-1), 1.0, atol=1e-4)
            chosen = o.argmax(-1)
            h = human[mask]
            np.testing.assert_allclose(h[np.arange(len(h)), chosen], h.min(-1), atol=1e-6)
    # deterministic, and slot-keyed: a prefix of the eps list gives the same profiles
    again, _, _ = B.contamination_kernels(key, human, mask, eps_list[:1], n_biased=2)
    np.testing.assert_array_equal(np.asarray(again), kernels[:4].astype(np.float32))
    if n_actions > 1 and mask.any():
        other_key, _, _ = B.contamination_kernels(
            jax.random.PRNGKey(seed + 1), human, mask, eps_list[:1], n_biased=2
        )
        assert not np.allclose(np.asarray(other_key)[1], kernels[1])


def test_build_bank_layout_and_save_load(tmp_path) -> None:
    rng = np.random.default_rng(0)
    shape = (2, 3, 4)
    humans = random_kernels(rng, (2, *shape))
    agents = random_kernels(rng, (1, *shape))
    mask = random_mask(rng, 2, 3)
    bank = B.build_bank(
        humans, mask, key=jax.random.PRNGKey(1), agent_kernels=agents, epsilons=(0.2,), n_biased=1
    )
    assert bank.shape == (2 + 1 + 2 * 3, *shape)
    assert list(np.asarray(bank.kinds)) == [0, 0, 1] + [2] * 6
    assert bank.describe(5) == "contamination/adversarial@0.2#5"
    np.testing.assert_allclose(
        np.asarray(bank.log_kernels),
        np.log(np.maximum(np.asarray(bank.kernels), B.KL_FLOOR)),
        rtol=1e-6,
    )
    path = tmp_path / "bank.npz"
    bank.save(path)
    loaded = B.load_bank(path)
    for name in ("kernels", "log_kernels", "state_mask", "kinds", "epsilon", "contamination"):
        np.testing.assert_array_equal(
            np.asarray(getattr(loaded, name)), np.asarray(getattr(bank, name))
        )
    assert loaded.floor == bank.floor
    np.savez(tmp_path / "other.npz", x=np.zeros(3))
    with pytest.raises(ValueError, match="not a profile bank"):
        B.load_bank(tmp_path / "other.npz")
    padded = B.pad_profiles(bank, 4)
    assert padded.n_profiles == 12
    assert list(np.asarray(padded.kinds)[-3:]) == [B.PADDING] * 3


def test_empirical_kernels_are_deterministic_and_converge() -> None:
    rng = np.random.default_rng(3)
    true = random_kernels(rng, (2, 1, 2, 3), zero_frac=0.0)
    mask = np.ones((1, 2), bool)
    n = 4000
    level = np.zeros((n, 1), np.int32)
    state = (np.arange(n) % 2).reshape(n, 1).astype(np.int32)
    valid = np.ones((n, 1), bool)
    key = jax.random.PRNGKey(7)
    est = B.empirical_kernels(key, true, level, state, valid, mask, prior=1.0)
    again = B.empirical_kernels(key, true, level, state, valid, mask, prior=1.0)
    np.testing.assert_array_equal(np.asarray(est), np.asarray(again))
    np.testing.assert_allclose(np.asarray(est), true, atol=0.05)


# --------------------------------------------------------------------------- divergences


@SETTINGS
@given(
    seed=st.integers(0, 2**31 - 1),
    shape=SHAPES,
    counts=COUNTS,
    metric=st.sampled_from(D.METRICS),
    weighted=st.booleans(),
)
def test_divergences_match_numpy(
    seed: int, shape: tuple[int, int, int], counts: tuple[int, int], metric: str, weighted: bool
) -> None:
    p, j = counts
    rng = np.random.default_rng(seed)
    bank = make_test_bank(rng, p, shape)
    agents = random_kernels(rng, (j, *shape))
    vis = None
    if weighted:
        vis = rng.random((j, *shape[:2])).astype(np.float32)
        vis[rng.random(vis.shape) < 0.3] = 0.0  # unvisited states
    mask = np.asarray(bank.state_mask)
    # garbage on masked states must not leak into any score
    agents_dirty = agents.copy()
    agents_dirty[:, ~mask] = np.nan
    ref_pl, ref_total = ref_divergences(metric, np.asarray(bank.kernels), agents, mask, vis)
    got = D.divergences(bank, agents_dirty, vis, metric)
    np.testing.assert_allclose(np.asarray(got.per_level), ref_pl, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(np.asarray(got.total), ref_total, rtol=RTOL, atol=ATOL)
    got_total = D.divergence_total(bank, agents_dirty, vis, metric)
    np.testing.assert_allclose(np.asarray(got_total), ref_total, rtol=RTOL, atol=ATOL)
    assert np.isfinite(np.asarray(got.per_level)).all()


def test_kl_total_fast_path_edge_cases_match_numpy() -> None:
    """The flat KL pass (value-guarded log, its own self-term reduction) against NumPy.

    Any garbage on masked states (NaN, +-inf, negative, > 1), exact zeros and tiny
    probabilities on valid states, an agent with no visitation mass at all.
    """
    rng = np.random.default_rng(7)
    shape, p, j = (3, 7, 4), 5, 4
    bank = make_test_bank(rng, p, shape)
    mask = np.asarray(bank.state_mask)
    agents = random_kernels(rng, (j, *shape), zero_frac=0.4)
    agents[2, mask, 0] = 1e-30  # tiny but positive: a finite log, not a guarded zero
    agents[2] /= agents[2].sum(-1, keepdims=True)
    vis = rng.random((j, *shape[:2])).astype(np.float32)
    vis[3] = 0.0  # agent 3 was never seen anywhere: divergence 0 from every profile
    dirty = agents.copy()
    garbage = np.array([np.nan, np.inf, -np.inf, -1.0, 7.0], np.float32)
    dirty[:, ~mask] = garbage[rng.integers(len(garbage), size=dirty[:, ~mask].shape)]
    _, ref_total = ref_divergences("kl", np.asarray(bank.kernels), agents, mask, vis)
    got = np.asarray(D.divergence_total(bank, dirty, vis, "kl"))
    np.testing.assert_allclose(got, ref_total, rtol=RTOL, atol=ATOL)
    assert np.all(got[3] == 0.0)
    sel = AL.select_alpha(bank, np.linspace(0, 1, j), dirty, np.arange(j, dtype=np.float32), vis)
    np.testing.assert_allclose(np.asarray(sel.divergence), ref_total, rtol=RTOL, atol=ATOL)


def test_kl_total_never_materialises_pairwise_arrays() -> None:
    """Scratch memory of the compiled KL pass stays agent-sized, far below [J, P, L, S]."""
    rng = np.random.default_rng(3)
    shape, p, j = (4, 64, 4), 32, 8
    bank = make_test_bank(rng, p, shape)
    agents = jnp.asarray(random_kernels(rng, (j, *shape)))
    vis = jnp.ones((j, *shape[:2]), jnp.float32)
    compiled = D._total_jit.lower(bank, agents, vis, metric="kl").compile()
    stats = compiled.memory_analysis()
    if stats is None:
        pytest.skip("this backend reports no memory analysis")
    pairwise_bytes = j * p * shape[0] * shape[1] * 4
    assert stats.temp_size_in_bytes < pairwise_bytes
    assert stats.temp_size_in_bytes <= 4 * agents.nbytes


def test_kl_floor_bounds_zero_probability_actions() -> None:
    """A profile with a zero where the agent has mass costs -log(floor), not inf."""
    profile = np.array([[[[1.0, 0.0]]]], np.float32)  # P=1, L=1, S=1, A=2
    agent = np.array([[[[0.5, 0.5]]]], np.float32)
    bank = B.make_bank(profile, np.ones((1, 1), bool), [B.HUMAN])
    kl = float(D.divergence_total(bank, agent)[0, 0])
    expect = 0.5 * math.log(0.5) + 0.5 * (math.log(0.5) - math.log(B.KL_FLOOR))
    assert kl == pytest.approx(expect, rel=1e-5)
    js = float(D.divergence_total(bank, agent, metric="js")[0, 0])
    assert 0.0 < js <= math.log(2.0)
    tv = float(D.divergence_total(bank, agent, metric="tv")[0, 0])
    assert tv == pytest.approx(0.5)


def test_divergence_input_errors_name_the_argument() -> None:
    bank = make_test_bank(np.random.default_rng(0), 2, (2, 3, 4))
    with pytest.raises(ValueError, match="agents must have shape"):
        D.divergences(bank, np.zeros((1, 2, 3, 5), np.float32))
    with pytest.raises(ValueError, match="visitation must have shape"):
        D.divergences(bank, np.zeros((1, 2, 3, 4), np.float32), np.ones((1, 2, 2)))
    with pytest.raises(ValueError, match="unknown divergence metric 'hellinger'"):
        D.divergences(bank, np.zeros((1, 2, 3, 4), np.float32), metric="hellinger")


# --------------------------------------------------------------------------- selection


def ref_selection(div: np.ndarray, in_set: np.ndarray, returns: np.ndarray, lam: float) -> dict:
    span = returns.max() - returns.min()
    rn = (returns - returns.min()) / span if span > 0 else np.zeros_like(returns)
    scores = rn[:, None] - lam * div
    masked = np.where(in_set[None], div, -np.inf)
    worst = masked.max(1)
    robust = rn - lam * worst
    return {
        "choice": int(np.argmax(robust)),
        "worst_profile": masked.argmax(1),
        "worst": worst,
        "robust": robust,
        "scores": scores,
    }


@SETTINGS
@given(
    seed=st.integers(0, 2**31 - 1),
    shape=SHAPES,
    counts=COUNTS,
    metric=st.sampled_from(D.METRICS),
    lam=st.sampled_from([0.0, 0.5, 2.0]),
    flat_returns=st.booleans(),
)
def test_select_alpha_matches_numpy(
    seed: int,
    shape: tuple[int, int, int],
    counts: tuple[int, int],
    metric: str,
    lam: float,
    flat_returns: bool,
) -> None:
    p, j = counts
    rng = np.random.default_rng(seed)
    bank = make_test_bank(rng, p, shape)
    agents = random_kernels(rng, (j, *shape))
    alphas = np.linspace(0.0, 1.0, j).astype(np.float32)
    returns = np.ones(j, np.float32) if flat_returns else rng.normal(size=j).astype(np.float32)
    vis = rng.random((j, *shape[:2])).astype(np.float32)
    _, div = ref_divergences(
        metric, np.asarray(bank.kernels), agents, np.asarray(bank.state_mask), vis
    )
    in_set = np.isin(np.asarray(bank.kinds), [B.HUMAN, B.CONTAMINATION])
    ref = ref_selection(div, in_set, returns.astype(np.float64), lam)
    got = AL.select_alpha(bank, alphas, agents, returns, vis, lam=lam, metric=metric)
    np.testing.assert_array_equal(np.asarray(got.in_set), in_set)
    np.testing.assert_allclose(np.asarray(got.divergence), div, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(np.asarray(got.score_matrix), ref["scores"], rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(np.asarray(got.worst_divergence), ref["worst"], rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(np.asarray(got.robust_score), ref["robust"], rtol=RTOL, atol=ATOL)
    # indices: equal, or tied in value within tolerance
    idx = np.asarray(got.worst_profile)
    for c in range(j):
        assert div[c, idx[c]] == pytest.approx(div[c, ref["worst_profile"][c]], rel=RTOL, abs=ATOL)
        assert in_set[idx[c]]
    choice = int(got.choice)
    assert ref["robust"][choice] == pytest.approx(ref["robust"].max(), rel=RTOL, abs=ATOL)
    assert float(got.alpha) == pytest.approx(alphas[choice])


def test_select_alpha_prefers_robust_candidate() -> None:
    """Best return but far from one contaminated human loses to a slightly worse, safe one."""
    shape = (1, 2, 2)
    human = np.array([[[0.9, 0.1], [0.8, 0.2]]], np.float32)
    bank = B.build_bank(
        human, np.ones(shape[:2], bool), key=jax.random.PRNGKey(0), epsilons=(0.2,), n_biased=1
    )
    greedy = np.array([[[0.0, 1.0], [0.0, 1.0]]], np.float32)
    humanlike = human.copy()
    agents = np.stack([greedy, humanlike])
    got = AL.select_alpha(bank, [0.0, 0.8], agents, [1.0, 0.9], lam=1.0)
    assert int(got.choice) == 1
    assert float(got.alpha) == pytest.approx(0.8)
    with pytest.raises(ValueError, match="robust set is empty"):
        AL.select_alpha(
            bank, [0.0, 0.8], agents, [1.0, 0.9], in_set=np.zeros(bank.n_profiles, bool)
        )
    with pytest.raises(ValueError, match="returns must have one value per agent"):
        AL.select_alpha(bank, [0.0, 0.8], agents, [1.0])


@settings(max_examples=60, deadline=None)
@given(
    alpha=st.floats(0.0, 1.0),
    worst=st.floats(0.0, 50.0),
    delta=st.floats(0.0, 5.0),
    lr=st.floats(0.01, 5.0),
)
def test_dual_update_matches_formula(alpha: float, worst: float, delta: float, lr: float) -> None:
    a = min(max(alpha, AL.ALPHA_MIN), AL.ALPHA_MAX)
    logit = math.log(a / (1 - a)) + lr * (worst - delta)
    expect = min(
        max(1 / (1 + math.exp(-logit)) if logit > -700 else 0.0, AL.ALPHA_MIN), AL.ALPHA_MAX
    )
    new = AL.dual_update(alpha, worst, delta, lr)
    assert new == pytest.approx(expect, rel=1e-9, abs=1e-12)
    assert AL.ALPHA_MIN <= new <= AL.ALPHA_MAX
    # the direction moves toward the constraint: violated -> more human weight
    if worst > delta:
        assert new >= a - 1e-12
    if worst < delta:
        assert new <= a + 1e-12


# --------------------------------------------------------------------------- compilation


class _CompileCounter:
    EVENT = "/jax/core/compile/backend_compile_duration"

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, event: str, duration: float, **kwargs: object) -> None:
        if event == self.EVENT:
            self.count += 1


def test_no_recompilation_over_100_calls_with_new_data() -> None:
    from jax import monitoring

    from engine.jax_profiles.online import worst_case

    rng = np.random.default_rng(0)
    shape, p, j = (3, 5, 4), 6, 3
    banks = [make_test_bank(rng, p, shape) for _ in range(2)]

    def call(i: int) -> None:
        bank = banks[i % 2]
        agents = random_kernels(rng, (j, *shape))
        vis = rng.random((j, *shape[:2])).astype(np.float32)
        returns = rng.normal(size=j).astype(np.float32)
        alphas = rng.random(j).astype(np.float32)
        jax.block_until_ready(D.divergences(bank, agents, vis, "kl"))
        jax.block_until_ready(D.divergence_total(bank, agents, vis, "js"))
        sel = AL.select_alpha(bank, alphas, agents, returns, vis, lam=float(rng.random()))
        jax.block_until_ready(sel)
        in_set = AL.robust_set(bank)
        jax.block_until_ready(
            worst_case(bank, jnp.asarray(agents), jnp.asarray(vis), in_set, metric="kl")
        )

    call(0)  # compile everything once
    call(1)
    sizes = (
        D._divergences_jit._cache_size(),
        D._total_jit._cache_size(),
        AL._selection_jit._cache_size(),
        worst_case._cache_size(),
    )
    counter = _CompileCounter()
    monitoring.register_event_duration_secs_listener(counter)
    try:
        for i in range(100):
            call(i)
    finally:
        monitoring.unregister_event_duration_listener(counter)
    assert counter.count == 0, f"{counter.count} backend compilations during 100 calls"
    assert sizes == (
        D._divergences_jit._cache_size(),
        D._total_jit._cache_size(),
        AL._selection_jit._cache_size(),
        worst_case._cache_size(),
    )


def test_compile_counter_sees_a_new_shape() -> None:
    """Guard for the test above: the listener does count real compilations."""
    from jax import monitoring

    counter = _CompileCounter()
    monitoring.register_event_duration_secs_listener(counter)
    try:
        jax.jit(lambda x: x * 3 + 1)(jnp.ones(17)).block_until_ready()
    finally:
        monitoring.unregister_event_duration_listener(counter)
    assert counter.count >= 1


# --------------------------------------------------------------------------- PRNG


def test_step_key_is_fold_in_of_process_then_step() -> None:
    key = jax.random.PRNGKey(42)
    for proc in range(3):
        for step in (0, 1, 1000):
            expect = jax.random.fold_in(jax.random.fold_in(key, proc), step)
            np.testing.assert_array_equal(np.asarray(step_key(key, proc, step)), np.asarray(expect))
    samples = {
        (proc, step): np.asarray(jax.random.uniform(step_key(key, proc, step), (8,)))
        for proc in range(2)
        for step in range(3)
    }
    flat = list(samples.values())
    assert all(not np.array_equal(a, b) for i, a in enumerate(flat) for b in flat[i + 1 :])
