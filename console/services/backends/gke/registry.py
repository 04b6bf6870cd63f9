"""The workloads this console created on GKE, and their specs (the journal's database).

A workload is recorded (``pending``) before the cluster is asked, then ``submitted``; a
user's delete marks it ``deleted``. Recovery resubmits a Failed JobSet from the recorded
spec under the same name and run name, so it resumes from its checkpoints; ``submissions``
counts how often. Specs keep secrets as ``$NAME`` references (``WorkloadSpec`` refuses
inline ones), so the database never holds a token.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from console.services.jobs.workload import WorkloadSpec
from console.services.record.journal import Journal

log = logging.getLogger(__name__)

PENDING, SUBMITTED, DELETED = "pending", "submitted", "deleted"
_COLUMNS = ("name", "spec", "created_at", "actor", "state", "submissions")


@dataclass(frozen=True)
class RecordedWorkload:
    name: str
    spec: WorkloadSpec
    created_at: float
    actor: str = ""
    state: str = SUBMITTED
    submissions: int = 1


class WorkloadRegistry:
    """Thread-safe (the journal's lock); every read goes to the database, so several front
    ends on one machine see each other's workloads."""

    def __init__(self, journal: Journal) -> None:
        self.journal = journal

    def record(self, spec: WorkloadSpec, actor: str, at: float) -> None:
        """Record (or re-record) ``spec`` as pending; a resubmission counts one more."""
        with self.journal.transaction() as db:
            row = db.execute(
                "SELECT submissions FROM workloads WHERE name = ?", (spec.name,)
            ).fetchone()
            if row is None:
                db.execute(
                    f"INSERT INTO workloads ({', '.join(_COLUMNS)}) VALUES (?,?,?,?,?,?)",
                    (spec.name, spec.to_json(), float(at), actor, PENDING, 1),
                )
            else:
                db.execute(
                    "UPDATE workloads SET spec = ?, created_at = ?, actor = ?, state = ?, "
                    "submissions = ? WHERE name = ?",
                    (spec.to_json(), float(at), actor, PENDING, int(row[0]) + 1, spec.name),
                )

    def mark(self, name: str, state: str) -> None:
        with self.journal.transaction() as db:
            db.execute("UPDATE workloads SET state = ? WHERE name = ?", (state, name))

    def forget(self, name: str) -> None:
        with self.journal.transaction() as db:
            db.execute("DELETE FROM workloads WHERE name = ?", (name,))

    def get(self, name: str) -> RecordedWorkload | None:
        rows = self.journal.read(
            f"SELECT {', '.join(_COLUMNS)} FROM workloads WHERE name = ?", (name,)
        )
        return _recorded(rows[0]) if rows else None

    def all(self) -> list[RecordedWorkload]:
        rows = self.journal.read(f"SELECT {', '.join(_COLUMNS)} FROM workloads ORDER BY created_at")
        return [w for w in (_recorded(r) for r in rows) if w is not None]

    def names(self) -> set[str]:
        return {r[0] for r in self.journal.read("SELECT name FROM workloads")}


def _recorded(row: tuple[Any, ...]) -> RecordedWorkload | None:
    data = dict(zip(_COLUMNS, row, strict=True))
    try:
        spec = WorkloadSpec.from_json(data.pop("spec"))
    except (ValueError, TypeError) as exc:
        log.warning("workload registry: %s has an unreadable spec (%s)", data["name"], exc)
        return None
    return RecordedWorkload(spec=spec, **data)
