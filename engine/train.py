"""SB3 training entry point: ``python -m engine.train --algo ppo --total-timesteps 5000 ...``.

Flags and their validation: ``engine.trainconfig``; the run itself (resume, chunks that end
at checkpoint boundaries, exact totals, outputs): ``engine.trainer``; SB3 step accounting:
``engine.learning``; the preemption notice (SIGTERM -> checkpoint at the step reached ->
exit 75): ``engine.notice``; storage layout and atomicity: ``engine.storage``; environment
variables read: ``engine.envvars``; exit codes: ``engine.exit_codes``.

The run name is derived deterministically from the arguments, so re-running the same
command after a preemption resumes from the latest complete checkpoint and ends at exactly
``--total-timesteps`` (a multiple of ``--n-envs``).

Progress lines and events on stderr, one JSON result object on stdout. Exit codes: 0 ok,
1 runtime failure, 2 usage/config error (nothing written), 75 preempted (resumable),
130 interrupted.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from engine.envvars import EnvError, apply_jax_platform
from engine.exit_codes import EX_INTERRUPTED, EX_OK, EX_PREEMPTED
from engine.logs import log
from engine.notice import PreemptionNotice, TrainingPreempted, exit_with
from engine.trainconfig import (
    ALGOS,
    DEFAULT_ENV,
    TrainConfig,
    TrainResult,
    UsageError,
    build_parser,
    check_hparams,
    config_from_args,
    default_run_name,
    parse_train_args,
    validate_config,
)

if TYPE_CHECKING:
    from engine.learning import learn_exactly, make_vec_env
    from engine.trainer import Trainer, run_training

# SB3 and torch load only when training starts: bad flags are rejected without them
_LAZY = {
    "Trainer": "engine.trainer",
    "run_training": "engine.trainer",
    "learn_exactly": "engine.learning",
    "make_vec_env": "engine.learning",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'engine.train' has no attribute {name!r}")


__all__ = [
    "ALGOS",
    "DEFAULT_ENV",
    "TrainConfig",
    "TrainResult",
    "Trainer",
    "TrainingPreempted",
    "UsageError",
    "build_parser",
    "check_hparams",
    "config_from_args",
    "default_run_name",
    "learn_exactly",
    "main",
    "make_vec_env",
    "parse_train_args",
    "run_training",
    "train_from_argv",
    "validate_config",
]


def train_from_argv(argv: Sequence[str], notice: PreemptionNotice | None = None) -> dict[str, Any]:
    """Parse like the CLI and train; for launchers calling in-process.

    Raises UsageError, or TrainingPreempted after a notice checkpoint.
    """
    from engine.trainer import run_training

    args = build_parser(raise_errors=True).parse_args(list(argv))
    cfg = config_from_args(args)
    return run_training(cfg, notice=notice).to_dict()


def resolved_settings(cfg: TrainConfig) -> dict[str, Any]:
    """What ``--validate-only`` prints: the run's configuration and the environment it takes."""
    return {
        "config": cfg.to_dict(),
        "wandb": {
            "mode": cfg.wandb,
            "project": cfg.wandb_project,
            "entity": cfg.wandb_entity,
            "dir": os.environ.get("WANDB_DIR") or None,
            "api_key_set": bool(os.environ.get("WANDB_API_KEY")),
        },
        "jax_platforms": os.environ.get("JAX_PLATFORMS") or None,
    }


def main(argv: Sequence[str] | None = None) -> int:
    notice = PreemptionNotice()
    with notice.installed():  # from the start: a notice during setup is honoured too
        argv = list(sys.argv[1:] if argv is None else argv)
        parser = build_parser()
        try:
            apply_jax_platform()  # before anything imports jax
        except EnvError as exc:
            parser.error(str(exc))
        args = parser.parse_args(argv)
        try:
            cfg = config_from_args(args, local_checks=not args.validate_only)
        except UsageError as exc:
            parser.error(str(exc))
        if args.validate_only:
            print(json.dumps(resolved_settings(cfg), sort_keys=True), flush=True)
            return EX_OK
        log(
            f"run {cfg.run_name}: {cfg.algo} on {cfg.env} for {cfg.total_timesteps} steps, "
            f"alpha={cfg.alpha}, n_envs={cfg.n_envs}, storage={cfg.storage}, wandb={cfg.wandb}"
        )
        try:
            from engine.trainer import run_training

            result = run_training(cfg, notice=notice)
        except UsageError as exc:
            parser.error(str(exc))
        except TrainingPreempted:
            return EX_PREEMPTED  # the notice line is logged by the trainer
        except KeyboardInterrupt:
            log("interrupted")
            return EX_INTERRUPTED
        print(json.dumps(result.to_dict(), sort_keys=True), flush=True)
        return EX_OK


if __name__ == "__main__":
    exit_with(main())  # after a notice without the teardown: the grace is running
