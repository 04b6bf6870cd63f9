"""SB3 training entry point: ``python -m engine.train --algo ppo --total-timesteps 5000 ...``.

Preemption safety
    Every ``--checkpoint-every`` steps the model (plus the replay buffer for DQN
    and VecNormalize statistics when used) is written to
    ``<storage>/<run-name>/checkpoints/`` (see ``engine.storage`` for atomicity).
    On start the latest valid checkpoint is loaded and training continues with
    ``reset_num_timesteps=False``; stderr says which checkpoint and step. The run
    name is derived deterministically from the arguments, so re-running the same
    command after a preemption resumes.

Exact totals
    SB3 collects whole rollouts (``n_steps * n_envs`` for PPO/A2C, ``train_freq``
    steps for DQN), so a plain ``learn(N)`` overshoots. Training is done in chunks
    ending at checkpoint boundaries; within a chunk, whole rollouts run normally
    and the remainder runs as one shorter rollout (the on-policy rollout buffer or
    the DQN ``train_freq`` is resized for that one rollout, then restored). Every
    collected step is trained on and ``num_timesteps`` lands exactly on every
    checkpoint step and on ``--total-timesteps``, which must be a multiple of
    ``--n-envs`` (each vectorised step counts ``n_envs`` timesteps).

Outputs
    Progress lines and events on stderr, one JSON result object on stdout.
    Metrics go to TensorBoard (``<run dir>/tensorboard``) and to W&B (online,
    offline or disabled). Final weights are saved to ``<storage>/<run-name>/final``
    and logged as a W&B artifact with aliases ``latest`` and ``step-<N>``.
    Exit codes: 0 ok, 1 runtime failure, 2 usage/config error (nothing written).
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import json
import os
import re
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from engine.cliargs import non_negative_int
from engine.storage import (
    MANIFEST,
    CheckpointInfo,
    CheckpointStore,
    FsspecCheckpointStore,
    StorageError,
    build_manifest,
    local_run_dir,
    resolve_storage,
)
from engine.tracking import WANDB_MODES, log

ALGOS = ("ppo", "a2c", "dqn")
DEFAULT_ENV = "phantom/BehaviourMaze-v0"
# PHANTOM_STORAGE: the shared bucket the console sets for jobs it submits.
DEFAULT_STORAGE = os.environ.get("PHANTOM_STORAGE") or "runs"
DEFAULT_CHECKPOINT_EVERY = 2048
DEVICE_RE = re.compile(r"^(cpu|auto|mps|cuda(:\d+)?)$")
# algorithm defaults chosen for small CPU runs (each can be overridden with --hparams)
ALGO_DEFAULTS: dict[str, dict[str, Any]] = {
    "ppo": {},
    "a2c": {},
    "dqn": {"buffer_size": 50_000, "learning_starts": 1_000, "train_freq": 4},
}
_RESERVED_HPARAMS = {
    "policy",
    "env",
    "seed",
    "device",
    "verbose",
    "tensorboard_log",
    "_init_setup_model",
}


class UsageError(ValueError):
    """A bad flag value: reported argparse-style with exit code 2."""


@dataclass
class TrainConfig:
    algo: str = "ppo"
    total_timesteps: int = 5000
    alpha: float | str | None = None  # float in [0, 1], "auto", or None (task reward only)
    device: str = "cpu"
    seed: int = 0
    n_envs: int = 1
    env: str = DEFAULT_ENV
    storage: str = DEFAULT_STORAGE
    checkpoint_every: int = DEFAULT_CHECKPOINT_EVERY
    run_name: str = ""
    wandb: str = "offline"
    wandb_project: str | None = None
    wandb_entity: str | None = None
    hparams: dict[str, Any] = field(default_factory=dict)
    n_levels: int = 8
    maze_size: int = 5
    vec_normalize: bool = False
    vec_env: str = "dummy"
    keep_checkpoints: int = 3
    eval_episodes: int = 10
    log_every: int = 1000
    torch_threads: int = 1

    @property
    def is_behaviour_env(self) -> bool:
        return self.env == DEFAULT_ENV

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class TrainResult:
    run_name: str
    algo: str
    env: str
    seed: int
    num_timesteps: int
    total_timesteps: int
    resumed_from_step: int
    resumed_from: str | None
    final_uri: str
    checkpoint_uri: str | None
    wall_seconds: float
    metrics: dict[str, float]
    wandb_artifact: str | None = None
    wandb_run_dir: str | None = None
    attempt: str = ""
    node: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# --------------------------------------------------------------------------------------------
# argument parsing and validation


def _positive_int(flag: str) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text.replace("_", ""))
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
        if value < 1:
            raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
        return value

    parse.__name__ = flag
    return parse


def _alpha(text: str) -> float | str:
    if text.strip().lower() == "auto":
        return "auto"
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a number in [0, 1] or 'auto', got {text!r}"
        ) from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"must be in [0, 1] or 'auto', got {text}")
    return value


def _device(text: str) -> str:
    if not DEVICE_RE.match(text):
        raise argparse.ArgumentTypeError(
            f"expected cpu, auto, cuda, cuda:N or mps, got {text!r}"
        ) from None
    return text


def _hparams(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"not valid JSON ({exc.msg})") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("expected a JSON object like '{\"learning_rate\": 3e-4}'")
    return value


class _Parser(argparse.ArgumentParser):
    """ArgumentParser that can raise UsageError instead of exiting (for in-process callers)."""

    raise_errors = False

    def error(self, message: str) -> Any:  # type: ignore[override]
        if self.raise_errors:
            raise UsageError(message)
        super().error(message)


def build_parser(raise_errors: bool = False) -> argparse.ArgumentParser:
    parser = _Parser(
        prog="python -m engine.train",
        description="Train an SB3 agent with preemption-safe checkpoints.",
    )
    parser.raise_errors = raise_errors
    parser.add_argument("--algo", choices=ALGOS, default="ppo", help="SB3 algorithm")
    parser.add_argument(
        "--total-timesteps",
        type=_positive_int("--total-timesteps"),
        default=5000,
        help="target total env steps (also after resume); multiple of --n-envs",
    )
    parser.add_argument(
        "--alpha",
        type=_alpha,
        default=None,
        help="human-likeness weight in [0, 1], or 'auto' (behaviour env only)",
    )
    parser.add_argument("--device", type=_device, default="cpu", help="cpu, auto, cuda[:N], mps")
    parser.add_argument("--seed", type=non_negative_int, default=0)
    parser.add_argument("--n-envs", type=_positive_int("--n-envs"), default=1)
    parser.add_argument(
        "--env", default=DEFAULT_ENV, help=f"gymnasium id (default {DEFAULT_ENV}; e.g. CartPole-v1)"
    )
    parser.add_argument(
        "--storage",
        default=DEFAULT_STORAGE,
        help="checkpoint root: local path, file:///path or gs://bucket/prefix (default ./runs)",
    )
    parser.add_argument(
        "--checkpoint-every",
        type=_positive_int("--checkpoint-every"),
        default=DEFAULT_CHECKPOINT_EVERY,
        help="env steps between checkpoints (rounded up to a multiple of --n-envs)",
    )
    parser.add_argument("--run-name", default="", help="default: derived from algo/env/alpha/seed")
    default_mode = os.environ.get("WANDB_MODE", "offline")
    parser.add_argument(
        "--wandb",
        choices=WANDB_MODES,
        default=default_mode if default_mode in WANDB_MODES else "offline",
        help="W&B mode (default $WANDB_MODE or offline); online needs WANDB_API_KEY in the env",
    )
    parser.add_argument("--wandb-project", default=os.environ.get("WANDB_PROJECT") or None)
    parser.add_argument("--wandb-entity", default=os.environ.get("WANDB_ENTITY") or None)
    parser.add_argument(
        "--hparams", type=_hparams, default={}, help="JSON object of extra algorithm kwargs"
    )
    parser.add_argument("--n-levels", type=_positive_int("--n-levels"), default=8)
    parser.add_argument("--maze-size", type=_positive_int("--maze-size"), default=5)
    parser.add_argument("--vec-normalize", action="store_true", help="wrap envs in VecNormalize")
    parser.add_argument("--vec-env", choices=("dummy", "subproc"), default="dummy")
    parser.add_argument("--keep-checkpoints", type=_positive_int("--keep-checkpoints"), default=3)
    parser.add_argument("--eval-episodes", type=non_negative_int, default=10)
    parser.add_argument("--log-every", type=_positive_int("--log-every"), default=1000)
    parser.add_argument("--torch-threads", type=_positive_int("--torch-threads"), default=1)
    return parser


def _check_env_id(env_id: str) -> None:
    import gymnasium as gym

    import engine.envs  # noqa: F401  (registers phantom/BehaviourMaze-v0)

    try:
        gym.spec(env_id)
    except gym.error.Error as exc:
        raise UsageError(
            f"--env: unknown gymnasium id {env_id!r} ({exc}); "
            f"use {DEFAULT_ENV} or a registered id such as CartPole-v1"
        ) from None


def _check_hparams(algo: str, hparams: dict[str, Any]) -> None:
    if not hparams:
        return  # skip importing SB3 (and torch) just to check nothing
    cls = algo_class(algo)
    allowed = set(inspect.signature(cls.__init__).parameters) - _RESERVED_HPARAMS - {"self"}
    unknown = sorted(set(hparams) - allowed)
    if unknown:
        raise UsageError(
            f"--hparams: {', '.join(unknown)} not accepted by {algo.upper()}; "
            f"allowed: {', '.join(sorted(allowed))}"
        )
    train_freq = hparams.get("train_freq")
    if isinstance(train_freq, list | tuple) and len(train_freq) == 2 and train_freq[1] != "step":
        raise UsageError("--hparams: train_freq must count steps ('step') for exact totals")


def default_run_name(cfg: TrainConfig) -> str:
    env_slug = re.sub(r"[^a-z0-9]+", "-", cfg.env.split("/")[-1].lower()).strip("-")
    alpha = "" if cfg.alpha is None else f"-a{cfg.alpha}"
    return f"{cfg.algo}-{env_slug}{alpha}-s{cfg.seed}"


def config_from_args(args: argparse.Namespace) -> TrainConfig:
    """Turn parsed flags into a validated TrainConfig; raises UsageError (never writes)."""
    cfg = TrainConfig(
        algo=args.algo,
        total_timesteps=args.total_timesteps,
        alpha=args.alpha,
        device=args.device,
        seed=args.seed,
        n_envs=args.n_envs,
        env=args.env,
        storage=args.storage,
        checkpoint_every=args.checkpoint_every,
        run_name=args.run_name,
        wandb=args.wandb,
        wandb_project=args.wandb_project,
        wandb_entity=args.wandb_entity,
        hparams=dict(args.hparams),
        n_levels=args.n_levels,
        maze_size=args.maze_size,
        vec_normalize=args.vec_normalize,
        vec_env=args.vec_env,
        keep_checkpoints=args.keep_checkpoints,
        eval_episodes=args.eval_episodes,
        log_every=args.log_every,
        torch_threads=args.torch_threads,
    )
    validate_config(cfg)
    return cfg


def validate_config(cfg: TrainConfig) -> None:
    """Cross-flag checks shared by the CLI, the distributed launcher and sweeps."""
    if cfg.algo not in ALGOS:
        raise UsageError(f"--algo: {cfg.algo!r} is not one of {', '.join(ALGOS)}")
    if cfg.total_timesteps % cfg.n_envs:
        lo = cfg.total_timesteps - cfg.total_timesteps % cfg.n_envs
        raise UsageError(
            f"--total-timesteps {cfg.total_timesteps} is not a multiple of --n-envs {cfg.n_envs} "
            f"(each vectorised step counts {cfg.n_envs}); use {lo or cfg.n_envs} or "
            f"{lo + cfg.n_envs}"
        )
    if cfg.checkpoint_every % cfg.n_envs:
        cfg.checkpoint_every += cfg.n_envs - cfg.checkpoint_every % cfg.n_envs
    _check_env_id(cfg.env)
    if not cfg.is_behaviour_env:
        if cfg.alpha == "auto":
            raise UsageError(f"--alpha auto needs --env {DEFAULT_ENV} (got --env {cfg.env})")
    else:
        if not 3 <= cfg.maze_size <= 16:
            raise UsageError(f"--maze-size must be in [3, 16], got {cfg.maze_size}")
    try:
        resolve_storage(cfg.storage)
    except StorageError as exc:
        raise UsageError(f"--storage: {exc}") from None
    if cfg.run_name and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.=-]{0,127}", cfg.run_name):
        raise UsageError(
            f"--run-name {cfg.run_name!r}: use 1-128 characters from A-Z a-z 0-9 _ . = - "
            "(it becomes a directory name)"
        )
    if not cfg.run_name:
        cfg.run_name = default_run_name(cfg)
    if cfg.wandb not in WANDB_MODES:
        raise UsageError(f"--wandb: {cfg.wandb!r} is not one of {', '.join(WANDB_MODES)}")
    if cfg.wandb == "online" and not os.environ.get("WANDB_API_KEY"):
        raise UsageError(
            "--wandb online needs WANDB_API_KEY in the environment; "
            "use --wandb offline and `wandb sync` later"
        )
    if cfg.device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            raise UsageError(f"--device {cfg.device}: no CUDA device here; use --device cpu")
    _check_hparams(cfg.algo, cfg.hparams)


def parse_train_args(argv: Sequence[str]) -> TrainConfig:
    """Parse and validate; on bad input print an argparse-style error and exit 2."""
    parser = build_parser()
    args = parser.parse_args(list(argv))
    try:
        return config_from_args(args)
    except UsageError as exc:
        parser.error(str(exc))
    raise AssertionError("unreachable")


# --------------------------------------------------------------------------------------------
# building blocks


def algo_class(algo: str) -> Any:
    from stable_baselines3 import A2C, DQN, PPO

    return {"ppo": PPO, "a2c": A2C, "dqn": DQN}[algo]


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


def learn_exactly(model: Any, steps: int, callback: Any, log_interval: int) -> None:
    """Advance ``model.num_timesteps`` by exactly ``steps`` (a multiple of n_envs)."""
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
    if rest:
        with _short_rollout(model, rest):
            model.learn(rest * n_envs, callback=callback, reset_num_timesteps=False, log_interval=1)
    if model.num_timesteps != target:
        raise RuntimeError(f"step accounting drifted: at {model.num_timesteps}, expected {target}")


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


def _alpha_value(cfg: TrainConfig) -> float | None:
    return float(cfg.alpha) if isinstance(cfg.alpha, float | int) else None


# --------------------------------------------------------------------------------------------
# the training run


def _node_name() -> str:
    """Where this trainer runs: the Ray node IP inside Ray, else the host's IP as the
    pod emulator publishes it (``PHANTOM_HOST_IP``), else the host name."""
    import socket

    if "ray" in sys.modules:
        import ray

        if ray.is_initialized():
            return str(ray.util.get_node_ip_address())
    return os.environ.get("PHANTOM_HOST_IP") or socket.gethostname()


def _fresh_model(cfg: TrainConfig, venv: Any) -> Any:
    cls = algo_class(cfg.algo)
    kwargs = {**ALGO_DEFAULTS[cfg.algo], **cfg.hparams}
    return cls("MlpPolicy", venv, seed=cfg.seed, device=cfg.device, verbose=0, **kwargs)


def _check_resume_compatible(cfg: TrainConfig, info: CheckpointInfo) -> None:
    saved = info.manifest.get("config", {})
    for key, flag in (("algo", "--algo"), ("env", "--env"), ("n_envs", "--n-envs")):
        if key in saved and saved[key] != getattr(cfg, key):
            raise UsageError(
                f"{flag} {getattr(cfg, key)} differs from the checkpoint at {info.uri} "
                f"({flag} {saved[key]}); resume with the same value or pick a new --run-name"
            )
    if info.step > cfg.total_timesteps:
        raise UsageError(
            f"--total-timesteps {cfg.total_timesteps} is below the checkpoint step {info.step} "
            f"({info.uri}); raise it or pick a new --run-name"
        )


def run_training(
    cfg: TrainConfig,
    store: CheckpointStore | None = None,
    extra_callbacks: Sequence[Any] = (),
) -> TrainResult:
    """Train (resuming if a checkpoint exists) until exactly ``cfg.total_timesteps``.

    ``store`` defaults to fsspec storage at ``<cfg.storage>/<cfg.run_name>``; sweeps
    pass a Ray Tune store. Raises UsageError for config problems found late
    (e.g. an incompatible checkpoint) before anything is written.
    """
    import torch
    from stable_baselines3.common.callbacks import BaseCallback, CallbackList
    from stable_baselines3.common.logger import Logger, TensorBoardOutputFormat
    from stable_baselines3.common.vec_env import VecNormalize

    from engine.metrics import ProgressWriter, WandbWriter
    from engine.tracking import log_final_artifact, start_wandb

    if not cfg.run_name:
        validate_config(cfg)
    started = time.monotonic()
    attempt = uuid.uuid4().hex[:12]
    torch.set_num_threads(cfg.torch_threads)
    store = store or FsspecCheckpointStore(cfg.storage, cfg.run_name, keep=cfg.keep_checkpoints)

    latest = store.latest()
    if latest is not None:
        _check_resume_compatible(cfg, latest)
    saved_alpha = latest.manifest.get("alpha_current") if latest else None
    alpha0 = _alpha_value(cfg)
    if cfg.alpha == "auto":
        alpha0 = float(saved_alpha) if saved_alpha is not None else 0.5

    auto_cb = None
    if cfg.alpha == "auto":
        try:
            from engine.jax_profiles.online import AutoAlphaCallback
        except ImportError as exc:
            raise UsageError(
                f"--alpha auto needs engine.jax_profiles.online.AutoAlphaCallback ({exc})"
            ) from None

    venv = make_vec_env(cfg, alpha0)
    work = Path(tempfile.mkdtemp(prefix=f"phantom-{cfg.run_name}-"))
    try:
        vecnorm = None
        if latest is not None:
            ckpt_dir = store.fetch(latest, work / "resume")
            log(f"resuming {cfg.run_name} from checkpoint {latest.uri} at step {latest.step}")
            if (ckpt_dir / "vecnormalize.pkl").exists():
                vecnorm = VecNormalize.load(str(ckpt_dir / "vecnormalize.pkl"), venv)
                venv = vecnorm
            elif cfg.vec_normalize:
                vecnorm = venv = VecNormalize(venv)
            model = algo_class(cfg.algo).load(
                str(ckpt_dir / "model.zip"), env=venv, device=cfg.device
            )
            if (ckpt_dir / "replay_buffer.pkl").exists():
                model.load_replay_buffer(str(ckpt_dir / "replay_buffer.pkl"))
            if model.num_timesteps != latest.step:
                raise RuntimeError(
                    f"checkpoint {latest.uri} says step {latest.step} but model has "
                    f"{model.num_timesteps}"
                )
        else:
            log(f"starting {cfg.run_name} from scratch (no checkpoint in {store.description})")
            if cfg.vec_normalize:
                vecnorm = venv = VecNormalize(venv)
            try:
                model = _fresh_model(cfg, venv)
            except (ValueError, TypeError, AssertionError) as exc:
                raise UsageError(f"--hparams {json.dumps(cfg.hparams)}: {exc}") from None
        resumed_from_step = latest.step if latest else 0

        if cfg.is_behaviour_env and cfg.alpha == "auto":
            family = venv.get_attr("family")[0]
            auto_cb = AutoAlphaCallback(
                family, alpha0=float(alpha0 or 0.5), seed=cfg.seed, verbose=0
            )

        # --- outputs (first writes happen here, after every check) ---
        run_dir = local_run_dir(cfg.storage, cfg.run_name)
        tb_dir = run_dir / "tensorboard"
        tb_dir.mkdir(parents=True, exist_ok=True)
        progress = ProgressWriter(cfg.total_timesteps, min_interval_steps=cfg.log_every)
        writers: list[Any] = [progress, TensorBoardOutputFormat(str(tb_dir))]
        wandb_run = None
        if cfg.wandb != "disabled":
            wandb_run = start_wandb(
                cfg.wandb,
                cfg.wandb_project,
                cfg.wandb_entity,
                cfg.run_name,
                {**cfg.to_dict(), "resumed_from_step": resumed_from_step},
                latest.manifest.get("wandb_run_id") if latest else None,
                # offline runs stay next to the checkpoints (for `wandb sync`) unless
                # WANDB_DIR says otherwise
                directory=os.environ.get("WANDB_DIR") or str(run_dir),
            )
            writers.append(WandbWriter(wandb_run))
        model.set_logger(Logger(folder=str(tb_dir), output_formats=writers))

        total = cfg.total_timesteps

        class _Bookkeeping(BaseCallback):
            """Global progress for schedules; alpha and attempt markers in the logs."""

            def _on_training_start(self) -> None:
                self.model._total_timesteps = total

            def _on_rollout_end(self) -> None:
                alpha = auto_cb.alpha if auto_cb is not None else alpha0
                if alpha is not None:
                    self.logger.record("behaviour/alpha", float(alpha))

            def _on_step(self) -> bool:
                return True

        callbacks: list[Any] = [_Bookkeeping()]
        if auto_cb is not None:
            callbacks.append(auto_cb)
        callbacks.extend(extra_callbacks)
        callback = CallbackList(callbacks)

        from stable_baselines3.common.on_policy_algorithm import OnPolicyAlgorithm

        if isinstance(model, OnPolicyAlgorithm):
            log_interval = max(1, cfg.log_every // (model.n_steps * model.n_envs))
        else:
            log_interval = 4  # episodes

        def snapshot(kind: str) -> tuple[Path, dict[str, Any]]:
            out = work / f"{kind}-{model.num_timesteps}"
            out.mkdir(parents=True, exist_ok=True)
            model.save(str(out / "model.zip"))
            if kind == "ckpt" and hasattr(model, "replay_buffer") and model.replay_buffer:
                model.save_replay_buffer(str(out / "replay_buffer.pkl"))
            if vecnorm is not None:
                vecnorm.save(str(out / "vecnormalize.pkl"))
            alpha_now = auto_cb.alpha if auto_cb is not None else alpha0
            manifest = build_manifest(
                out,
                model.num_timesteps,
                {
                    "kind": kind,
                    "run_name": cfg.run_name,
                    "config": cfg.to_dict(),
                    "alpha_current": None if alpha_now is None else float(alpha_now),
                    "wandb_run_id": getattr(wandb_run, "id", None),
                    "attempt": attempt,
                    "node": node,
                    "resumed_from_step": resumed_from_step,
                },
            )
            return out, manifest

        def metrics_now(extra: dict[str, float] | None = None) -> dict[str, Any]:
            return {
                "num_timesteps": int(model.num_timesteps),
                "resumed_from_step": resumed_from_step,
                "attempt": attempt,
                "node": node,
                **progress.last_values,
                **(extra or {}),
            }

        checkpoint_uri = latest.uri if latest else None
        every = cfg.checkpoint_every
        node = _node_name()
        while model.num_timesteps < total:
            next_boundary = (model.num_timesteps // every + 1) * every
            chunk_end = min(next_boundary, total)
            learn_exactly(model, chunk_end - model.num_timesteps, callback, log_interval)
            if chunk_end < total:
                out, manifest = snapshot("ckpt")
                checkpoint_uri = store.save(out, model.num_timesteps, manifest, metrics_now())
                log(f"checkpoint step={model.num_timesteps} at {checkpoint_uri}")

        # final: evaluation, final weights, artifact
        alpha_now = auto_cb.alpha if auto_cb is not None else alpha0
        eval_metrics = evaluate(model, cfg, vecnorm, cfg.eval_episodes, alpha_now)
        if eval_metrics:
            for key, value in eval_metrics.items():
                model.logger.record(key, value)
            model.logger.dump(step=model.num_timesteps)
        out, manifest = snapshot("ckpt")
        if resumed_from_step < total or checkpoint_uri is None:
            checkpoint_uri = store.save(out, model.num_timesteps, manifest, metrics_now())
            log(f"checkpoint step={model.num_timesteps} at {checkpoint_uri}")
        final_dir, final_manifest = snapshot("final")
        final_uri = store.save_final(
            final_dir, model.num_timesteps, final_manifest, metrics_now(eval_metrics)
        )
        log(f"final weights step={model.num_timesteps} at {final_uri}")
        artifact = None
        wandb_dir = None
        if wandb_run is not None:
            files = sorted(p for p in final_dir.iterdir() if p.name != MANIFEST)
            artifact = log_final_artifact(
                wandb_run,
                cfg.algo,
                cfg.run_name,
                files,
                model.num_timesteps,
                {"run_name": cfg.run_name, "step": model.num_timesteps, "final_uri": final_uri},
            )
            wandb_run.summary.update({**eval_metrics, "num_timesteps": model.num_timesteps})
            wandb_dir = str(getattr(wandb_run, "dir", "") or "") or None
            log(f"W&B artifact {artifact} aliases latest, step-{model.num_timesteps}")
            wandb_run.finish()
        model.logger.close()
        return TrainResult(
            run_name=cfg.run_name,
            algo=cfg.algo,
            env=cfg.env,
            seed=cfg.seed,
            num_timesteps=int(model.num_timesteps),
            total_timesteps=total,
            resumed_from_step=resumed_from_step,
            resumed_from=latest.uri if latest else None,
            final_uri=final_uri,
            checkpoint_uri=checkpoint_uri,
            wall_seconds=time.monotonic() - started,
            metrics={**progress.last_values, **eval_metrics},
            wandb_artifact=artifact,
            wandb_run_dir=wandb_dir,
            attempt=attempt,
            node=node,
        )
    finally:
        venv.close()
        import shutil

        shutil.rmtree(work, ignore_errors=True)


def train_from_argv(argv: Sequence[str]) -> dict[str, Any]:
    """Parse like the CLI and train; for launchers calling in-process. Raises UsageError."""
    args = build_parser(raise_errors=True).parse_args(list(argv))
    cfg = config_from_args(args)
    return run_training(cfg).to_dict()


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    cfg = parse_train_args(argv)
    log(
        f"run {cfg.run_name}: {cfg.algo} on {cfg.env} for {cfg.total_timesteps} steps, "
        f"alpha={cfg.alpha}, n_envs={cfg.n_envs}, storage={cfg.storage}, wandb={cfg.wandb}"
    )
    try:
        result = run_training(cfg)
    except UsageError as exc:
        parser.error(str(exc))
    except KeyboardInterrupt:
        log("interrupted")
        return 130
    print(json.dumps(result.to_dict(), sort_keys=True), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
