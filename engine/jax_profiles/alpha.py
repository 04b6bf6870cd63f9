"""Robust selection of the human-likeness weight alpha, offline and online.

The training reward mixes task reward and human-likeness,
``r = (1 - alpha) r_task + alpha h``. Which alpha to use is decided against a
*robust set* R of profiles: the human profiles and their contaminations (the
plausible versions of "the human" given noisy, contaminated data). Agent and
padding profiles are not in R unless asked for.

Offline: pick one of C candidate alphas
    Each candidate c was trained with ``alpha_c``, has kernel ``q_c`` and task return
    ``R_c``. With divergences ``D[c, p]`` (``divergence.py``) and the returns
    min-max normalised to ``Rn_c = (R_c - min R) / (max R - min R)`` (all 0 if equal),

        score[c, p]  = Rn_c - lambda * D[c, p]                  (the score matrix)
        worst(c)     = argmax_{p in R} D[c, p]                  (worst-case profile)
        robust(c)    = min_{p in R} score[c, p] = Rn_c - lambda * max_{p in R} D[c, p]
        choice       = argmax_c robust(c)                       (first on ties)

    i.e. the alpha whose worst case over the contamination set is best. All C x P
    scores come from one jit-compiled pass.

Online: alpha as a dual variable (``dual_update``)
    The constrained problem ``max_pi E[r_task]  s.t.  max_{p in R} D(pi, p) <= delta``
    has Lagrangian ``E[r_task] - mu (D_worst(pi) - delta)`` with ``mu >= 0``. The
    training reward ``(1 - alpha) r_task + alpha h`` is proportional to
    ``r_task + mu h`` for ``mu = alpha / (1 - alpha)``, so alpha is the dual variable
    in disguise. Each rollout takes a dual (sub)gradient step on ``log mu``
    (mirror descent, which keeps ``mu > 0`` without projection):

        logit(alpha) <- logit(alpha) + lr * (D_worst - delta)
        alpha        <- clip(sigmoid(logit(alpha)), alpha_min, alpha_max)

    Worst-case divergence above ``delta`` raises alpha (more weight on human-likeness);
    below ``delta`` it lowers alpha (more task reward), so alpha moves until the
    constraint is active or alpha hits a bound.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from engine.jax_profiles.bank import CONTAMINATION, HUMAN, ProfileBank
from engine.jax_profiles.divergence import total_divergences, validate_agents
from engine.jax_profiles.program_cache import CachedProgram

__all__ = [
    "ALPHA_MAX",
    "ALPHA_MIN",
    "AlphaSelection",
    "dual_update",
    "finish_selection",
    "masked_worst",
    "robust_set",
    "select_alpha",
    "selection_pass",
]

ALPHA_MIN = 1e-3
ALPHA_MAX = 1.0 - 1e-3


class AlphaSelection(NamedTuple):
    choice: jax.Array  # int32 []: index of the chosen candidate
    alpha: jax.Array  # float32 []: its alpha
    robust_score: jax.Array  # float32 [C]
    worst_profile: jax.Array  # int32 [C]: argmax_{p in R} D[c, p]
    worst_divergence: jax.Array  # float32 [C]
    normalised_return: jax.Array  # float32 [C]
    score_matrix: jax.Array  # float32 [C, P]: Rn_c - lambda * D[c, p] (all profiles)
    divergence: jax.Array  # float32 [C, P]
    in_set: jax.Array  # bool [P]: the robust set R


def _robust_set_program(bank_kinds: jax.Array, kinds: tuple[int, ...]) -> jax.Array:
    return jnp.isin(bank_kinds, jnp.asarray(kinds, jnp.int32))


# one program (kept compiled on disk, program_cache.py), not isin's eager ops one by one
_robust_set = CachedProgram(_robust_set_program, static_argnames=("kinds",))


def robust_set(bank: ProfileBank, kinds: Sequence[int] = (HUMAN, CONTAMINATION)) -> jax.Array:
    """Boolean ``[P]`` mask of profiles whose kind is in ``kinds``."""
    return _robust_set(bank.kinds, kinds=tuple(int(k) for k in kinds))  # type: ignore[no-any-return]


def masked_worst(d_pc: jax.Array, in_set: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``(max_{p in R} D, argmax)`` over the profile axis of ``d_pc [P, C]``."""
    masked = jnp.where(in_set[:, None], d_pc, -jnp.inf)
    return masked.max(0), jnp.argmax(masked, axis=0).astype(jnp.int32)


def _normalise(returns: jax.Array) -> jax.Array:
    lo, hi = returns.min(), returns.max()
    span = hi - lo
    return jnp.where(span > 0, (returns - lo) / jnp.where(span > 0, span, 1.0), 0.0)


def finish_selection(
    alphas: jax.Array,
    returns: jax.Array,
    lam: jax.Array,
    d_pc: jax.Array,
    in_set: jax.Array,
    worst: jax.Array,
    worst_idx: jax.Array,
) -> AlphaSelection:
    """Scores and choice from divergences ``[P, C]`` and their (possibly all-reduced) worst case."""
    rn = _normalise(returns.astype(jnp.float32))
    robust = rn - lam * worst
    choice = jnp.argmax(robust).astype(jnp.int32)
    d_cp = d_pc.T
    return AlphaSelection(
        choice=choice,
        alpha=alphas[choice],
        robust_score=robust,
        worst_profile=worst_idx,
        worst_divergence=worst,
        normalised_return=rn,
        score_matrix=rn[:, None] - lam * d_cp,
        divergence=d_cp,
        in_set=in_set,
    )


def selection_pass(
    bank: ProfileBank,
    alphas: jax.Array,
    agents: jax.Array,
    returns: jax.Array,
    visitation: jax.Array | None,
    in_set: jax.Array,
    lam: jax.Array,
    metric: str = "kl",
    impl: str = "auto",
    precision: str = "auto",
) -> AlphaSelection:
    """Pure scoring + selection pass (jit with ``metric``, ``impl``, ``precision`` static;
    see ``divergence.total_divergences``)."""
    d_pc = total_divergences(bank, agents, visitation, metric, impl, precision)
    worst, idx = masked_worst(d_pc, in_set)
    return finish_selection(alphas, returns, lam, d_pc, in_set, worst, idx)


# kept on disk compiled inside a compilation_cache() block (program_cache.py)
_selection_jit = CachedProgram(selection_pass, static_argnames=("metric", "impl", "precision"))


def _check_candidates(alphas: Any, returns: Any, n_agents: int) -> None:
    if np.shape(alphas) != (n_agents,):
        raise ValueError(
            f"alphas must have one value per agent kernel ({n_agents}), got {np.shape(alphas)}"
        )
    if np.shape(returns) != (n_agents,):
        raise ValueError(
            f"returns must have one value per agent kernel ({n_agents}), got {np.shape(returns)}"
        )


def select_alpha(
    bank: ProfileBank,
    alphas: Any,
    agents: Any,
    returns: Any,
    visitation: Any = None,
    *,
    lam: float = 1.0,
    metric: str = "kl",
    in_set: Any = None,
    impl: str = "auto",
    precision: str = "auto",
) -> AlphaSelection:
    """Pick the candidate alpha whose worst case over the robust set is best (see module doc)."""
    validate_agents(bank, agents, visitation)
    _check_candidates(alphas, returns, int(np.shape(agents)[0]))
    mask = robust_set(bank) if in_set is None else jnp.asarray(in_set, bool)
    if mask.shape != (bank.n_profiles,):
        raise ValueError(f"in_set must be a bool mask over the {bank.n_profiles} profiles")
    if not np.asarray(mask).any():  # on the host: the answer is needed there anyway
        raise ValueError("the robust set is empty: the bank has no human/contamination profiles")
    if lam < 0:
        raise ValueError(f"lam must be >= 0, got {lam}")
    v = None if visitation is None else jnp.asarray(visitation, jnp.float32)
    return _selection_jit(
        bank,
        jnp.asarray(alphas, jnp.float32),
        jnp.asarray(agents, jnp.float32),
        jnp.asarray(returns, jnp.float32),
        v,
        mask,
        np.float32(lam),  # not jnp.float32: that is an eager program of its own
        metric=metric,
        impl=impl,
        precision=precision,
    )


def dual_update(
    alpha: float,
    worst_divergence: float,
    delta: float,
    lr: float,
    alpha_min: float = ALPHA_MIN,
    alpha_max: float = ALPHA_MAX,
) -> float:
    """One dual step: ``logit(alpha) += lr * (worst_divergence - delta)``, then clip."""
    if not math.isfinite(worst_divergence):
        raise ValueError(f"worst_divergence must be finite, got {worst_divergence}")
    a = min(max(float(alpha), alpha_min), alpha_max)
    logit = math.log(a) - math.log1p(-a) + lr * (float(worst_divergence) - float(delta))
    # numerically stable sigmoid
    new = (
        1.0 / (1.0 + math.exp(-logit)) if logit >= 0 else math.exp(logit) / (1.0 + math.exp(logit))
    )
    return min(max(new, alpha_min), alpha_max)
