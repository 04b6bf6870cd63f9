"""AutoAlphaCallback: the dual alpha rule inside real SB3 (PPO) training runs.

The first tests use a synthetic level family and a tiny env defined here (no
dependency on engine.envs); the last ones use the real behaviour maze and
``engine.train --alpha auto`` when those modules exist.
"""

from __future__ import annotations

import csv
import itertools
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from stable_baselines3 import PPO
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.logger import configure
from stable_baselines3.common.vec_env import DummyVecEnv

from engine.jax_profiles import alpha as AL
from engine.jax_profiles.online import AutoAlphaCallback

# All JAX tests share one xdist worker: JAX is imported and common programs compile once.
pytestmark = pytest.mark.xdist_group("jax")

N_STEPS = 32


@dataclass(frozen=True)
class SyntheticFamily:
    n_levels: int
    n_states: int
    n_actions: int
    obs_dim: int
    state_mask: np.ndarray
    observations: np.ndarray
    human_kernel: np.ndarray


def synthetic_family(seed: int = 0) -> SyntheticFamily:
    rng = np.random.default_rng(seed)
    n_levels, n_states, n_actions = 2, 4, 3
    mask = np.ones((n_levels, n_states), bool)
    mask[1, 3] = False  # a padded state
    obs = np.zeros((n_levels, n_states, n_levels * n_states), np.float32)
    for lv in range(n_levels):
        for s in range(n_states):
            obs[lv, s, lv * n_states + s] = 1.0
    logits = 3.0 * rng.standard_normal((n_levels, n_states, n_actions))
    kernel = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    kernel[~mask] = 1.0 / n_actions
    return SyntheticFamily(
        n_levels, n_states, n_actions, n_levels * n_states, mask, obs, kernel.astype(np.float32)
    )


class SyntheticEnv(gym.Env[np.ndarray, np.int64]):
    """Random walk over the family's states; reward mixes a task term and log pi_human."""

    def __init__(self, family: SyntheticFamily) -> None:
        self.family = family
        self.alpha = 0.0
        self.observation_space = spaces.Box(0.0, 1.0, (family.obs_dim,), np.float32)
        self.action_space = spaces.Discrete(family.n_actions)
        self.level = self.state = self.t = 0

    def set_alpha(self, alpha: float) -> None:
        if not 0.0 <= alpha <= 1.0:
            raise ValueError(f"alpha must be in [0, 1], got {alpha}")
        self.alpha = float(alpha)

    def _obs(self) -> np.ndarray:
        return self.family.observations[self.level, self.state].copy()

    def _place(self) -> None:
        self.level = int(self.np_random.integers(self.family.n_levels))
        self.state = int(self.np_random.choice(np.flatnonzero(self.family.state_mask[self.level])))

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self._place()
        self.t = 0
        return self._obs(), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        a = int(action)
        task = 1.0 if a == 0 else 0.0
        human = math.log(max(float(self.family.human_kernel[self.level, self.state, a]), 1e-3))
        reward = (1.0 - self.alpha) * task + self.alpha * human
        self.t += 1
        self._place()
        return self._obs(), reward, False, self.t >= 8, {}


def _train(
    family: Any, env_fn: Any, callback: AutoAlphaCallback, rollouts: int, log_dir: Path
) -> PPO:
    venv = DummyVecEnv([env_fn])
    model = PPO(
        "MlpPolicy", venv, n_steps=N_STEPS, batch_size=N_STEPS, n_epochs=1, seed=0, device="cpu"
    )
    model.set_logger(configure(str(log_dir), ["csv"]))
    model.learn(N_STEPS * rollouts, callback=callback)
    return model


def _csv_column(log_dir: Path, key: str) -> list[float]:
    with open(log_dir / "progress.csv") as f:
        return [float(row[key]) for row in csv.DictReader(f) if row.get(key)]


def _ref_worst_kl(cb: AutoAlphaCallback, kernel: np.ndarray, visitation: np.ndarray) -> float:
    """NumPy worst case over the robust set (weights: visitation on valid states)."""
    bank = cb.bank
    assert bank is not None
    mask = np.asarray(bank.state_mask)
    w = np.where(mask, visitation, 0.0).astype(np.float64)
    w /= w.sum()
    q = kernel.astype(np.float64)
    logq = np.log(np.where(q > 0, q, 1.0))
    worst = -np.inf
    kinds = np.asarray(bank.kinds)
    for p, k in enumerate(np.asarray(bank.kernels, np.float64)):
        if kinds[p] not in (0, 2):
            continue
        d = (w[..., None] * q * (logq - np.log(np.maximum(k, bank.floor)))).sum()
        worst = max(worst, float(d))
    return worst


def test_violated_constraint_raises_alpha(tmp_path: Path) -> None:
    fam = synthetic_family()
    cb = AutoAlphaCallback(fam, alpha0=0.3, delta=0.0, lr=0.5, seed=1)
    model = _train(fam, lambda: SyntheticEnv(fam), cb, rollouts=3, log_dir=tmp_path)
    alphas = [0.3] + [a for _, _, a in cb.history]
    assert len(cb.history) == 3
    assert all(b > a for a, b in itertools.pairwise(alphas)), alphas
    assert model.get_env().get_attr("alpha")[0] == pytest.approx(cb.alpha)
    # logged every rollout
    assert _csv_column(tmp_path, "behaviour/alpha") == pytest.approx(alphas[1:])
    worst_logged = _csv_column(tmp_path, "behaviour/worst_divergence")
    assert worst_logged == pytest.approx([w for _, w, _ in cb.history])
    # the dual rule, exactly
    for (_, worst, new), old in zip(cb.history, alphas, strict=False):
        assert new == pytest.approx(AL.dual_update(old, worst, 0.0, 0.5))
    # the score is the worst-case KL of the policy kernel (NumPy reference)
    kernel = cb.policy_kernel()
    assert kernel.shape == fam.human_kernel.shape
    np.testing.assert_allclose(kernel.sum(-1), 1.0, atol=1e-5)
    vis = np.asarray(fam.state_mask, np.float32)
    got, _ = cb._score(kernel, vis)
    assert got == pytest.approx(_ref_worst_kl(cb, kernel, vis), rel=1e-4, abs=1e-5)


def test_slack_constraint_lowers_alpha(tmp_path: Path) -> None:
    fam = synthetic_family()
    cb = AutoAlphaCallback(fam, alpha0=0.7, delta=50.0, lr=0.05, seed=1)
    model = _train(fam, lambda: SyntheticEnv(fam), cb, rollouts=3, log_dir=tmp_path)
    alphas = [0.7] + [a for _, _, a in cb.history]
    assert all(b < a for a, b in itertools.pairwise(alphas)), alphas
    assert model.get_env().get_attr("alpha")[0] == pytest.approx(cb.alpha)


def test_rollout_visitation_counts_the_rollout_states(tmp_path: Path) -> None:
    fam = synthetic_family()
    cb = AutoAlphaCallback(fam, delta=0.1)
    model = _train(fam, lambda: SyntheticEnv(fam), cb, rollouts=1, log_dir=tmp_path)
    vis = cb.rollout_visitation()
    assert vis.sum() == N_STEPS
    assert (vis[~fam.state_mask] == 0).all()
    assert model.rollout_buffer.observations.shape[0] == N_STEPS


def test_bad_arguments_are_rejected() -> None:
    fam = synthetic_family()
    with pytest.raises(ValueError, match="alpha0"):
        AutoAlphaCallback(fam, alpha0=1.5)
    with pytest.raises(ValueError, match="delta"):
        AutoAlphaCallback(fam, delta=-1.0)
    with pytest.raises(ValueError, match="lr"):
        AutoAlphaCallback(fam, lr=0.0)
    with pytest.raises(ValueError, match="metric"):
        AutoAlphaCallback(fam, metric="hellinger")


# --------------------------------------------------------------------------- real envs


def _assert_moves_toward_constraint(
    history: list[tuple[float, float, float]], alpha0: float
) -> None:
    """Each update moves alpha in the direction of sign(worst - delta) (violated -> up)."""
    prev = alpha0
    for worst, delta, new in history:
        if worst > delta:
            assert new > prev or new == pytest.approx(AL.ALPHA_MAX), (worst, delta, prev, new)
        elif worst < delta:
            assert new < prev or new == pytest.approx(AL.ALPHA_MIN), (worst, delta, prev, new)
        prev = new


def test_auto_alpha_on_behaviour_maze(tmp_path: Path) -> None:
    envs = pytest.importorskip("engine.envs")
    fam = envs.make_family("maze", n_levels=2, size=4, seed=0)
    cb = AutoAlphaCallback(fam, alpha0=0.5, seed=0)  # delta calibrated on the human kernel
    _train(fam, lambda: envs.BehaviourEnv(fam, alpha=0.0), cb, rollouts=4, log_dir=tmp_path)
    assert cb.delta is not None and cb.delta > 0
    assert len(cb.history) == 4
    _assert_moves_toward_constraint([(w, cb.delta, a) for _, w, a in cb.history], 0.5)


class _Recorder(BaseCallback):
    """Reads what the auto-alpha callback logged and what the env received, per rollout."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[dict[str, float]] = []

    def _on_step(self) -> bool:
        return True

    def _on_rollout_end(self) -> None:
        values = self.logger.name_to_value
        self.rows.append(
            {
                "alpha": float(values["behaviour/alpha"]),
                "worst": float(values["behaviour/worst_divergence"]),
                "delta": float(values["behaviour/delta"]),
                "env_alpha": float(self.training_env.get_attr("alpha")[0]),
            }
        )


def test_engine_train_alpha_auto_moves_alpha_toward_constraint(tmp_path: Path) -> None:
    train = pytest.importorskip("engine.train")
    pytest.importorskip("engine.envs")
    args = train.build_parser(raise_errors=True).parse_args(
        [
            "--alpha", "auto",
            "--total-timesteps", "256",
            "--storage", str(tmp_path / "runs"),
            "--wandb", "disabled",
            "--n-levels", "2",
            "--maze-size", "4",
            "--eval-episodes", "0",
            "--checkpoint-every", "4096",
            "--log-every", "64",
            "--hparams", '{"n_steps": 64, "batch_size": 64, "n_epochs": 1}',
        ]
    )  # fmt: skip
    cfg = train.config_from_args(args)
    recorder = _Recorder()
    result = train.run_training(cfg, extra_callbacks=[recorder])
    assert result.num_timesteps == 256
    rows = recorder.rows
    assert len(rows) == 4
    assert all(r["env_alpha"] == pytest.approx(r["alpha"]) for r in rows)
    _assert_moves_toward_constraint([(r["worst"], r["delta"], r["alpha"]) for r in rows], 0.5)
    assert rows[-1]["alpha"] != pytest.approx(0.5)
    assert result.metrics["behaviour/alpha"] == pytest.approx(rows[-1]["alpha"])
