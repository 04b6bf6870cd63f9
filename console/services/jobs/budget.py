"""The retry budget: a job that keeps failing with an error stops being resubmitted; a job
that keeps being preempted never does.

A job and its resubmissions form a chain in the job registry (``resubmitted_from``). How
each link of the chain ended says what it cost:

* an **error**: the console saw it end FAILED (``job_outcomes``: a final state). An exit 75
  (``EX_PREEMPTED``: it checkpointed on a notice) is PREEMPTED, not FAILED, and never lands
  there;
* a **preemption**: it was replaced without a final state: lost with its head, or PREEMPTED;
* a **success** (SUCCEEDED) ends the run of errors: the budget starts again.

``errors`` counts the errors since the chain's last success, preemptions in between neither
counting nor resetting; ``preemptions`` counts the whole chain's. The recovery's resubmit step
(``guard``) submits a job that ended with an error again only while its errors in a row are
fewer than ``recovery.max_error_retries``; one it stops is journaled (``retry_budget_spent``:
the job, the count, the setting) instead of being run into the same error once more.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from console.services.jobs.registry import JobRegistry
from console.services.model import ActionResult, Event, EventKind, JobInfo, JobStatus, Resubmit
from console.services.record.outcomes import JobOutcomes, resubmit_except
from console.services.record.sink import EventSink

SPENT = EventKind.RETRY_BUDGET_SPENT  # the journal's kind for a resubmission it stopped
SETTING = "recovery.max_error_retries"


@dataclass(frozen=True)
class RetryCounts:
    errors: int = 0  # ended with an error, in a row (since the chain's last success)
    preemptions: int = 0  # replaced after a preemption (its head lost, or exit 75)


class RetryBudget:
    def __init__(
        self,
        registry: JobRegistry,
        outcomes: JobOutcomes,
        sink: EventSink,
        max_error_retries: int,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.registry = registry
        self.outcomes = outcomes
        self.max_error_retries = max_error_retries
        self._sink = sink
        self._clock = clock

    def counts(self, job_id: str) -> RetryCounts:
        """How ``job_id`` and the jobs it replaced ended, newest first."""
        errors = preemptions = 0
        counting_errors = True
        seen: set[str] = set()
        current = self.registry.get(job_id)
        link: str = job_id
        while link and link not in seen:
            seen.add(link)
            job = self.registry.get(link) if link != job_id else current
            ended = self.outcomes.get(link)
            if ended is not None and ended.status == JobStatus.SUCCEEDED:
                counting_errors = False
            elif ended is not None and ended.status == JobStatus.FAILED:
                errors += counting_errors
            elif ended is None and job is not None and job.superseded_by:
                preemptions += 1
            link = job.resubmitted_from if job is not None else ""
        return RetryCounts(errors=errors, preemptions=preemptions)

    def annotate(self, job: JobInfo) -> JobInfo:
        """``job`` with its chain's counts (a job this console did not submit has none)."""
        if job.job_id not in self.registry:
            return job
        c = self.counts(job.job_id)
        return replace(job, errors_in_row=c.errors, preemptions=c.preemptions)

    def guard(self, resubmit: Resubmit) -> Resubmit:
        """``resubmit`` for the jobs the budget allows: a job whose errors in a row reached
        ``max_error_retries`` is journaled and left out (the step itself succeeds: the
        cluster is back, this job needs a person)."""

        async def within_budget(job_ids: Sequence[str]) -> ActionResult:
            spent: dict[str, int] = {}
            for job_id in job_ids:
                ended = self.outcomes.get(job_id)
                if ended is None or ended.status != JobStatus.FAILED:
                    continue  # lost with its head or preempted: never held against it
                errors = self.counts(job_id).errors
                if errors >= self.max_error_retries:
                    spent[job_id] = errors
            for job_id, errors in spent.items():
                await self._sink.emit(
                    Event(
                        at=self._clock(),
                        kind=SPENT,
                        message=(
                            f"job {job_id} failed with an error {errors} time(s) in a row "
                            f"({SETTING} = {self.max_error_retries}): not resubmitted; fix the "
                            "error and submit it again"
                        ),
                        actor="watchdog",
                        data={
                            "job_id": job_id,
                            "errors": errors,
                            "max_error_retries": self.max_error_retries,
                            "setting": SETTING,
                        },
                    )
                )
            said = {j: f"({n} errors in a row)" for j, n in spent.items()}
            res = await resubmit_except(resubmit, job_ids, said, "retry budget spent", "spent")
            return replace(res, data={**res.data, "spent": spent}) if spent else res

        return within_budget
