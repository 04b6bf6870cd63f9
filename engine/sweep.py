"""Hyperparameter sweeps over Ray: a Ray Tune backend (default, works offline) and W&B agents.

``python -m engine.sweep --kind ppo_rl_study --method random --run-cap 900 \\
    --num-nodes 4 --agents-per-node 16 --tpu-per-task 0 --storage file:///bucket/sweeps``

Search spaces: ``engine.sweep_spaces`` (``--kind`` is a name in ``engine/sweeps/`` or a path
to a .json file); the Ray Tune backend: ``engine.sweep_tune``; the W&B backend:
``engine.sweep_wandb``. This module is the command line and its validation.

The last stdout line is a JSON summary. Exit codes (``engine.exit_codes``): 0 ok,
1 failures, 2 usage (nothing started).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from engine.cliargs import (
    bounded_text,
    non_negative_float,
    non_negative_int,
    positive_int,
    ray_address,
)
from engine.envvars import (
    WANDB_MODES,
    EnvError,
    apply_jax_platform,
    notice_grace_s,
    wandb_defaults,
)
from engine.exit_codes import EX_FAILURE, EX_OK, EX_PREEMPTED
from engine.logs import log
from engine.notice import exit_with
from engine.storage import StorageError, check_storage_writable, resolve_storage
from engine.sweep_spaces import (
    METHODS,
    SweepSpec,
    first_values,
    grid_points,
    load_spec,
    trial_config,
    trial_params,
    tune_param_space,
)
from engine.sweep_tune import TrialStore, read_status
from engine.trainconfig import UsageError, validate_config

__all__ = [
    "METHODS",
    "SweepSpec",
    "TrialStore",
    "build_parser",
    "grid_points",
    "load_spec",
    "main",
    "read_status",
    "trial_config",
    "trial_params",
    "tune_param_space",
    "validate",
]

BACKENDS = ("tune", "wandb")


def default_storage() -> str:
    return (os.environ.get("PHANTOM_STORAGE") or "runs").rstrip("/") + "/sweeps"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m engine.sweep", description="Run a hyperparameter sweep over Ray."
    )
    parser.add_argument(
        "--kind",
        type=bounded_text,
        default="ppo_rl_study",
        help="search space: a name in engine/sweeps/ or a path to a .json file",
    )
    parser.add_argument(
        "--method",
        choices=METHODS,
        default=None,
        help="random or grid (default: the space file's method, else random)",
    )
    parser.add_argument("--run-cap", type=positive_int, default=900, help="max trials")
    parser.add_argument("--num-nodes", type=positive_int, default=1)
    parser.add_argument("--agents-per-node", type=positive_int, default=1)
    parser.add_argument("--tpu-per-task", type=non_negative_float, default=0.0)
    parser.add_argument(
        "--cpus-per-node",
        type=non_negative_float,
        default=0.0,
        help="CPUs of one node (default: smallest alive node's CPU count)",
    )
    parser.add_argument("--backend", choices=BACKENDS, default="tune")
    parser.add_argument(
        "--sweep-id", type=bounded_text, default="", help="default: derived from kind/method/cap"
    )
    parser.add_argument(
        "--storage",
        type=bounded_text,
        default=None,
        help="shared storage for trial checkpoints and sweep state (file:// or gs://; "
        "default $PHANTOM_STORAGE/sweeps or ./runs/sweeps)",
    )
    parser.add_argument(
        "--address", type=ray_address, default=None, help="Ray address (default $RAY_ADDRESS)"
    )
    parser.add_argument(
        "--max-failures", type=non_negative_int, default=3, help="retries per failed trial"
    )
    parser.add_argument("--trial-timesteps", type=positive_int, default=None)
    parser.add_argument("--checkpoint-every", type=positive_int, default=None)
    parser.add_argument("--seed", type=non_negative_int, default=0)
    parser.add_argument(
        "--wandb", choices=WANDB_MODES, default=None, help="default $WANDB_MODE or offline"
    )
    parser.add_argument("--wandb-project", type=bounded_text, default=None)
    parser.add_argument("--wandb-entity", type=bounded_text, default=None)
    parser.add_argument(
        "--validate-only",
        action="store_true",
        help="check flags and the search space, print the resolved settings as JSON, exit",
    )
    return parser


def _resolve_env_defaults(args: argparse.Namespace) -> None:
    """Fill flags left unset from the environment (engine.envvars); raises UsageError."""
    if args.storage is None:
        args.storage = default_storage()
    try:  # a broken variable is named even when a flag overrides it: wandb reads it too
        notice_grace_s()
        env = wandb_defaults()
    except EnvError as exc:
        raise UsageError(str(exc)) from None
    args.wandb = args.wandb or env["mode"]
    args.wandb_project = args.wandb_project or env["project"]
    args.wandb_entity = args.wandb_entity or env["entity"]


def validate(args: argparse.Namespace, local_checks: bool = True) -> tuple[SweepSpec, str]:
    """All checks that need no cluster; raises UsageError."""
    _resolve_env_defaults(args)
    spec = load_spec(args.kind)
    if args.method is None:
        args.method = spec.method or "random"
    elif spec.method and spec.method != args.method:
        raise UsageError(
            f"--method {args.method}: the search space {args.kind[:80]} says method "
            f"{spec.method}; give one of them"
        )
    try:
        resolve_storage(args.storage)
        if local_checks:
            check_storage_writable(args.storage)
    except StorageError as exc:
        raise UsageError(f"--storage: {exc}") from None
    if args.method == "grid":
        grid_points(spec)
    if args.backend == "wandb":
        if args.wandb != "online":
            raise UsageError(
                f"--backend wandb needs --wandb online (got {args.wandb}): a W&B sweep's "
                "controller lives on the W&B server, so it cannot run offline; "
                "use --backend tune for offline sweeps"
            )
        if not os.environ.get("WANDB_API_KEY"):
            raise UsageError("--backend wandb needs WANDB_API_KEY in the environment")
    kind_name = Path(args.kind).stem if args.kind.endswith(".json") else args.kind
    sweep_id = args.sweep_id or f"{kind_name}-{args.method}-cap{args.run_cap}-s{args.seed}"
    if not re.fullmatch(r"[A-Za-z0-9._-]{1,128}", sweep_id):
        raise UsageError(
            f"--sweep-id {sweep_id[:80]!r}: use 1-128 letters, digits, - _ . (it names a directory)"
        )
    # a sample trial must be a valid engine.train configuration
    sample = grid_points(spec)[0] if args.method == "grid" else first_values(spec)
    settings = {
        "engine_storage": args.storage,
        "wandb": "disabled",
        "trial_timesteps": args.trial_timesteps,
        "checkpoint_every": args.checkpoint_every,
    }
    try:
        cfg = trial_config(spec, sample, settings, run_name="validate")
        validate_config(cfg, local_checks=False)
    except (TypeError, ValueError) as exc:
        if isinstance(exc, UsageError):
            raise UsageError(f"--kind {args.kind[:80]}: a trial would fail: {exc}") from None
        raise UsageError(
            f"--kind {args.kind[:80]}: a trial setting has the wrong type ({exc})"
        ) from None
    if "://" not in args.storage and args.num_nodes > 1:
        log(
            f"warning: --storage {args.storage!r} is a local path; trials retried on another "
            "node need shared storage (file:///shared or gs://)",
            "sweep",
        )
    return spec, sweep_id


def main(argv: Sequence[str] | None = None) -> int:
    # before ray is imported: every trainer line reaches the job log as written (the console
    # parses some; Ray's dedup would fold the notice lines of different trials together)
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    parser = build_parser()
    try:
        apply_jax_platform()  # before anything imports jax
    except EnvError as exc:
        parser.error(str(exc))
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    try:
        spec, sweep_id = validate(args, local_checks=not args.validate_only)
    except UsageError as exc:
        parser.error(str(exc))
    if args.validate_only:
        shown = {k: v for k, v in vars(args).items() if k != "validate_only"}
        print(json.dumps({"sweep_id": sweep_id, "args": shown}, sort_keys=True), flush=True)
        return EX_OK
    try:
        if args.backend == "wandb":
            from engine.sweep_wandb import run_wandb

            summary: dict[str, Any] = run_wandb(args, spec)
        else:
            from engine.sweep_tune import run_tune

            summary = run_tune(args, spec, sweep_id)
    except ConnectionError as exc:
        log(f"error: cannot reach the Ray cluster (--address {args.address}): {exc}", "sweep")
        return EX_FAILURE
    except RuntimeError as exc:
        log(f"error: {exc}", "sweep")
        return EX_FAILURE
    print(json.dumps(summary, sort_keys=True, default=str), flush=True)
    if summary.get("preempted"):
        log(
            f"preemption notice: sweep {summary.get('sweep_id')} state saved and its trials "
            "stopped (each checkpoints at its step); exiting 75: resubmit with the same "
            "--sweep-id to resume",
            "sweep",
        )
        return EX_PREEMPTED
    return EX_OK if summary.get("completed") and not summary.get("errored") else EX_FAILURE


if __name__ == "__main__":
    exit_with(main())  # after a notice without the teardown: the grace is running
