"""What the console reads of the engine: one small module it imports instead of copying.

A launcher or the console that drives the engine depends on three things the engine
prints or returns, and nothing else:

- its exit codes (``engine.exit_codes``: 75 is "preempted, resumable");
- the one line a trainer logs once its preemption-notice checkpoint is complete
  (``engine.notice``'s ``NOTICE_LINE``, parsed with ``NOTICE_LINE_RE``);
- the lines naming a sweep's id (``starting sweep <id>``, ``resuming sweep <id>``,
  ``W&B sweep <id>``), which the console keeps so a recovered cluster relaunches the agents
  with the same id.

Importing this module costs the standard library only (no torch, ray or wandb).
"""

from __future__ import annotations

import re

from engine.exit_codes import EX_FAILURE, EX_OK, EX_PREEMPTED, EX_USAGE, MEANING
from engine.notice import NOTICE_LINE_RE

# The sweep driver's lines, formatted here and matched here (engine.sweep_tune, engine.sweep_wandb).
SWEEP_STARTING = "starting sweep {sweep_id}"
SWEEP_RESUMING = "resuming sweep {sweep_id}"
SWEEP_WANDB = "W&B sweep {sweep_id}"
SWEEP_ID_RE = re.compile(r"(?:W&B sweep|starting sweep|resuming sweep) ([A-Za-z0-9_.-]+)")

__all__ = [
    "EX_FAILURE",
    "EX_OK",
    "EX_PREEMPTED",
    "EX_USAGE",
    "MEANING",
    "NOTICE_LINE_RE",
    "SWEEP_ID_RE",
    "SWEEP_RESUMING",
    "SWEEP_STARTING",
    "SWEEP_WANDB",
]
