"""How jobs ended, as the console saw it: terminal means terminal.

Ray keeps a job's status on its head only. When a preempted head is replaced, the new one
knows nothing of the jobs before it, so a job that had SUCCEEDED would read as LOST ("the
cluster no longer knows it") and a script waiting for it would fail. The first final status
the console sees for a job (SUCCEEDED, FAILED, STOPPED) is written here, in the journal's
database (table ``job_outcomes``): beside the job registry and its resubmission chain, in the
same crash-safe file every front end opens, so it survives head replacements, console
restarts and is shared by a second console or a script. A job's final status never changes
afterwards (Ray's do not either), so the first one recorded wins.

PREEMPTED (a checkpoint on a notice) and LOST are not final: a resubmission carries the job on.
"""

from __future__ import annotations

import logging
import sqlite3
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import replace
from typing import Any

from console.services.errors import UnknownJob
from console.services.model import ActionResult, JobInfo, JobStatus, Resubmit
from console.services.record.journal import Journal, JournalError

log = logging.getLogger(__name__)

FINAL = frozenset({JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.STOPPED})
DONE = frozenset({JobStatus.SUCCEEDED, JobStatus.STOPPED})  # never resubmitted
LOST_MESSAGE = "the cluster no longer knows it (its head was replaced)"


async def resubmit_except(
    resubmit: Resubmit,
    job_ids: Sequence[str],
    held: dict[str, Any],
    why: str,
    key: str,
) -> ActionResult:
    """Resubmit ``job_ids`` but those ``held`` back (job -> what to say of it), and say so in
    the result's message and under ``data[key]``: a step that held every job still succeeds
    (the cluster is back; those jobs need no run, or a person)."""
    if not held:
        return await resubmit(job_ids)
    note = f"not resubmitted, {why}: " + ", ".join(f"{j} {v}" for j, v in held.items())
    left = [j for j in job_ids if j not in held]
    if not left:
        return ActionResult("resubmit", True, 0.0, message=note, data={key: held})
    res = await resubmit(left)
    return replace(res, message=f"{res.message}; {note}", data={**res.data, key: held})


class JobOutcomes:
    """Final job states in the journal's ``job_outcomes`` table."""

    def __init__(self, journal: Journal, *, clock: Callable[[], float] = time.time) -> None:
        self.journal = journal
        self._clock = clock
        self._recorded: set[str] | None = None  # ids known to be in the table (this process)

    def note(self, jobs: Iterable[JobInfo]) -> list[JobInfo]:
        """Record the final ones among ``jobs`` that are not recorded yet; returns those."""
        if self._recorded is None:
            self._recorded = {r[0] for r in self._read("SELECT job_id FROM job_outcomes")}
        new = [j for j in jobs if j.status in FINAL and j.job_id not in self._recorded]
        if not new:
            return []
        now = self._clock()
        try:
            with self.journal.transaction() as db:
                db.executemany(
                    "INSERT OR IGNORE INTO job_outcomes "
                    "(job_id, status, message, entrypoint, ended_at, recorded_at) "
                    "VALUES (?, ?, ?, ?, ?, ?)",
                    [
                        (
                            j.job_id,
                            str(j.status),
                            self.journal.scrub.text(j.message),
                            self.journal.scrub.text(j.entrypoint),
                            j.end_time,
                            now,
                        )
                        for j in new
                    ],
                )
        except (sqlite3.Error, JournalError) as exc:
            log.warning("job outcomes not recorded: %s", exc)
            return []
        self._recorded.update(j.job_id for j in new)
        return new

    def get(self, job_id: str) -> JobInfo | None:
        """The job as it ended, if the console saw it end."""
        rows = self._read(
            "SELECT status, message, entrypoint, ended_at FROM job_outcomes WHERE job_id = ?",
            (job_id,),
        )
        if not rows:
            return None
        status, message, entrypoint, ended_at = rows[0]
        return JobInfo(
            job_id=job_id,
            status=status,
            entrypoint=entrypoint,
            end_time=None if ended_at is None else float(ended_at),
            message=message,
        )

    def ended(self) -> dict[str, float]:
        """When each recorded job ended: the cluster's end time, else when it was recorded
        (a job that ended while no console watched is recorded when the next one sees it)."""
        rows = self._read("SELECT job_id, COALESCE(ended_at, recorded_at) FROM job_outcomes")
        return {str(job): float(at) for job, at in rows if at is not None}

    def with_ended(self, listed: list[JobInfo], ours: Iterable[str]) -> list[JobInfo]:
        """``listed`` (the cluster's jobs) plus the jobs of ``ours`` it no longer lists that
        ended while the console watched (a replaced head lists only its own), after them."""
        have = {j.job_id for j in listed}
        gone = [job_id for job_id in ours if job_id not in have]
        ended = [info for info in map(self.get, gone) if info is not None]
        return listed + ended

    async def status(
        self,
        job_id: str,
        ask: Callable[[str], Awaitable[JobInfo]],
        *,
        ours: Callable[[str], bool],
    ) -> JobInfo:
        """The job's status: the cluster's answer (recorded when final); when the cluster
        cannot answer, how the job ended if the console saw it end; else, for a job of this
        console (``ours``) that the cluster no longer knows, LOST. Raises what ``ask`` raised
        otherwise (``UnknownJob`` for an id nobody knows, the head being unreachable)."""
        try:
            info = await ask(job_id)
        except Exception as exc:
            ended = self.get(job_id)  # it ended before its head was lost: it still did
            if ended is not None:
                return ended
            if not isinstance(exc, UnknownJob) or not ours(job_id):
                raise
            return JobInfo(job_id, JobStatus.LOST, message=LOST_MESSAGE)
        self.note([info])
        return info

    def skipping_ended(self, resubmit: Resubmit) -> Resubmit:
        """``resubmit`` for the jobs that did not end. The recovery picks the jobs that were
        active on the lost head from its last look at them, which can be a poll older than
        the job's end: a job seen to succeed (or stopped) is not run a second time. One seen
        to fail goes on: whether it is tried again is the retry budget's (``jobs.budget``)."""

        async def unfinished(job_ids: Sequence[str]) -> ActionResult:
            ended = {
                j: str(info.status)
                for j in job_ids
                if (info := self.get(j)) is not None and info.status in DONE
            }
            return await resubmit_except(resubmit, job_ids, ended, "already ended", "ended")

        return unfinished

    def _read(self, sql: str, args: tuple[str, ...] = ()) -> list[tuple[Any, ...]]:
        try:
            return self.journal.read(sql, args)
        except (sqlite3.Error, JournalError) as exc:
            log.warning("job outcomes unreadable: %s", exc)
            return []
