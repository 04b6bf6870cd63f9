"""SB3 building blocks with exact step accounting: models, envs, ``learn_exactly``, evaluation.

Exact totals
    SB3 collects whole rollouts (``n_steps * n_envs`` for PPO/A2C, ``train_freq`` steps for
    DQN), so a plain ``learn(N)`` overshoots. ``learn_exactly`` runs whole rollouts and then
    the remainder as one shorter rollout (the on-policy rollout buffer or DQN's
    ``train_freq`` is resized for that one rollout, then restored). Every collected step is
    trained on and ``num_timesteps`` lands exactly where asked.

Stopping at a step (preemption notice)
    ``StepGate`` is a callback that ends collection at the next environment step once asked
    to. SB3 has already counted that step when callbacks run but does not store it when a
    callback says stop, so the gate takes the count back: the model is left at the last
    stored step. ``train_partial_rollout`` then trains on the steps collected so far in the
    interrupted rollout (on-policy: a buffer of exactly those steps; DQN: the gradient steps
    the rollout would have ended with), so the invariant "every counted step is trained on"
    holds at the stop too. The training env is one step ahead of the model afterwards:
    checkpoint and end; a resumed run resets its envs as any resume does.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from stable_baselines3.common.callbacks import BaseCallback

from engine.trainconfig import ALGO_DEFAULTS, TrainConfig


def algo_class(algo: str) -> Any:
    from stable_baselines3 import A2C, DQN, PPO

    return {"ppo": PPO, "a2c": A2C, "dqn": DQN}[algo]


def alpha_value(cfg: TrainConfig) -> float | None:
    return float(cfg.alpha) if isinstance(cfg.alpha, float | int) else None


def make_env_fn(cfg: TrainConfig, alpha0: float | None) -> Callable[[], Any]:
    def thunk() -> Any:
        import gymnasium as gym
        from stable_baselines3.common.monitor import Monitor

        import engine.envs  # noqa: F401

        if cfg.is_behaviour_env:
            env = gym.make(
                cfg.env,
                alpha=alpha0 or 0.0,
                n_levels=cfg.n_levels,
                size=cfg.maze_size,
            )
        else:
            env = gym.make(cfg.env)
        return Monitor(env)

    return thunk


def make_vec_env(cfg: TrainConfig, alpha0: float | None) -> Any:
    from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv

    fns = [make_env_fn(cfg, alpha0) for _ in range(cfg.n_envs)]
    venv = SubprocVecEnv(fns) if cfg.vec_env == "subproc" and cfg.n_envs > 1 else DummyVecEnv(fns)
    venv.seed(cfg.seed)
    return venv


def fresh_model(cfg: TrainConfig, venv: Any) -> Any:
    cls = algo_class(cfg.algo)
    kwargs = {**ALGO_DEFAULTS[cfg.algo], **cfg.hparams}
    return cls("MlpPolicy", venv, seed=cfg.seed, device=cfg.device, verbose=0, **kwargs)


def _make_rollout_buffer(model: Any, n_steps: int) -> Any:
    return model.rollout_buffer_class(
        n_steps,
        model.observation_space,
        model.action_space,
        device=model.device,
        gamma=model.gamma,
        gae_lambda=model.gae_lambda,
        n_envs=model.n_envs,
        **model.rollout_buffer_kwargs,
    )


@contextlib.contextmanager
def _short_rollout(model: Any, vec_steps: int) -> Iterator[None]:
    """Temporarily make the next rollout exactly ``vec_steps`` long."""
    from stable_baselines3.common.on_policy_algorithm import OnPolicyAlgorithm
    from stable_baselines3.common.type_aliases import TrainFreq, TrainFrequencyUnit

    if isinstance(model, OnPolicyAlgorithm):
        saved = (model.n_steps, model.rollout_buffer)
        model.n_steps = vec_steps
        model.rollout_buffer = _make_rollout_buffer(model, vec_steps)
        try:
            yield
        finally:
            model.n_steps, model.rollout_buffer = saved
    else:
        saved_freq = model.train_freq
        model.train_freq = TrainFreq(vec_steps, TrainFrequencyUnit.STEP)
        try:
            yield
        finally:
            model.train_freq = saved_freq


class StepGate(BaseCallback):
    """Ends SB3's collection at the next env step once ``should_stop()`` is true.

    Put it first in the callback list. ``collected`` counts the vectorised steps stored in
    the current rollout; ``stopped`` says the gate ended training.
    """

    def __init__(self, should_stop: Callable[[], bool]) -> None:
        super().__init__(verbose=0)
        self.should_stop = should_stop
        self.stopped = False
        self.collected = 0

    def _on_rollout_start(self) -> None:
        self.collected = 0

    def _on_step(self) -> bool:
        if self.stopped or self.should_stop():
            if not self.stopped:
                # counted by SB3 before the callbacks, never stored once we say stop
                self.model.num_timesteps -= self.model.n_envs
                self.stopped = True
            return False
        self.collected += 1
        return True


def train_partial_rollout(model: Any, collected: int) -> None:
    """Train on the ``collected`` vectorised steps of a rollout the gate interrupted."""
    from stable_baselines3.common.on_policy_algorithm import OnPolicyAlgorithm

    if collected <= 0:
        return
    if not isinstance(model, OnPolicyAlgorithm):
        if model.num_timesteps > model.learning_starts:
            steps = model.gradient_steps if model.gradient_steps >= 0 else collected * model.n_envs
            if steps > 0:
                model.train(batch_size=model.batch_size, gradient_steps=steps)
        return
    import torch
    from stable_baselines3.common.utils import obs_as_tensor

    full = model.rollout_buffer
    if full.pos != collected:
        raise RuntimeError(f"rollout buffer holds {full.pos} steps, the gate counted {collected}")
    short = _make_rollout_buffer(model, collected)
    for name in ("observations", "actions", "rewards", "episode_starts", "values", "log_probs"):
        src, dst = getattr(full, name), getattr(short, name)
        if isinstance(src, dict):  # DictRolloutBuffer observations
            for key, value in src.items():
                dst[key][:] = value[:collected]
        else:
            dst[:] = src[:collected]
    short.pos, short.full = collected, True
    assert model._last_obs is not None  # set by every collected step
    with torch.no_grad():
        last_values = model.policy.predict_values(obs_as_tensor(model._last_obs, model.device))
    short.compute_returns_and_advantage(last_values=last_values, dones=model._last_episode_starts)
    model.rollout_buffer = short
    try:
        model._update_current_progress_remaining(model.num_timesteps, model._total_timesteps)
        model.train()
    finally:
        model.rollout_buffer = full


def learn_exactly(
    model: Any, steps: int, callback: Any, log_interval: int, gate: StepGate | None = None
) -> bool:
    """Advance ``model.num_timesteps`` by exactly ``steps`` (a multiple of n_envs).

    Returns False when ``gate`` stopped training early (the partial rollout is trained on
    and the model is at the last stored step), True when all ``steps`` were done.
    """
    from stable_baselines3.common.on_policy_algorithm import OnPolicyAlgorithm

    n_envs = model.n_envs
    assert steps % n_envs == 0, (steps, n_envs)
    vec_steps = steps // n_envs
    if isinstance(model, OnPolicyAlgorithm):
        per_rollout = int(model.n_steps)
    else:
        per_rollout = int(model.train_freq.frequency)
    full, rest = divmod(vec_steps, per_rollout)
    target = model.num_timesteps + steps
    if full:
        model.learn(
            full * per_rollout * n_envs,
            callback=callback,
            reset_num_timesteps=False,
            log_interval=log_interval,
        )
        if gate is not None and gate.stopped:
            train_partial_rollout(model, gate.collected)
            return False
    if rest:
        with _short_rollout(model, rest):
            model.learn(rest * n_envs, callback=callback, reset_num_timesteps=False, log_interval=1)
            if gate is not None and gate.stopped:
                train_partial_rollout(model, gate.collected)
                return False
    if model.num_timesteps != target:
        raise RuntimeError(f"step accounting drifted: at {model.num_timesteps}, expected {target}")
    return True


def evaluate(
    model: Any, cfg: TrainConfig, vecnorm: Any, episodes: int, alpha: float | None
) -> dict[str, float]:
    """Deterministic evaluation on fresh envs; behaviour env also reports task/human parts."""
    import numpy as np

    if episodes <= 0:
        return {}
    env = make_env_fn(cfg, alpha)()
    returns, task_returns, log_lik, lengths, successes = [], [], [], [], []
    for ep in range(episodes):
        obs, _ = env.reset(seed=cfg.seed + 10_000 + ep)
        done = False
        ret = task_ret = ll = 0.0
        length = 0
        terminated = False
        while not done:
            x = vecnorm.normalize_obs(obs) if vecnorm is not None else obs
            action, _ = model.predict(x, deterministic=True)
            obs, reward, terminated, truncated, info = env.step(int(np.asarray(action).item()))
            ret += float(reward)
            task_ret += float(info.get("r_task", reward))
            ll += float(info.get("log_pi_human", 0.0))
            length += 1
            done = terminated or truncated
        returns.append(ret)
        task_returns.append(task_ret)
        log_lik.append(ll / max(1, length))
        lengths.append(length)
        successes.append(float(terminated))
    out = {
        "eval/mean_reward": float(np.mean(returns)),
        "eval/std_reward": float(np.std(returns)),
        "eval/mean_ep_length": float(np.mean(lengths)),
    }
    if cfg.is_behaviour_env:
        out["eval/mean_task_return"] = float(np.mean(task_returns))
        out["eval/mean_log_pi_human"] = float(np.mean(log_lik))
        out["eval/success_rate"] = float(np.mean(successes))
    env.close()
    return out
