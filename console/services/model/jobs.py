"""Jobs: their states, what was submitted, and their log lines."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum


class JobStatus(StrEnum):
    """A job's status: Ray's ``JobStatus`` names, plus LOST (the cluster no longer knows
    the job: its head was replaced), PREEMPTED (Ray says FAILED, but the entrypoint exited
    with the engine's "preempted, resumable" code: it wrote a checkpoint on the preemption
    notice, and its resubmission resumes at the step it reached) and UNKNOWN (the jobs API
    could not be asked)."""

    PENDING = "PENDING"
    RUNNING = "RUNNING"
    STOPPED = "STOPPED"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    PREEMPTED = "PREEMPTED"
    LOST = "LOST"
    UNKNOWN = "UNKNOWN"

    @classmethod
    def of(cls, name: str) -> JobStatus:
        """The status a cluster names; UNKNOWN for one this console does not know."""
        try:
            return cls(name)
        except ValueError:
            return cls.UNKNOWN

    @property
    def active(self) -> bool:
        return self in ACTIVE_JOBS

    @property
    def terminal(self) -> bool:
        return self in TERMINAL_JOBS


ACTIVE_JOBS = frozenset({JobStatus.PENDING, JobStatus.RUNNING})
TERMINAL_JOBS = frozenset(
    {JobStatus.STOPPED, JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.PREEMPTED}
)


class SubmissionState(StrEnum):
    """Where this console's own record of a submission stands (not the cluster's status,
    which is a ``JobStatus``): recorded but not yet accepted by the cluster, accepted, or
    withdrawn by a user's delete. The values are the journal's stored words."""

    PENDING = "pending"
    SUBMITTED = "submitted"
    DELETED = "deleted"


@dataclass(frozen=True)
class JobInfo:
    job_id: str
    status: JobStatus
    entrypoint: str = ""
    start_time: float | None = None
    end_time: float | None = None
    message: str = ""
    metadata: Mapping[str, str] = field(default_factory=dict)
    # The job's runtime env vars as the cluster reports them, secret values masked.
    env: Mapping[str, str] = field(default_factory=dict)
    # What the console expected in ``env`` and did not find (empty: nothing amiss).
    env_problems: tuple[str, ...] = ()
    # Its resubmission chain (``jobs.budget``): ended with an error, in a row, and preempted.
    errors_in_row: int = 0
    preemptions: int = 0
    # A sweep this console submitted: its id (the spec's, or learned from the job) and, on
    # the W&B backend, its page on the W&B server ("" when unknown).
    sweep_id: str = ""
    sweep_url: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.status, JobStatus):  # read back from JSON (journal, jobs.json)
            object.__setattr__(self, "status", JobStatus.of(str(self.status)))


@dataclass(frozen=True)
class LogLine:
    job_id: str
    text: str
    at: float


@dataclass(frozen=True)
class LogStreamClosed:
    """The log stream ended. ``job_status`` says whether the job really finished.

    Besides Ray's statuses it can be LOST (the job is gone with its head) or UNKNOWN (the
    dashboard is unreachable, so the job may well run on).
    """

    job_id: str
    job_status: JobStatus
    at: float
    refollows: int = 0  # times the stream ended while the job ran and was taken up again

    def __post_init__(self) -> None:
        if not isinstance(self.job_status, JobStatus):
            object.__setattr__(self, "job_status", JobStatus.of(str(self.job_status)))

    @property
    def early(self) -> bool:
        return self.job_status in (*ACTIVE_JOBS, JobStatus.UNKNOWN)
