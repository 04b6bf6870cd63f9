"""Terminal means terminal: a job the console saw end keeps its end across head replacements
and restarts. The real registry, watcher and outcomes on a real journal file; the only
stand-in is the Ray head's job table (what the Jobs API lists and answers)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

import pytest

from console.services.errors import UnknownJob
from console.services.jobs.registry import JobRegistry, SubmittedJob
from console.services.jobs.spec import SubmitSpec
from console.services.jobs.watcher import JobWatcher
from console.services.model import ActionResult, JobInfo
from console.services.record.journal import Journal
from console.services.record.outcomes import JobOutcomes


class Head:
    """One Ray head's job table: a replaced head starts empty."""

    def __init__(self) -> None:
        self.jobs: dict[str, JobInfo] = {}

    def set(self, job_id: str, status: str) -> None:
        self.jobs[job_id] = JobInfo(job_id, status, entrypoint="python -m engine.train")

    def replaced(self) -> None:
        self.jobs = {}

    async def list(self) -> list[JobInfo]:
        return list(self.jobs.values())

    async def status(self, job_id: str) -> JobInfo:
        if job_id not in self.jobs:
            raise UnknownJob(f"no job {job_id!r}")
        return self.jobs[job_id]


class Unreachable(Exception):
    pass


def submitted(job_id: str, resubmitted_from: str = "") -> SubmittedJob:
    spec = SubmitSpec(mode="sweep", submission_id=job_id)
    return SubmittedJob(job_id, spec, submitted_at=1.0, resubmitted_from=resubmitted_from)


async def poll(watcher: JobWatcher, outcomes: JobOutcomes) -> list[tuple[str, str | None, str]]:
    """What the facade's jobs poller does with one listing."""
    transitions = await watcher.poll()
    outcomes.note(watcher.known.values())
    return [(t.job.job_id, t.old_status, t.new_status) for t in transitions]


async def test_a_chain_that_succeeded_stays_succeeded_after_its_head_and_the_console_go(
    tmp_path: Path,
) -> None:
    path = tmp_path / "journal.sqlite"
    head = Head()
    journal = Journal(path)
    registry, outcomes = JobRegistry(journal), JobOutcomes(journal)
    watcher = JobWatcher(head.list)
    mine = registry.__contains__

    registry.add(submitted("sweep-a"))
    head.set("sweep-a", "RUNNING")
    assert await poll(watcher, outcomes) == []  # the baseline
    head.replaced()  # a head preemption: the running sweep is LOST, and resubmitted
    assert await poll(watcher, outcomes) == [("sweep-a", "RUNNING", "LOST")]
    assert (await outcomes.status("sweep-a", head.status, ours=mine)).status == "LOST"
    registry.add(submitted("sweep-b", resubmitted_from="sweep-a"))
    head.set("sweep-b", "RUNNING")
    await poll(watcher, outcomes)
    head.set("sweep-b", "SUCCEEDED")
    assert await poll(watcher, outcomes) == [("sweep-b", "RUNNING", "SUCCEEDED")]

    head.replaced()  # a later head preemption: the new head knows nothing of sweep-b
    assert await poll(watcher, outcomes) == []  # a finished job is not LOST
    info = await outcomes.status("sweep-b", head.status, ours=mine)
    assert (info.status, info.entrypoint) == ("SUCCEEDED", "python -m engine.train")
    listed = outcomes.with_ended(await head.list(), sorted(registry.ids()))
    assert [(j.job_id, j.status) for j in listed] == [("sweep-b", "SUCCEEDED")]  # status shows it
    journal.close()

    # A restarted console (or a script, or a second console) on the same journal.
    journal = Journal(path)
    registry, outcomes = JobRegistry(journal), JobOutcomes(journal)
    mine = registry.__contains__
    sweep_a = registry.get("sweep-a")
    assert sweep_a is not None and sweep_a.superseded_by == "sweep-b"  # `last` follows it
    assert (await outcomes.status("sweep-b", head.status, ours=mine)).status == "SUCCEEDED"

    async def down(job_id: str) -> JobInfo:
        raise Unreachable("the dashboard does not answer")

    # Final is final even while the head is down; an unfinished job still says why not.
    assert (await outcomes.status("sweep-b", down, ours=mine)).status == "SUCCEEDED"
    with pytest.raises(Unreachable):
        await outcomes.status("sweep-a", down, ours=mine)
    with pytest.raises(UnknownJob):  # nobody's job: unknown, not LOST
        await outcomes.status("someone-else", head.status, ours=mine)
    journal.close()


async def test_the_first_final_state_wins_and_only_final_states_are_kept(tmp_path: Path) -> None:
    with Journal(tmp_path / "j.sqlite") as journal:
        outcomes = JobOutcomes(journal, clock=lambda: 5.0)
        job = JobInfo("j1", "STOPPED", message="stopped by alice", end_time=4.0)
        assert outcomes.note([job, JobInfo("j2", "RUNNING"), JobInfo("j3", "PREEMPTED")]) == [job]
        assert outcomes.note([dataclasses.replace(job, status="FAILED")]) == []
        assert JobOutcomes(journal).get("j1") == JobInfo(
            "j1", "STOPPED", message="stopped by alice", end_time=4.0
        )
        assert JobOutcomes(journal).get("j2") is None
        assert JobOutcomes(journal).get("j3") is None  # resumable: a resubmission carries on


async def test_the_recovery_does_not_run_a_job_again_that_it_saw_finish(tmp_path: Path) -> None:
    """The recovery's list of jobs active on the lost head can be a poll older than a job's
    end: a job the console saw SUCCEED is not resubmitted (before: it ran a second time)."""
    sent: list[list[str]] = []

    async def resubmit(job_ids: Sequence[str]) -> ActionResult:
        sent.append(list(job_ids))
        return ActionResult(
            "resubmit", True, 0.1, data={"resubmitted": {j: "new" for j in job_ids}}
        )

    with Journal(tmp_path / "j.sqlite") as journal:
        outcomes = JobOutcomes(journal)
        step = outcomes.skipping_ended(resubmit)
        outcomes.note([JobInfo("done", "SUCCEEDED")])
        res = await step(["done"])
        assert res.ok and sent == [] and res.data["ended"] == {"done": "SUCCEEDED"}
        assert "not resubmitted, already ended: done SUCCEEDED" in res.message
        res = await step(["done", "running"])
        assert sent == [["running"]] and res.data["resubmitted"] == {"running": "new"}
        await step(["running"])
        assert sent == [["running"], ["running"]]
