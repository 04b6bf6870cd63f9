"""The workloads this console created on GKE: the submission registry's GKE adapter.

A workload is keyed by its name (table ``workloads``). Recovery resubmits a Failed JobSet
from the recorded spec under the same name and run name, so it resumes from its checkpoints;
``submissions`` counts how often. Specs keep secrets as ``$NAME`` references
(``WorkloadSpec`` refuses inline ones), so the database never holds a token.
"""

from __future__ import annotations

from dataclasses import dataclass

from console.services.jobs.submissions import SubmissionRegistry, Table
from console.services.jobs.workload import WorkloadSpec
from console.services.model import SubmissionState
from console.services.record.journal import Journal


@dataclass(frozen=True)
class RecordedWorkload:
    name: str
    spec: WorkloadSpec
    created_at: float
    actor: str = ""
    state: SubmissionState = SubmissionState.SUBMITTED
    submissions: int = 1

    def __post_init__(self) -> None:
        if not isinstance(self.state, SubmissionState):  # read back from the database
            object.__setattr__(self, "state", SubmissionState(self.state))


WORKLOADS: Table[RecordedWorkload] = Table(
    name="workloads",
    columns=("name", "spec", "created_at", "actor", "state", "submissions"),
    to_row=lambda w: (
        w.name,
        w.spec.to_json(),
        float(w.created_at),
        w.actor,
        str(w.state),
        int(w.submissions),
    ),
    from_row=lambda data: RecordedWorkload(
        **{**data, "spec": WorkloadSpec.from_json(data["spec"])}
    ),
)


class WorkloadRegistry(SubmissionRegistry[RecordedWorkload]):
    def __init__(self, journal: Journal) -> None:
        super().__init__(journal, WORKLOADS)

    def record(self, spec: WorkloadSpec, actor: str, at: float) -> None:
        """Record (or re-record) ``spec`` as pending; a resubmission counts one more."""
        with self.journal.transaction() as db:
            row = db.execute(
                "SELECT submissions FROM workloads WHERE name = ?", (spec.name,)
            ).fetchone()
            self._insert(
                db,
                RecordedWorkload(
                    spec.name,
                    spec,
                    at,
                    actor,
                    SubmissionState.PENDING,
                    1 if row is None else int(row[0]) + 1,
                ),
                replace=True,
            )
