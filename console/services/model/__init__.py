"""Typed, immutable data the services publish and the front ends (TUI, --script, MCP) consume,
one module per subject: ``pod`` (the cluster as observed, the snapshot), ``jobs``, ``results``
(what an action returns, its typed reason), ``cadence``, ``events`` (journal rows, incident
causes and outcomes), ``recovery``, ``updates`` (what the bus carries) and ``jsonable``.

Data flows one way: services poll or stream the cluster and publish these values on an
``UpdateBus`` (``model.bus``: the machinery, not a published type, so not named here); the TUI
turns them into Textual messages, ``--script`` into JSON lines. Times are epoch seconds
(float) taken from an injected clock, never read at render time.

The published types are named here too: about 190 modules read them, and a reader of one
asks for "the model", not for the subject module a type lives in.
"""

from console.services.model.cadence import CadenceVerdict, RunCadence, RunMetrics
from console.services.model.events import (
    CAUSE_OF_KIND,
    Event,
    EventKind,
    IncidentCause,
    IncidentOutcome,
)
from console.services.model.jobs import (
    ACTIVE_JOBS,
    TERMINAL_JOBS,
    JobInfo,
    JobStatus,
    LogLine,
    LogStreamClosed,
    SubmissionState,
)
from console.services.model.jsonable import to_jsonable
from console.services.model.pod import (
    LOST_STATES,
    TRANSITIONAL_STATES,
    HostState,
    HostStatus,
    PodFailure,
    PodSnapshot,
    PodStatus,
    RayState,
    Reachability,
    WorkloadStatus,
)
from console.services.model.recovery import (
    RecoveryOutcome,
    RecoveryStatus,
    RecoveryStep,
    Resubmit,
    StepState,
    recovery_json,
)
from console.services.model.results import REFUSALS, ActionResult, HostResult, Reason, Verdict
from console.services.model.updates import Progress, Update

__all__ = [
    "ACTIVE_JOBS",
    "CAUSE_OF_KIND",
    "LOST_STATES",
    "REFUSALS",
    "TERMINAL_JOBS",
    "TRANSITIONAL_STATES",
    "ActionResult",
    "CadenceVerdict",
    "Event",
    "EventKind",
    "HostResult",
    "HostState",
    "HostStatus",
    "IncidentCause",
    "IncidentOutcome",
    "JobInfo",
    "JobStatus",
    "LogLine",
    "LogStreamClosed",
    "PodFailure",
    "PodSnapshot",
    "PodStatus",
    "Progress",
    "RayState",
    "Reachability",
    "Reason",
    "RecoveryOutcome",
    "RecoveryStatus",
    "RecoveryStep",
    "Resubmit",
    "RunCadence",
    "RunMetrics",
    "StepState",
    "SubmissionState",
    "Update",
    "Verdict",
    "WorkloadStatus",
    "recovery_json",
    "to_jsonable",
]
