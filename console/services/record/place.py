"""Where the pod is: one durable record per pod, in the journal's database (table ``place``).

A recovery can move the slice to another zone (capacity failover), into a queued resource,
and onto a new head. The process that did it knows; the others would not: a restarted TUI,
a ``--script`` run, a one-shot ``phantom status`` or a second console would look in the
configured zone, find nothing and wait for a node that exists elsewhere. So the move is
written here the moment it happens, and every front end reads it before its first call.

The record may be missing (an older journal, another machine) or stale (a console killed
between a create and this write): readers treat it as the first place to look, never the
only one (``backends.tpu_vm.locate`` then lists every configured zone).

A write failure is logged, never raised: losing this record costs a zone listing, while
raising would fail the recovery step that moved the slice.
"""

from __future__ import annotations

import logging
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass, fields, replace

from console.services.record.journal import Journal, JournalError

log = logging.getLogger(__name__)

_FIELDS = ("zone", "queued_resource", "head_host", "head_address")


@dataclass(frozen=True)
class Place:
    """Where one pod was last seen. Empty strings: not known."""

    pod: str
    zone: str = ""
    queued_resource: str = ""  # the queued resource holding the node, when there is one
    head_host: str = ""  # the worker that runs the Ray head
    head_address: str = ""  # its GCS address (ip:port)
    updated_at: float = 0.0


def pod_key(provider: str, project: str, node_name: str) -> str:
    """What names one pod across zones: its zone is what the record is for."""
    return "|".join((provider, project, node_name))


class PlaceRecord:
    """The ``place`` row of pod ``pod``, shared by every process on the journal's file."""

    def __init__(
        self, journal: Journal, pod: str, *, clock: Callable[[], float] = time.time
    ) -> None:
        self.journal = journal
        self.pod = pod
        self._clock = clock

    def load(self) -> Place | None:
        try:
            rows = self.journal.read(
                f"SELECT {', '.join(_FIELDS)}, updated_at FROM place WHERE pod = ?", (self.pod,)
            )
        except (sqlite3.Error, JournalError) as exc:
            log.warning("place of %s unreadable: %s", self.pod, exc)
            return None
        if not rows:
            return None
        zone, queued, head_host, head_address, at = rows[0]
        return Place(self.pod, str(zone), str(queued), str(head_host), str(head_address), float(at))

    def save(self, **changes: str) -> Place | None:
        """Set some of ``zone``, ``queued_resource``, ``head_host``, ``head_address``; the
        others keep their recorded values. Writes only when something changed."""
        unknown = set(changes) - set(_FIELDS)
        if unknown:
            raise ValueError(f"place record: no field {sorted(unknown)}")
        before = self.load() or Place(self.pod)
        after = replace(before, **changes)  # type: ignore[arg-type]  # checked above
        if after == before and before.updated_at:
            return before
        after = replace(after, updated_at=self._clock())
        values = [getattr(after, f.name) for f in fields(Place)]
        try:
            with self.journal.transaction() as db:
                db.execute(
                    f"INSERT OR REPLACE INTO place (pod, {', '.join(_FIELDS)}, updated_at) "
                    f"VALUES ({', '.join('?' * len(values))})",
                    values,
                )
        except (sqlite3.Error, JournalError) as exc:
            log.warning("place of %s not recorded (%s): %s", self.pod, changes, exc)
            return None
        return after
