"""Job status transitions between two listings."""

from __future__ import annotations

from console.services.jobs.watcher import JobWatcher
from console.services.model import JobInfo, JobStatus


async def test_watcher_reports_new_changed_and_lost_jobs() -> None:
    """The watcher's diffing, fed by a listing (the watcher is the unit here)."""

    class Listing:
        def __init__(self) -> None:
            self.jobs: list[JobInfo] = []

        async def list(self) -> list[JobInfo]:
            return list(self.jobs)

    listing = Listing()
    watcher = JobWatcher(listing.list, report_existing=True)
    listing.jobs = [JobInfo("a", "RUNNING"), JobInfo("done", "SUCCEEDED")]
    assert [(t.job.job_id, t.old_status, t.new_status) for t in await watcher.poll()] == [
        ("a", None, "RUNNING"),
        ("done", None, "SUCCEEDED"),
    ]
    listing.jobs = [JobInfo("a", "FAILED"), JobInfo("b", "PENDING"), JobInfo("done", "SUCCEEDED")]
    assert [tuple(t)[1:] for t in await watcher.poll()] == [
        ("RUNNING", "FAILED"),
        (None, "PENDING"),
    ]
    listing.jobs = []  # head replaced: the new cluster knows no jobs
    (lost,) = await watcher.poll()
    assert (lost.job.job_id, lost.old_status, lost.new_status) == ("b", "PENDING", JobStatus.LOST)
    assert lost.job.status == JobStatus.LOST
