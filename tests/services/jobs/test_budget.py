"""The retry budget tells preemptions from errors: the real registry, submitter, outcomes and
event sink on a real journal file, with the recovery's resubmit step composed as the facade
composes it. The only stand-in is the Ray head's job table (what the Jobs API answers)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from console.config import parse_config
from console.services.jobs.budget import SPENT, RetryBudget, RetryCounts
from console.services.jobs.registry import JobRegistry, Submitter
from console.services.jobs.spec import SubmitSpec
from console.services.model import ActionResult, JobInfo, JobStatus, Update, to_jsonable
from console.services.record.journal import Journal
from console.services.record.outcomes import JobOutcomes, Resubmit
from console.services.record.sink import EventSink
from console.status import collect_status
from tests.support.fake_services import FakeServices


class Head:
    """The Ray head's job table: what submit and job status answer."""

    def __init__(self) -> None:
        self.jobs: dict[str, JobInfo] = {}

    async def submit(self, spec: SubmitSpec) -> JobInfo:
        self.jobs[spec.submission_id] = JobInfo(spec.submission_id, JobStatus.RUNNING)
        return self.jobs[spec.submission_id]

    async def job_status(self, job_id: str) -> JobInfo:
        return self.jobs[job_id]


class Console:
    """The facade's parts for jobs and their resubmission, on one journal file."""

    def __init__(self, path: Path, max_error_retries: int = 3) -> None:
        self.journal = Journal(path)
        self.published: list[Update] = []
        self.sink = EventSink(self.journal, self.published.append)
        self.registry = JobRegistry(self.journal)
        self.outcomes = JobOutcomes(self.journal)
        self.head = Head()
        self.submitter = Submitter(
            self.head,  # type: ignore[arg-type]
            self.registry,
            self.sink,
            self.published.append,
        )
        self.budget = RetryBudget(self.registry, self.outcomes, self.sink, max_error_retries)
        # The recovery's resubmit step, as Facade builds it.
        self.step: Resubmit = self.outcomes.skipping_ended(
            self.budget.guard(self.submitter.resubmit)
        )

    async def submit(self) -> str:
        info = await self.submitter.submit(SubmitSpec(train_args="--algo ppo"), "user")
        return info.job_id

    def ends(self, job_id: str, status: JobStatus, message: str = "") -> None:
        """The jobs poller sees the job end (a final state is recorded, as the facade does)."""
        self.head.jobs[job_id] = JobInfo(job_id, status, message=message)
        self.outcomes.note([self.head.jobs[job_id]])

    async def recover(self, job_id: str) -> tuple[ActionResult, str]:
        """The head is lost with ``job_id`` on its last list: the resubmit step runs."""
        res = await self.step([job_id])
        return res, res.data.get("resubmitted", {}).get(job_id, "")

    def spent_rows(self) -> list[dict[str, object]]:
        return [dict(e.data) for e in self.journal.query(kinds=[SPENT])]

    def close(self) -> None:
        self.sink.close()
        self.journal.close()


@pytest.fixture
def console(tmp_path: Path):  # type: ignore[no-untyped-def]
    c = Console(tmp_path / "journal.sqlite")
    try:
        yield c
    finally:
        c.close()


async def test_three_errors_in_a_row_stop_the_resubmission(console: Console) -> None:
    job = await console.submit()
    for n in (1, 2):
        console.ends(job, JobStatus.FAILED, "Job entrypoint command failed with exit code 1")
        res, new = await console.recover(job)
        assert res.ok and new, f"error {n} of 3 is retried"
        assert console.budget.counts(new) == RetryCounts(errors=n, preemptions=0)
        job = new
    console.ends(job, JobStatus.FAILED, "Job entrypoint command failed with exit code 1")
    res, new = await console.recover(job)
    assert res.ok and not new and res.data["spent"] == {job: 3}
    assert "retry budget spent" in res.message
    assert console.registry.get(job).superseded_by == ""  # type: ignore[union-attr]
    assert console.spent_rows() == [
        {
            "job_id": job,
            "errors": 3,
            "max_error_retries": 3,
            "setting": "recovery.max_error_retries",
        }
    ]
    # ...also for a console started afterwards: the counts live in the journal.
    again = Console(Path(console.journal.path))
    try:
        assert again.budget.counts(job) == RetryCounts(errors=3, preemptions=0)
        assert (await again.recover(job))[1] == ""
    finally:
        again.close()


async def test_preemptions_in_between_never_count(console: Console) -> None:
    """error, lost with its head, error, exit 75 (PREEMPTED), error: three errors in a row
    with two preemptions between them; the preemptions were all resubmitted."""
    job = await console.submit()
    console.ends(job, JobStatus.FAILED, "exit code 1")
    _, job = await console.recover(job)
    _, job = await console.recover(job)  # lost with the head: no final state seen
    assert console.budget.counts(job) == RetryCounts(errors=1, preemptions=1)
    console.ends(job, JobStatus.FAILED, "exit code 1")
    _, job = await console.recover(job)
    console.ends(job, JobStatus.PREEMPTED, "exit code 75")  # checkpointed on a notice
    res, job = await console.recover(job)
    assert res.ok and job
    assert console.budget.counts(job) == RetryCounts(errors=2, preemptions=2)
    # Preemptions alone never spend it, however many.
    for _ in range(5):
        _, job = await console.recover(job)
        assert job
    console.ends(job, JobStatus.FAILED, "exit code 1")
    res, new = await console.recover(job)
    assert not new and res.data["spent"] == {job: 3}
    assert console.budget.annotate(JobInfo(job, JobStatus.FAILED)).preemptions == 7


async def test_a_success_resets_the_count(console: Console) -> None:
    job = await console.submit()
    for _ in range(2):
        console.ends(job, JobStatus.FAILED, "exit code 1")
        _, job = await console.recover(job)
    console.ends(job, JobStatus.SUCCEEDED)
    res, new = await console.recover(job)  # a run seen to finish is never run again
    assert not new and res.data["ended"] == {job: "SUCCEEDED"}
    # A user relaunches it (same spec): its errors start from zero.
    spec = console.registry.get(job).relaunch_spec()  # type: ignore[union-attr]
    info = await console.submitter.submit(spec, "user", resubmitted_from=job)
    console.ends(info.job_id, JobStatus.FAILED, "exit code 1")
    assert console.budget.counts(info.job_id) == RetryCounts(errors=1, preemptions=0)
    _, new = await console.recover(info.job_id)
    assert new and console.spent_rows() == []


async def test_no_retries_configured_is_the_old_rule(tmp_path: Path) -> None:
    """max_error_retries = 0: a job that failed is never resubmitted; a lost one still is."""
    c = Console(tmp_path / "journal.sqlite", max_error_retries=0)
    try:
        lost = await c.submit()
        assert (await c.recover(lost))[1]
        failed = await c.submit()
        c.ends(failed, JobStatus.FAILED, "exit code 1")
        res, new = await c.recover(failed)
        assert not new and res.data["spent"] == {failed: 1}
    finally:
        c.close()


def test_the_setting_and_its_example() -> None:
    from console.config.example import example_config

    assert parse_config({}).recovery.max_error_retries == 3
    assert parse_config({"recovery": {"max_error_retries": 5}}).recovery.max_error_retries == 5
    assert "max_error_retries = 3" in example_config()


async def test_status_json_carries_both_counts(console: Console) -> None:
    job = await console.submit()
    console.ends(job, JobStatus.FAILED, "exit code 1")
    _, job = await console.recover(job)
    _, job = await console.recover(job)  # lost with its head
    console.ends(job, JobStatus.FAILED, "exit code 1")
    services = FakeServices("healthy")
    annotated = console.budget.annotate(console.head.jobs[job])
    services.jobs = {job: annotated}
    status = await collect_status(services, refresh=False)
    (row,) = json.loads(json.dumps(status))["jobs"]
    assert (row["job_id"], row["errors_in_row"], row["preemptions"]) == (job, 2, 1)
    assert (
        to_jsonable(console.budget.annotate(JobInfo("not-ours", JobStatus.FAILED)))["errors_in_row"]
        == 0
    )
