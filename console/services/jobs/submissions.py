"""One registry of what this console submitted: Ray jobs and GKE workloads alike.

A submission is recorded (``PENDING``) before the cluster is asked, then ``SUBMITTED``; a
user's delete marks it ``DELETED``. Every read goes to the journal's database, so several
front ends on one machine see each other's submissions, and a console restart finds them.
What differs between a Ray job and a GKE workload (its table, its key, its spec, what else it
remembers) is a ``Table``: a small adapter beside the kind's own code.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from console.services.model import SubmissionState
from console.services.record.journal import Journal

log = logging.getLogger(__name__)

R = TypeVar("R")


@dataclass(frozen=True)
class Table(Generic[R]):
    """How one kind of submission is stored: its table, key column (the submission id),
    columns (key first, then the time it was recorded), and the row <-> record mapping."""

    name: str
    columns: tuple[str, ...]
    to_row: Callable[[R], tuple[Any, ...]]
    # Raises ValueError or TypeError for a row whose spec this console cannot read.
    from_row: Callable[[dict[str, Any]], R]

    @property
    def key(self) -> str:
        return self.columns[0]

    @property
    def recorded_at(self) -> str:
        return self.columns[2]


class SubmissionRegistry(Generic[R]):
    """Submissions of one kind, keyed by submission id, in the journal's database (written in
    transactions under the journal's lock, so it is thread-safe).

    Specs keep secrets as ``$NAME`` references (the specs refuse inline secrets), so the
    database never holds a key.
    """

    def __init__(self, journal: Journal, table: Table[R]) -> None:
        self.journal = journal
        self.table = table

    def put(self, record: R) -> None:
        """Record ``record``, replacing what was recorded under its id."""
        with self.journal.transaction() as db:
            self._insert(db, record, replace=True)

    def _insert(self, db: Any, record: R, *, replace: bool) -> None:
        t = self.table
        db.execute(
            f"INSERT {'OR REPLACE ' if replace else ''}INTO {t.name} ({', '.join(t.columns)}) "
            f"VALUES ({', '.join('?' * len(t.columns))})",
            t.to_row(record),
        )

    def update(self, key: str, **changes: Any) -> None:
        """Change recorded fields (never the id or the spec)."""
        unknown = set(changes) - set(self.table.columns[2:])
        if unknown:
            raise ValueError(f"{self.table.name} registry: cannot update {sorted(unknown)}")
        if not changes:
            return
        sets = ", ".join(f"{k} = ?" for k in changes)
        with self.journal.transaction() as db:
            db.execute(
                f"UPDATE {self.table.name} SET {sets} WHERE {self.table.key} = ?",
                (*changes.values(), key),
            )

    def mark(self, key: str, state: SubmissionState) -> None:
        self.update(key, state=str(state))

    def remove(self, key: str) -> None:
        with self.journal.transaction() as db:
            db.execute(f"DELETE FROM {self.table.name} WHERE {self.table.key} = ?", (key,))

    def get(self, key: str) -> R | None:
        rows = self._select(f"WHERE {self.table.key} = ?", (key,))
        return rows[0] if rows else None

    def __contains__(self, key: object) -> bool:
        return bool(
            self.journal.read(
                f"SELECT 1 FROM {self.table.name} WHERE {self.table.key} = ?", (str(key),)
            )
        )

    def ids(self) -> set[str]:
        return {r[0] for r in self.journal.read(f"SELECT {self.table.key} FROM {self.table.name}")}

    def all(self) -> list[R]:
        """Every readable submission, oldest first."""
        return self._select(f"ORDER BY {self.table.recorded_at}")

    def _select(self, where: str, args: tuple[Any, ...] = ()) -> list[R]:
        t = self.table
        rows = self.journal.read(f"SELECT {', '.join(t.columns)} FROM {t.name} {where}", args)
        out = []
        for row in rows:
            data = dict(zip(t.columns, row, strict=True))
            try:
                out.append(t.from_row(data))
            except (ValueError, TypeError) as exc:
                log.warning("%s registry: %s has an unreadable spec (%s)", t.name, data[t.key], exc)
        return out
