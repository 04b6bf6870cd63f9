"""One submission registry for Ray jobs and GKE workloads: the same operations and the same
states over each kind's table, an unreadable row skipped rather than failing a read."""

from __future__ import annotations

from pathlib import Path

import pytest

from console.services.backends.gke.registry import WorkloadRegistry
from console.services.jobs.registry import JobRegistry, SubmittedJob
from console.services.jobs.spec import SubmitSpec
from console.services.jobs.workload import WorkloadSpec
from console.services.model import SubmissionState
from console.services.record.journal import Journal


def test_jobs_and_workloads_share_one_registry_and_one_vocabulary(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "journal.sqlite")
    jobs, workloads = JobRegistry(journal), WorkloadRegistry(journal)
    jobs.add(SubmittedJob("j1", SubmitSpec(), 1.0, state=SubmissionState.PENDING))
    spec = WorkloadSpec(name="grpo", image="gcr.io/p/i:1", command="bash run.sh")
    workloads.record(spec, "user", 2.0)
    for reg, key in ((jobs, "j1"), (workloads, "grpo")):
        assert key in reg and reg.ids() == {key}
        assert reg.get(key).state == SubmissionState.PENDING  # type: ignore[union-attr]
        reg.mark(key, SubmissionState.SUBMITTED)
        assert reg.get(key).state is SubmissionState.SUBMITTED  # type: ignore[union-attr]
        with pytest.raises(ValueError, match="cannot update"):
            reg.update(key, spec="{}")
    workloads.record(spec, "watchdog", 3.0)  # a resubmission counts one more
    again = WorkloadRegistry(Journal(tmp_path / "journal.sqlite"))
    [w] = again.all()
    assert (w.submissions, w.actor, w.state, w.spec) == (2, "watchdog", "pending", spec)
    workloads.remove("grpo")
    assert workloads.get("grpo") is None and jobs.ids() == {"j1"}


def test_an_unreadable_row_is_skipped_not_fatal(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "journal.sqlite")
    workloads = WorkloadRegistry(journal)
    workloads.record(WorkloadSpec(name="ok"), "user", 1.0)
    with journal.transaction() as db:
        db.execute("INSERT INTO workloads (name, spec, created_at) VALUES ('bad', 'not json', 2.0)")
    assert [w.name for w in workloads.all()] == ["ok"] and workloads.get("bad") is None
    assert workloads.ids() == {"ok", "bad"}
