"""What the console reads of the engine: one small module it imports instead of copying.

A launcher or the console that drives the engine depends on these things the engine
prints or returns, and nothing else:

- its exit codes (``engine.exit_codes``: 75 is "preempted, resumable");
- the one line a trainer logs once its preemption-notice checkpoint is complete
  (``engine.notice``'s ``NOTICE_LINE``, parsed with ``NOTICE_LINE_RE``);
- how a trainer is asked for a checkpoint now and trains on (``engine.notice``'s
  ``CheckpointAsk``): a trainer of a job the console submitted (``JOB_ID_ENV`` in its
  environment) registers in ``ask_dir()`` as ``<pid>.ask`` (job id, run name, start time);
  ``ASK_SIGNAL`` asks it; its answer is ``<pid>.done`` (``step uri seconds``) and the line
  ``ASKED_LINE`` (``ASKED_LINE_RE``);
- the line a trainer logs after each checkpoint it saves, with the pause the save caused to
  training (``CHECKPOINT_SAVED``, parsed by ``parse_checkpoint_saved``; from the end of the
  learn call before it to the next one's first rollout): the console's checkpoint cost;
- the step line a trainer logs at each logger dump and after each checkpoint, notice
  checkpoint and the final weights (``TRAINER_STEP``, parsed by ``parse_trainer_step``): the
  run, the trainer process (``attempt``), the checkpoint step it resumed from, the step it
  reached and the wall time; flushed line by line, so a SIGKILL loses at most one logging
  interval (a W&B run file loses whatever wandb-core had not written): the ledger's redone
  work;
- the environment variables the console sets for ``--checkpoint-every auto``
  (``CHECKPOINT_ADVICE_STEPS``, ``CHECKPOINT_ADVICE_REASON``);
- the lines naming a sweep's id (``starting sweep <id>``, ``resuming sweep <id>``,
  ``W&B sweep <id>``), which the console keeps so a recovered cluster relaunches the agents
  with the same id.
- how long a sweep driver may take to stop once told to (``SWEEP_DRIVER_EXIT_WITHIN_S``):
  the console lets a stopped Ray job's driver live that long before Ray SIGKILLs it.

Importing this module costs the standard library only (no torch, ray or wandb).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from engine.envvars import CHECKPOINT_ADVICE_REASON, CHECKPOINT_ADVICE_STEPS
from engine.exit_codes import EX_FAILURE, EX_OK, EX_PREEMPTED, EX_USAGE, MEANING
from engine.notice import (
    ASK_DIR_ENV,
    ASK_SIGNAL,
    ASKED_LINE_RE,
    JOB_ID_ENV,
    NOTICE_LINE_RE,
    ask_dir,
)

# The sweep driver's lines, formatted here and matched here (engine.sweep_tune, engine.sweep_wandb).
SWEEP_STARTING = "starting sweep {sweep_id}"
SWEEP_RESUMING = "resuming sweep {sweep_id}"
SWEEP_WANDB = "W&B sweep {sweep_id}"
SWEEP_ID_RE = re.compile(r"(?:W&B sweep|starting sweep|resuming sweep) ([A-Za-z0-9_.-]+)")

# After SIGTERM (a notice, or `ray job stop`) a sweep driver stops Ray Tune the way SIGUSR1 does
# (state saved, each trial's trainer checkpoints at its step) and exits 75. It gives up on Tune
# and exits 75 itself when its main thread has run no Python for DRIVER_STUCK_S or Tune has not
# stopped within DRIVER_STOP_S (engine.sweep_tune), and that exit has a backstop of
# DRIVER_STUCK_S more (engine.notice.exit_now): the driver is gone within their sum.
DRIVER_STUCK_S = 3.0
DRIVER_STOP_S = 20.0
SWEEP_DRIVER_EXIT_WITHIN_S = DRIVER_STOP_S + DRIVER_STUCK_S

# A trainer's line after each checkpoint it saves (engine.trainer), after ``[engine] ``; the
# seconds are the whole pause the save caused to training (``Trainer.checkpoint``).
CHECKPOINT_SAVED = "checkpoint step={step} at {uri} ({seconds:.3f}s)"
# the URI may hold spaces (a local path): anchor on the duration at the end instead
CHECKPOINT_SAVED_RE = re.compile(
    r"\[engine\] checkpoint step=(?P<step>\d+) at (?P<uri>.+) \((?P<seconds>\d+(?:\.\d+)?)s\)\s*$"
)


# A trainer's step line (engine.trainer), after ``[engine] ``: one line, ``key=value`` fields
# in this order; ``at`` is unix seconds. Run names are [A-Za-z0-9_.=-] (engine.trainconfig).
TRAINER_STEP = (
    "step run={run} attempt={attempt} resumed_from={resumed_from} step={step} at={at:.3f}"
)
# searched, not matched: Ray's driver log repeats a trial's lines behind "(pid=..., ip=...) "
TRAINER_STEP_RE = re.compile(
    r"\[engine\] step run=(?P<run>\S+) attempt=(?P<attempt>\S+) "
    r"resumed_from=(?P<resumed_from>\d+) step=(?P<step>\d+) at=(?P<at>\d+(?:\.\d+)?)\s*$"
)


@dataclass(frozen=True)
class TrainerStep:
    """One step line: trainer process ``attempt`` of ``run``, resumed from the checkpoint at
    ``resumed_from`` (0: from scratch), had reached ``step`` at ``at`` (unix seconds)."""

    run: str
    attempt: str
    resumed_from: int
    step: int
    at: float


def parse_trainer_step(line: str) -> TrainerStep | None:
    """The step a trainer's log line reports, or None for any other line."""
    m = TRAINER_STEP_RE.search(line)
    if m is None:
        return None
    return TrainerStep(
        m["run"], m["attempt"], int(m["resumed_from"]), int(m["step"]), float(m["at"])
    )


@dataclass(frozen=True)
class CheckpointSaved:
    step: int
    uri: str
    seconds: float


def parse_checkpoint_saved(line: str) -> CheckpointSaved | None:
    """The checkpoint a trainer's log line reports (with the save's duration), or None."""
    m = CHECKPOINT_SAVED_RE.search(line)
    if m is None:
        return None
    return CheckpointSaved(int(m["step"]), m["uri"], float(m["seconds"]))


__all__ = [
    "ASKED_LINE_RE",
    "ASK_DIR_ENV",
    "ASK_SIGNAL",
    "CHECKPOINT_ADVICE_REASON",
    "CHECKPOINT_ADVICE_STEPS",
    "CHECKPOINT_SAVED",
    "CHECKPOINT_SAVED_RE",
    "EX_FAILURE",
    "EX_OK",
    "EX_PREEMPTED",
    "EX_USAGE",
    "JOB_ID_ENV",
    "MEANING",
    "NOTICE_LINE_RE",
    "SWEEP_ID_RE",
    "SWEEP_RESUMING",
    "SWEEP_STARTING",
    "SWEEP_WANDB",
    "TRAINER_STEP",
    "TRAINER_STEP_RE",
    "CheckpointSaved",
    "TrainerStep",
    "ask_dir",
    "parse_checkpoint_saved",
    "parse_trainer_step",
]
