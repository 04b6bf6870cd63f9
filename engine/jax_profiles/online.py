"""Online alpha for SB3 training (``python -m engine.train --alpha auto``).

``AutoAlphaCallback`` implements the dual rule of ``alpha.py`` once per rollout:

1. the current policy's kernel ``q(a | l, s)`` is evaluated on every tabulated
   observation of the level family (``family.observations [L, S, obs_dim]``) in one
   forward pass;
2. it is scored against the profile bank (built once from ``family.human_kernel`` plus
   its uniform / biased / adversarial contaminations, placed on device once) in one
   jitted call; the worst case over the robust set (human + contaminations) is
   ``D_worst = max_p D(q, k_p)``, aggregated with the agent's state visitation in the
   rollout just collected (uniform over valid states when the rollout observations
   cannot be matched to the table, e.g. under observation normalisation);
3. ``logit(alpha) += lr * (D_worst - delta)``, clipped to ``[ALPHA_MIN, ALPHA_MAX]``;
4. the env gets the new alpha (``env_method("set_alpha", alpha)``) and
   ``behaviour/alpha``, ``behaviour/worst_divergence`` and ``behaviour/delta`` are logged.

The bank build and the scoring pass compile through the persistent compilation cache
(``compile_cache.py``), so a trainer restarted after a preemption loads them.

``delta=None`` sets the constraint to the worst-case divergence of the human kernel
itself: "be as close to every plausible human as the reference human is" -- a level
the human profile attains, so the constraint is feasible.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from stable_baselines3.common.callbacks import BaseCallback

from engine.jax_profiles.alpha import ALPHA_MAX, ALPHA_MIN, dual_update, masked_worst, robust_set
from engine.jax_profiles.bank import ProfileBank, build_bank
from engine.jax_profiles.compile_cache import compilation_cache
from engine.jax_profiles.divergence import METRICS, total_divergences
from engine.jax_profiles.program_cache import CachedProgram

__all__ = ["AutoAlphaCallback", "worst_case"]


def _worst_case(
    bank: ProfileBank, agents: jax.Array, visitation: jax.Array, in_set: jax.Array, metric: str
) -> tuple[jax.Array, jax.Array]:
    return masked_worst(total_divergences(bank, agents, visitation, metric), in_set)


# kept on disk compiled inside a compilation_cache() block (program_cache.py)
worst_case = CachedProgram(_worst_case, static_argnames=("metric",))
worst_case.__doc__ = "Jitted ``(max_{p in R} D[p, j], argmax)`` for agents ``[J, L, S, A]``."


class AutoAlphaCallback(BaseCallback):
    """Dual-variable alpha: keep the worst-case divergence from the human set near ``delta``."""

    def __init__(
        self,
        family: Any,
        *,
        alpha0: float = 0.5,
        delta: float | None = None,
        lr: float = 1.0,
        seed: int = 0,
        verbose: int = 0,
        metric: str = "kl",
        epsilons: Sequence[float] = (0.05, 0.1, 0.2, 0.4),
        n_biased: int = 2,
    ) -> None:
        super().__init__(verbose)
        if not 0.0 <= alpha0 <= 1.0 or math.isnan(alpha0):
            raise ValueError(f"alpha0 must be in [0, 1], got {alpha0}")
        if delta is not None and not (delta >= 0.0 and math.isfinite(delta)):
            raise ValueError(
                f"delta must be a finite value >= 0 (or None to calibrate), got {delta}"
            )
        if not (lr > 0.0 and math.isfinite(lr)):
            raise ValueError(f"lr must be a finite value > 0, got {lr}")
        if metric not in METRICS:
            raise ValueError(f"metric must be one of {', '.join(METRICS)}, got {metric!r}")
        self.family = family
        self.alpha = min(max(float(alpha0), ALPHA_MIN), ALPHA_MAX)
        self.delta = delta
        self.lr = float(lr)
        self.seed = int(seed)
        self.metric = metric
        self.epsilons = tuple(epsilons)
        self.n_biased = int(n_biased)
        self.worst_divergence = float("nan")
        self.worst_profile = -1
        self.history: list[tuple[int, float, float]] = []  # (timesteps, worst, new alpha)
        self.bank: ProfileBank | None = None
        self._in_set: jax.Array | None = None
        self._obs_index: dict[bytes, int] = {}

    # ---------------------------------------------------------------- setup

    def _init_callback(self) -> None:
        # engine.train calls learn() once per checkpoint chunk; the bank (and delta) only
        # depend on the family, so build them once.
        if self.bank is not None:
            return
        # the bank build and the scoring pass compile here, through the persistent cache:
        # a restarted trainer (preemption) loads them instead of compiling again
        with compilation_cache():
            self._build()

    def _build(self) -> None:
        fam = self.family
        shape = (fam.n_levels, fam.n_states)
        if np.shape(fam.state_mask) != shape or np.shape(fam.human_kernel)[:2] != shape:
            raise ValueError(
                "family.state_mask / family.human_kernel do not match (n_levels, n_states) "
                f"= {shape}"
            )
        self.bank = build_bank(
            np.asarray(fam.human_kernel, np.float32),
            np.asarray(fam.state_mask, bool),
            key=jax.random.PRNGKey(self.seed),
            epsilons=self.epsilons,
            n_biased=self.n_biased,
            device=jax.devices()[0],
        )
        self._in_set = robust_set(self.bank)
        obs = np.asarray(fam.observations, np.float32)
        flat = obs.reshape(-1, obs.shape[-1])
        valid = np.asarray(fam.state_mask, bool).reshape(-1)
        self._obs_index = {flat[i].tobytes(): int(i) for i in np.flatnonzero(valid)}
        # the human's own worst case: delta when not given, and the scoring compile either way
        human = jnp.asarray(fam.human_kernel, jnp.float32)[None]
        worst, _ = self._score(human, self._uniform_visitation())
        if self.delta is None:
            self.delta = worst
        if self.verbose:
            print(
                f"auto-alpha: bank of {self.bank.n_profiles} profiles, delta={self.delta:.4f}, "
                f"alpha0={self.alpha:.4f}"
            )

    def _on_training_start(self) -> None:
        self.training_env.env_method("set_alpha", self.alpha)

    def _on_step(self) -> bool:
        return True

    # ---------------------------------------------------------------- per rollout

    def _uniform_visitation(self) -> np.ndarray:
        return np.asarray(self.family.state_mask, np.float32)

    def _score(self, agent: Any, visitation: np.ndarray) -> tuple[float, int]:
        assert self.bank is not None and self._in_set is not None
        worst, idx = worst_case(
            self.bank,
            jnp.asarray(agent, jnp.float32).reshape(1, *self.bank.shape[1:]),
            jnp.asarray(visitation, jnp.float32)[None],
            self._in_set,
            metric=self.metric,
        )
        return float(worst[0]), int(idx[0])

    def policy_kernel(self) -> np.ndarray:
        """The policy's action probabilities on every (level, state): float32 ``[L, S, A]``."""
        import torch

        fam = self.family
        obs = np.asarray(fam.observations, np.float32).reshape(-1, fam.obs_dim)
        policy: Any = self.model.policy
        with torch.no_grad():
            obs_tensor, _ = policy.obs_to_tensor(obs)
            probs = policy.get_distribution(obs_tensor).distribution.probs
        return (
            probs.detach().cpu().numpy().astype(np.float32).reshape(fam.n_levels, fam.n_states, -1)
        )

    def rollout_visitation(self) -> np.ndarray:
        """State-visitation counts ``[L, S]`` of the last rollout (uniform if unmatched)."""
        buf = getattr(self.model, "rollout_buffer", None)
        obs = getattr(buf, "observations", None)
        counts = np.zeros(self.family.n_levels * self.family.n_states, np.float32)
        if isinstance(obs, np.ndarray) and obs.dtype == np.float32:
            for row in obs.reshape(-1, obs.shape[-1]):
                i = self._obs_index.get(row.tobytes())
                if i is not None:
                    counts[i] += 1.0
        if counts.sum() == 0:
            return self._uniform_visitation()
        return counts.reshape(self.family.n_levels, self.family.n_states)

    def _on_rollout_end(self) -> None:
        assert self.delta is not None
        worst, idx = self._score(self.policy_kernel(), self.rollout_visitation())
        self.worst_divergence, self.worst_profile = worst, idx
        self.alpha = dual_update(self.alpha, worst, self.delta, self.lr)
        self.training_env.env_method("set_alpha", self.alpha)
        self.history.append((int(self.num_timesteps), worst, self.alpha))
        self.logger.record("behaviour/alpha", self.alpha)
        self.logger.record("behaviour/worst_divergence", worst)
        self.logger.record("behaviour/delta", float(self.delta))
        self.logger.record("behaviour/worst_profile", idx)
        if self.verbose >= 2:
            print(f"auto-alpha: t={self.num_timesteps} worst={worst:.4f} alpha={self.alpha:.4f}")
