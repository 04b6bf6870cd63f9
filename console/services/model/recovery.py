"""The recovery: its steps, outcome and status (and the status as JSON)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from console.services.model.jsonable import to_jsonable
from console.services.model.results import ActionResult


class StepState(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    OK = "ok"
    FAILED = "failed"
    SKIPPED = "skipped"  # not needed this time (e.g. no host to recreate) — shown, never silent


@dataclass(frozen=True)
class RecoveryStep:
    name: str
    state: str = StepState.PENDING
    started_at: float | None = None
    elapsed_s: float = 0.0
    attempts: int = 0
    hosts: Mapping[str, str] = field(default_factory=dict)  # host -> pending/running/ok/failed
    message: str = ""


class RecoveryOutcome(StrEnum):
    """How a recovery ended (``RecoveryStatus.outcome``; None while one runs, or before any)."""

    OK = "ok"
    FAILED = "failed"  # ``failed_step`` says where ("cancelled": it was cancelled)
    INTERRUPTED = "interrupted"  # its process stopped; the next one to watch finishes it


@dataclass(frozen=True)
class RecoveryStatus:
    active: bool
    auto: bool
    steps: tuple[RecoveryStep, ...] = ()
    trigger: str = ""
    started_at: float | None = None
    detected_at: float | None = None
    detect_s: float | None = None
    mttr_s: float | None = None
    outcome: RecoveryOutcome | None = None  # None while running / never run
    failed_step: str = ""  # a failed one: the step it stopped at
    owner: str = ""  # who runs recovery for this pod when it is another process ("pid 7 on h")

    @property
    def ok(self) -> bool:
        return self.outcome is RecoveryOutcome.OK

    @property
    def result_text(self) -> str:
        """The outcome for people: "ok", "failed: <step>" or "interrupted" ("" while one runs
        or before any). Shown, never parsed: decisions read ``outcome``."""
        if self.outcome is RecoveryOutcome.FAILED:
            return f"failed: {self.failed_step or '?'}"
        return "" if self.outcome is None else str(self.outcome)


# The recovery's resubmit step: the job ids to run again -> the step's result (a backend
# makes it; the retry budget and the ended-job filter wrap it).
Resubmit = Callable[[Sequence[str]], Awaitable[ActionResult]]


def recovery_json(status: RecoveryStatus) -> dict[str, Any]:
    """``status`` as the script and ``status --json`` print it: its fields (``outcome``,
    ``failed_step``), and ``result``, the outcome in words for people."""
    out: dict[str, Any] = to_jsonable(status)
    out["result"] = status.result_text
    return out
