"""``engine.train``'s command line: flags, their validation, and the run's configuration.

Everything here is cheap: validation imports neither torch nor Stable-Baselines3 (the
accepted ``--hparams`` keys are a table, kept equal to SB3's signatures by a test), so bad
input is rejected in well under a second with exit 2 and nothing written.
"""

from __future__ import annotations

import argparse
import json
import os
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from engine.cliargs import bounded_text, non_negative_int, positive_int, positive_int_or_auto
from engine.envvars import (
    CHECKPOINT_ADVICE_STEPS,
    WANDB_MODES,
    EnvError,
    checkpoint_advice,
    notice_grace_s,
    wandb_defaults,
)
from engine.logs import log
from engine.storage import StorageError, check_storage_writable, resolve_storage

ALGOS = ("ppo", "a2c", "dqn")
DEFAULT_ENV = "phantom/BehaviourMaze-v0"
DEFAULT_CHECKPOINT_EVERY = 2048
DEVICE_RE = re.compile(r"^(cpu|auto|mps|cuda(:\d+)?)$")
# algorithm defaults chosen for small CPU runs (each can be overridden with --hparams)
ALGO_DEFAULTS: dict[str, dict[str, Any]] = {
    "ppo": {},
    "a2c": {},
    "dqn": {"buffer_size": 50_000, "learning_starts": 1_000, "train_freq": 4},
}
# Keyword arguments of each SB3 algorithm that --hparams may set: SB3's __init__ parameters
# minus the ones the engine owns (policy, env, seed, device, verbose, tensorboard_log) and the
# class-valued ones JSON cannot express. tests/engine/test_train.py keeps this equal to SB3.
_COMMON = {"gamma", "learning_rate", "max_grad_norm", "policy_kwargs", "stats_window_size"}
_ON_POLICY = _COMMON | {
    "ent_coef",
    "gae_lambda",
    "n_steps",
    "normalize_advantage",
    "rollout_buffer_kwargs",
    "sde_sample_freq",
    "use_sde",
    "vf_coef",
}
HPARAMS: dict[str, frozenset[str]] = {
    "ppo": frozenset(
        _ON_POLICY | {"batch_size", "clip_range", "clip_range_vf", "n_epochs", "target_kl"}
    ),
    "a2c": frozenset(_ON_POLICY | {"rms_prop_eps", "use_rms_prop"}),
    "dqn": frozenset(
        _COMMON
        | {
            "batch_size",
            "buffer_size",
            "exploration_final_eps",
            "exploration_fraction",
            "exploration_initial_eps",
            "gradient_steps",
            "learning_starts",
            "n_steps",
            "optimize_memory_usage",
            "replay_buffer_kwargs",
            "target_update_interval",
            "tau",
            "train_freq",
        }
    ),
}


# value checks for the common --hparams keys, so typos and signs fail in validation (fast,
# no SB3 import) rather than inside SB3: (kind, low, high) with bounds inclusive
_HPARAM_VALUES: dict[str, tuple[str, float, float]] = {
    "n_steps": ("int", 1, 1e9),
    "batch_size": ("int", 1, 1e9),
    "n_epochs": ("int", 1, 1e6),
    "buffer_size": ("int", 1, 1e9),
    "learning_starts": ("int", 0, 1e12),
    "gradient_steps": ("int", -1, 1e9),
    "target_update_interval": ("int", 1, 1e12),
    "stats_window_size": ("int", 1, 1e9),
    "sde_sample_freq": ("int", -1, 1e9),
    "gamma": ("float", 0.0, 1.0),
    "gae_lambda": ("float", 0.0, 1.0),
    "tau": ("float", 0.0, 1.0),
    "exploration_fraction": ("float", 0.0, 1.0),
    "exploration_initial_eps": ("float", 0.0, 1.0),
    "exploration_final_eps": ("float", 0.0, 1.0),
    "learning_rate": ("float", 1e-12, 10.0),
    "max_grad_norm": ("float", 0.0, 1e9),
    "ent_coef": ("float", 0.0, 1e3),
    "vf_coef": ("float", 0.0, 1e3),
    "clip_range": ("float", 1e-9, 1e3),
    "rms_prop_eps": ("float", 0.0, 1.0),
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
    storage: str = "runs"
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
    wandb_mode: str = "offline"
    attempt: str = ""
    node: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def default_storage() -> str:
    """``--storage``'s default: the console's shared bucket (``PHANTOM_STORAGE``) or ./runs."""
    return os.environ.get("PHANTOM_STORAGE") or "runs"


# --------------------------------------------------------------------------------------------
# flag value types (argparse names the flag in its error and exits 2)


def _alpha(text: str) -> float | str:
    if bounded_text(text).strip().lower() == "auto":
        return "auto"
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a number in [0, 1] or 'auto', got {text[:40]!r}"
        ) from None
    if not 0.0 <= value <= 1.0:  # also rejects nan
        raise argparse.ArgumentTypeError(f"must be in [0, 1] or 'auto', got {text}")
    return value


def _device(text: str) -> str:
    if not DEVICE_RE.match(bounded_text(text)):
        raise argparse.ArgumentTypeError(
            f"expected cpu, auto, cuda, cuda:N or mps, got {text[:40]!r}"
        )
    return text


def _hparams(text: str) -> dict[str, Any]:
    try:
        value = json.loads(bounded_text(text))
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
        description="Train an SB3 agent with preemption-safe checkpoints. Exit codes: 0 ok, "
        "1 failure, 2 usage, 75 preempted (a notice checkpoint was written; run the same "
        "command again to resume), 130 interrupted.",
    )
    parser.raise_errors = raise_errors
    parser.add_argument("--algo", choices=ALGOS, default="ppo", help="SB3 algorithm")
    parser.add_argument(
        "--total-timesteps",
        type=positive_int,
        default=5000,
        help="target total env steps (also after resume); multiple of --n-envs",
    )
    parser.add_argument(
        "--alpha",
        type=_alpha,
        default=None,
        help="human-likeness weight in [0, 1], or 'auto' (behaviour env, ppo/a2c only)",
    )
    parser.add_argument("--device", type=_device, default="cpu", help="cpu, auto, cuda[:N], mps")
    parser.add_argument("--seed", type=non_negative_int, default=0)
    parser.add_argument("--n-envs", type=positive_int, default=1)
    parser.add_argument(
        "--env",
        type=bounded_text,
        default=DEFAULT_ENV,
        help=f"gymnasium id (default {DEFAULT_ENV}; e.g. CartPole-v1)",
    )
    parser.add_argument(
        "--storage",
        type=bounded_text,
        default=None,
        help="checkpoint root: local path, file:///path or gs://bucket/prefix "
        "(default $PHANTOM_STORAGE or ./runs)",
    )
    parser.add_argument(
        "--checkpoint-every",
        type=positive_int_or_auto,
        default=DEFAULT_CHECKPOINT_EVERY,
        help="env steps between checkpoints (rounded up to a multiple of --n-envs), or auto: "
        f"the console's advice in ${CHECKPOINT_ADVICE_STEPS}, else {DEFAULT_CHECKPOINT_EVERY}",
    )
    parser.add_argument(
        "--run-name",
        type=bounded_text,
        default="",
        help="default: derived from algo/env/alpha/seed",
    )
    parser.add_argument(
        "--wandb",
        choices=WANDB_MODES,
        default=None,
        help="W&B mode (default $WANDB_MODE or offline); online needs WANDB_API_KEY in the env",
    )
    parser.add_argument(
        "--wandb-project", type=bounded_text, default=None, help="default $WANDB_PROJECT"
    )
    parser.add_argument(
        "--wandb-entity", type=bounded_text, default=None, help="default $WANDB_ENTITY"
    )
    parser.add_argument(
        "--hparams", type=_hparams, default={}, help="JSON object of extra algorithm kwargs"
    )
    parser.add_argument("--n-levels", type=positive_int, default=8)
    parser.add_argument("--maze-size", type=positive_int, default=5)
    parser.add_argument("--vec-normalize", action="store_true", help="wrap envs in VecNormalize")
    parser.add_argument("--vec-env", choices=("dummy", "subproc"), default="dummy")
    parser.add_argument("--keep-checkpoints", type=positive_int, default=3)
    parser.add_argument("--eval-episodes", type=non_negative_int, default=10)
    parser.add_argument("--log-every", type=positive_int, default=1000)
    parser.add_argument("--torch-threads", type=positive_int, default=1)
    parser.add_argument(
        "--validate-only",
        action="store_true",
        help="check the flags and environment, print the resolved configuration as JSON and "
        "exit (0 or 2) without training; storage is not touched (it may be a cluster's path)",
    )
    return parser


# --------------------------------------------------------------------------------------------
# cross-flag validation


def _check_env_id(env_id: str) -> None:
    import gymnasium as gym

    import engine.envs  # noqa: F401  (registers phantom/BehaviourMaze-v0)

    try:
        gym.spec(env_id)
    except gym.error.Error as exc:
        raise UsageError(
            f"--env: unknown gymnasium id {env_id[:80]!r} ({str(exc)[:200]}); "
            f"use {DEFAULT_ENV} or a registered id such as CartPole-v1"
        ) from None


def check_hparam_keys(algo: str, keys: Any) -> None:
    """Reject --hparams keys the algorithm does not take (no SB3 import)."""
    check_hparams(algo, dict.fromkeys(keys), values=False)


def check_hparams(algo: str, hparams: dict[str, Any], values: bool = True) -> None:
    """Reject --hparams keys the algorithm does not take and out-of-range common values."""
    allowed = HPARAMS[algo]
    unknown = sorted(set(hparams) - allowed)
    if unknown:
        shown = ", ".join(repr(k[:40]) for k in unknown[:5]) + (" ..." if len(unknown) > 5 else "")
        raise UsageError(
            f"--hparams: {shown} not accepted by {algo.upper()}; "
            f"allowed: {', '.join(sorted(allowed))}"
        )
    if not values:
        return
    for key, value in hparams.items():
        rule = _HPARAM_VALUES.get(key)
        if rule is None:
            continue
        kind, low, high = rule
        number = isinstance(value, int | float) and not isinstance(value, bool)
        if not number or (kind == "int" and value != int(value)) or not low <= value <= high:
            wanted = "an integer" if kind == "int" else "a number"
            raise UsageError(
                f"--hparams: {key} must be {wanted} in [{low:g}, {high:g}], got {value!r}"[:300]
            )
    train_freq = hparams.get("train_freq")
    if isinstance(train_freq, list | tuple) and len(train_freq) == 2 and train_freq[1] != "step":
        raise UsageError("--hparams: train_freq must count steps ('step') for exact totals")
    bad_freq = isinstance(train_freq, bool) or not isinstance(train_freq, int) or train_freq < 1
    if train_freq is not None and not isinstance(train_freq, list | tuple) and bad_freq:
        raise UsageError(f"--hparams: train_freq must be an integer >= 1, got {train_freq!r}")


def default_run_name(cfg: TrainConfig) -> str:
    env_slug = re.sub(r"[^a-z0-9]+", "-", cfg.env.split("/")[-1].lower()).strip("-")
    alpha = "" if cfg.alpha is None else f"-a{cfg.alpha}"
    return f"{cfg.algo}-{env_slug}{alpha}-s{cfg.seed}"


def config_from_args(args: argparse.Namespace, local_checks: bool = True) -> TrainConfig:
    """Turn parsed flags into a validated TrainConfig; raises UsageError (never writes).

    Flags left unset take their defaults from the environment (``engine.envvars``).
    ``local_checks=False`` skips what depends on this machine (storage writability,
    CUDA), for validating a command that will run elsewhere.
    """
    try:  # a broken variable is named even when a flag overrides it: wandb reads it too
        notice_grace_s()
        env_defaults = wandb_defaults()
    except EnvError as exc:
        raise UsageError(str(exc)) from None
    wandb_mode = args.wandb or str(env_defaults["mode"])
    every = args.checkpoint_every
    if every == "auto":
        every, why = auto_checkpoint_every()
        log(f"checkpoint every {every} steps ({why})")
    cfg = TrainConfig(
        algo=args.algo,
        total_timesteps=args.total_timesteps,
        alpha=args.alpha,
        device=args.device,
        seed=args.seed,
        n_envs=args.n_envs,
        env=args.env,
        storage=args.storage if args.storage is not None else default_storage(),
        checkpoint_every=every,
        run_name=args.run_name,
        wandb=wandb_mode,
        wandb_project=args.wandb_project or env_defaults["project"],
        wandb_entity=args.wandb_entity or env_defaults["entity"],
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
    validate_config(cfg, local_checks=local_checks, wandb_from_env=args.wandb is None)
    return cfg


def auto_checkpoint_every() -> tuple[int, str]:
    """What ``--checkpoint-every auto`` means here: the console's advice, else the default.

    Returns the interval (env steps) and why; raises UsageError on a bad advice variable.
    """
    try:
        advice = checkpoint_advice()
    except EnvError as exc:
        raise UsageError(f"--checkpoint-every auto: {exc}") from None
    if advice is None:
        return DEFAULT_CHECKPOINT_EVERY, f"no advice in {CHECKPOINT_ADVICE_STEPS}, default"
    steps, reason = advice
    return steps, f"advice from the console: {reason}" if reason else "advice from the console"


def validate_config(
    cfg: TrainConfig, local_checks: bool = True, wandb_from_env: bool = False
) -> None:
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
    if cfg.alpha == "auto" and cfg.algo == "dqn":
        # The dual update scores the policy's action distribution. DQN acts epsilon-greedily:
        # that distribution is set by the exploration schedule (uniform at the start, then
        # almost deterministic), not by learning, so the bound would track the schedule.
        raise UsageError(
            "--alpha auto needs a stochastic policy (--algo ppo or a2c); DQN's "
            "epsilon-greedy behaviour is set by its exploration schedule, not by learning. "
            "Use --algo ppo/a2c with --alpha auto, or a fixed --alpha with --algo dqn"
        )
    check_hparams(cfg.algo, cfg.hparams)
    _check_env_id(cfg.env)
    if not cfg.is_behaviour_env:
        if cfg.alpha == "auto":
            raise UsageError(f"--alpha auto needs --env {DEFAULT_ENV} (got --env {cfg.env})")
    elif not 3 <= cfg.maze_size <= 16:
        raise UsageError(f"--maze-size must be in [3, 16], got {cfg.maze_size}")
    try:
        resolve_storage(cfg.storage)
    except StorageError as exc:
        raise UsageError(f"--storage: {exc}") from None
    if cfg.run_name and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.=-]{0,127}", cfg.run_name):
        raise UsageError(
            f"--run-name {cfg.run_name[:80]!r}: use 1-128 characters from A-Z a-z 0-9 _ . = - "
            "(it becomes a directory name)"
        )
    if not cfg.run_name:
        cfg.run_name = default_run_name(cfg)
    if cfg.wandb not in WANDB_MODES:
        raise UsageError(f"--wandb: {cfg.wandb!r} is not one of {', '.join(WANDB_MODES)}")
    if cfg.wandb == "online" and not os.environ.get("WANDB_API_KEY"):
        source = "WANDB_MODE=online" if wandb_from_env else "--wandb online"
        raise UsageError(
            f"{source} needs WANDB_API_KEY in the environment; "
            "use --wandb offline and `wandb sync` later"
        )
    if local_checks:
        try:
            check_storage_writable(cfg.storage, cfg.run_name)
        except StorageError as exc:
            raise UsageError(f"--storage: {exc}") from None
        if cfg.device.startswith("cuda"):
            import torch

            if not torch.cuda.is_available():
                raise UsageError(f"--device {cfg.device}: no CUDA device here; use --device cpu")


def parse_train_args(argv: Sequence[str], local_checks: bool = True) -> TrainConfig:
    """Parse and validate; on bad input print an argparse-style error and exit 2."""
    parser = build_parser()
    args = parser.parse_args(list(argv))
    try:
        return config_from_args(args, local_checks=local_checks)
    except UsageError as exc:
        parser.error(str(exc))
    raise AssertionError("unreachable")
