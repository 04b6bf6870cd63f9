"""SB3 logger outputs: one-line stderr progress reports and W&B metrics.

Kept apart from ``engine.tracking`` because importing SB3 pulls in torch; the CLI
imports this module only once it is about to train.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

from stable_baselines3.common.logger import KVWriter

from engine.logs import log

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


def _numeric(value: Any) -> float | None:
    try:
        out = float(value)
    except (TypeError, ValueError):
        return None
    return out if math.isfinite(out) else None


class ProgressWriter(KVWriter):
    """One ``[engine] progress step=N/T ...`` line per logger dump; remembers the last values.

    ``on_dump(step)`` runs at every dump, also those the line skips (the trainer's step
    line, ``engine.contract.TRAINER_STEP``)."""

    def __init__(
        self,
        total: int,
        min_interval_steps: int = 0,
        on_dump: Callable[[int], None] | None = None,
    ) -> None:
        self.total = total
        self.on_dump = on_dump
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
        if self.on_dump is not None:
            self.on_dump(step)
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
    """Forward every numeric SB3 metric to a W&B run, keyed on ``global_step``.

    ``stopping()`` says a preemption notice came: its SIGTERM reaches wandb-core too, and a
    dump between that and the trainer's stop (an update in progress finishes first) would
    raise from the dead session and lose the notice checkpoint. Then the row is dropped and
    so are the later ones; the run's end, with the notice step's row, is written by a fresh
    session (``engine.tracking.end_preempted``). Without a notice a W&B error still raises.
    """

    def __init__(self, run: Any, stopping: Callable[[], bool] | None = None) -> None:
        self.run = run
        self.stopping = stopping
        self.lost = False  # the session died with the notice: nothing more is sent

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
        if self.lost:
            return
        try:
            self.run.log(data)
        except Exception:
            if self.stopping is None or not self.stopping():
                raise
            self.lost = True

    def close(self) -> None:
        return None
