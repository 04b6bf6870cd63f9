"""Metric sinks for SB3's logger (stderr progress, W&B) and the W&B run lifecycle.

The W&B API key is never handled here: wandb reads ``WANDB_API_KEY`` from the
environment itself. Nothing in this module prints configuration values that
could contain secrets.
"""

from __future__ import annotations

import hashlib
import math
import re
import sys
import time
from pathlib import Path
from typing import Any

from stable_baselines3.common.logger import KVWriter

WANDB_MODES = ("online", "offline", "disabled")

# keys shown on the one-line stderr progress report, in this order
_PROGRESS_KEYS = (
    ("rollout/ep_rew_mean", "ep_rew_mean"),
    ("rollout/ep_len_mean", "ep_len_mean"),
    ("time/fps", "fps"),
    ("train/loss", "loss"),
    ("train/value_loss", "value_loss"),
    ("rollout/exploration_rate", "eps"),
    ("behaviour/alpha", "alpha"),
    ("eval/mean_reward", "eval_reward"),
    ("eval/success_rate", "eval_success"),
)


def log(msg: str) -> None:
    """One diagnostic line on stderr (stdout is reserved for results)."""
    print(f"[engine] {msg}", file=sys.stderr, flush=True)


def _numeric(value: Any) -> float | None:
    try:
        out = float(value)
    except (TypeError, ValueError):
        return None
    return out if math.isfinite(out) else None


class ProgressWriter(KVWriter):
    """One ``[engine] progress step=N/T ...`` line per logger dump; remembers the last values."""

    def __init__(self, total: int, min_interval_steps: int = 0) -> None:
        self.total = total
        self.min_interval_steps = min_interval_steps
        self.last_step = -(10**18)
        self.last_values: dict[str, float] = {}
        self.started = time.monotonic()

    def write(
        self, key_values: dict[str, Any], key_excluded: dict[str, tuple[str, ...]], step: int = 0
    ) -> None:
        for key, value in key_values.items():
            num = _numeric(value)
            if num is not None:
                self.last_values[key] = num
        if step - self.last_step < self.min_interval_steps and step < self.total:
            return
        self.last_step = step
        parts = [f"step={step}/{self.total}", f"pct={100.0 * step / max(1, self.total):.1f}"]
        for key, short in _PROGRESS_KEYS:
            if key in key_values and _numeric(key_values[key]) is not None:
                parts.append(f"{short}={_numeric(key_values[key]):.4g}")
        log("progress " + " ".join(parts))

    def close(self) -> None:
        return None


class WandbWriter(KVWriter):
    """Forward every numeric SB3 metric to a W&B run, keyed on ``global_step``."""

    def __init__(self, run: Any) -> None:
        self.run = run

    def write(
        self, key_values: dict[str, Any], key_excluded: dict[str, tuple[str, ...]], step: int = 0
    ) -> None:
        data: dict[str, float] = {"global_step": float(step)}
        for key, value in key_values.items():
            excluded = key_excluded.get(key) or ()
            if "wandb" in excluded:
                continue
            num = _numeric(value)
            if num is not None:
                data[key] = num
        self.run.log(data)

    def close(self) -> None:
        return None


def wandb_run_id(run_name: str, project: str | None) -> str:
    """Deterministic W&B run id for a run name, so a resumed trainer continues the same run."""
    slug = re.sub(r"[^A-Za-z0-9_-]+", "-", run_name).strip("-")[:40] or "run"
    digest = hashlib.sha1(f"{project or ''}/{run_name}".encode()).hexdigest()[:8]
    return f"{slug}-{digest}"


def artifact_name(algo: str, run_name: str) -> str:
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", run_name).strip("-.")[:80] or "run"
    return f"phantom-{slug}" if slug.startswith(f"{algo}-") else f"phantom-{algo}-{slug}"


def start_wandb(
    mode: str,
    project: str | None,
    entity: str | None,
    run_name: str,
    config: dict[str, Any],
    resume_id: str | None,
    directory: str | None = None,
) -> Any:
    """Start (or continue) a W&B run; reuses a run an agent already started."""
    import wandb

    if wandb.run is not None:  # started by a W&B sweep agent: log into that run
        wandb.run.config.update(config, allow_val_change=True)
        run = wandb.run
    else:
        run = wandb.init(
            project=project or "phantom",
            entity=entity,
            name=run_name,
            id=resume_id or wandb_run_id(run_name, project),
            resume="allow",
            mode=mode,  # type: ignore[arg-type]
            config=config,
            job_type="train",
            dir=directory,
            settings=wandb.Settings(console="off", x_disable_stats=True),
        )
    run.define_metric("global_step")
    run.define_metric("*", step_metric="global_step")
    return run


def log_final_artifact(
    run: Any, algo: str, run_name: str, files: list[Path], step: int, metadata: dict[str, Any]
) -> str:
    """Log final weights as an artifact with aliases ``latest`` and ``step-<N>``."""
    import wandb

    artifact = wandb.Artifact(name=artifact_name(algo, run_name), type="model", metadata=metadata)
    for path in files:
        artifact.add_file(str(path), name=path.name)
    run.log_artifact(artifact, aliases=["latest", f"step-{step}"])
    return str(artifact.name)
