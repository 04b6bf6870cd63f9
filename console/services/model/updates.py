"""What the services publish: every update a subscriber may receive."""

from __future__ import annotations

from dataclasses import dataclass

from console.services.model.cadence import RunCadence, RunMetrics
from console.services.model.events import Event
from console.services.model.jobs import JobInfo, LogLine, LogStreamClosed
from console.services.model.pod import PodSnapshot
from console.services.model.recovery import RecoveryStatus


@dataclass(frozen=True)
class Progress:
    """A step of the services coming up, before there is a journal to write to: shown, never
    journaled (an ``Event`` is a journal row, and every one enters through the sink)."""

    at: float
    message: str


Update = (
    PodSnapshot
    | JobInfo
    | LogLine
    | LogStreamClosed
    | RunCadence
    | RunMetrics
    | Event
    | RecoveryStatus
    | Progress
)
