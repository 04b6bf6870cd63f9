"""Job status transitions between two listings of a cluster's jobs, as journal events.

The first poll is a baseline (no transitions) unless ``report_existing``. A listing that
fails raises: an unreachable head says nothing about its jobs, so nothing is reported LOST
until the cluster answers again and no longer knows an active job.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Iterable
from typing import NamedTuple

from console.services.jobs.spec import META_MODE, META_SWEEP_ID
from console.services.model import ACTIVE_JOBS, Event, EventKind, JobInfo, JobStatus
from console.services.recovery.diagnosis import job_env_text


class JobTransition(NamedTuple):
    """A job changed status between two polls. ``old_status`` None: first seen;
    ``new_status`` LOST: an active job vanished from the cluster (its head was replaced)."""

    job: JobInfo
    old_status: str | None
    new_status: str

    def to_event(self, at: float) -> Event:
        old = self.old_status or "new"
        return Event(
            at=at,
            kind=EventKind.JOB_STATE,
            message=f"job {self.job.job_id} {old} -> {self.new_status}",
            data={
                "job_id": self.job.job_id,
                "old_status": self.old_status,
                "new_status": self.new_status,
                "entrypoint": self.job.entrypoint,
                "mode": self.job.metadata.get(META_MODE, ""),
                "sweep_id": self.job.metadata.get(META_SWEEP_ID, ""),
                "message": self.job.message,
            },
        )


class JobWatcher:
    def __init__(
        self, list_jobs: Callable[[], Awaitable[list[JobInfo]]], *, report_existing: bool = False
    ) -> None:
        self._list_jobs = list_jobs
        self.report_existing = report_existing
        self.known: dict[str, JobInfo] = {}
        self._primed = False
        self._env_flagged: set[str] = set()

    async def poll(self) -> list[JobTransition]:
        current = {j.job_id: j for j in await self._list_jobs()}
        out: list[JobTransition] = []
        report = self._primed or self.report_existing
        for job_id, job in current.items():
            before = self.known.get(job_id)
            if before is None:
                if report:
                    out.append(JobTransition(job, None, job.status))
            elif before.status != job.status:
                out.append(JobTransition(job, before.status, job.status))
        for job_id, before in self.known.items():
            if job_id not in current and before.status in ACTIVE_JOBS:
                lost = dataclasses.replace(before, status=JobStatus.LOST)
                out.append(JobTransition(lost, before.status, JobStatus.LOST))
        self.known = current
        self._primed = True
        return out

    def already_flagged(self, job_ids: Iterable[str]) -> None:
        """Jobs whose env was flagged before (in the journal): not flagged again."""
        self._env_flagged.update(job_ids)

    def new_env_flags(self) -> list[JobInfo]:
        """Jobs seen with ``env_problems`` that were not flagged yet (each job once)."""
        out = [
            j for j in self.known.values() if j.env_problems and j.job_id not in self._env_flagged
        ]
        self._env_flagged.update(j.job_id for j in out)
        return out


def env_event(job: JobInfo, at: float) -> Event:
    """The journal row for a job started without the env the console expected."""
    return Event(
        at=at,
        kind=EventKind.JOB_ENV,
        message=job_env_text(job.job_id, job.env_problems),
        actor="jobs",
        data={"job_id": job.job_id, "problems": list(job.env_problems)},
    )
