"""The journal: every observed event and every action, in SQLite, so history survives restarts.

One table of ``Event`` rows (``kind``, ``at``, ``host``, ``actor``, ``message``, JSON
``data``). Actions are events of kind ``"action"`` whose data hold the action name, ok,
duration and the per-host results. The database runs in WAL mode with
``synchronous=NORMAL``: each committed row survives a crash or ``kill -9`` of the console
(WAL frames are in the OS page cache; only a power loss can drop the last commits).

Secrets never reach the file: every row goes through the one ``console.secrets.Scrubber``
(values of secret-looking variables anywhere in text, ``key=value`` secrets, secret-named
data keys; host/public key fingerprints are kept).

Rows stay small (``record.bounds``): each host's output in an action row is kept as an
ANSI-free tail of a few KB, the whole text in a side file the row names
(``<journal>.output/``); any other long string is cut to its tail.

Thread-safe: one connection guarded by a lock; calls take well under a millisecond to a few
ms. The services write through ``events.EventSink`` (journal first, then publish the stored
row) and read through ``AsyncJournal``, both off the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import sqlite3
import statistics
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from console.config import default_state_dir
from console.secrets import Scrubber
from console.services.model import (
    CAUSE_OF_KIND,
    ActionResult,
    Event,
    EventKind,
    HostResult,
    IncidentCause,
    IncidentOutcome,
)
from console.services.record.bounds import STRING_TAIL, OutputFiles, bounded

log = logging.getLogger(__name__)

SCHEMA_VERSION = 7
ACTION = EventKind.ACTION
# Kinds the watchdog writes around one recovery (one recovery runs at a time).
RECOVERY_STARTED = EventKind.RECOVERY_STARTED
RECOVERED = EventKind.RECOVERED
RECOVERY_FAILED = EventKind.RECOVERY_FAILED

_MIGRATIONS: dict[int, str] = {
    1: """
        CREATE TABLE events (
            id      INTEGER PRIMARY KEY AUTOINCREMENT,
            at      REAL    NOT NULL,
            kind    TEXT    NOT NULL,
            host    TEXT    NOT NULL DEFAULT '',
            actor   TEXT    NOT NULL DEFAULT '',
            message TEXT    NOT NULL DEFAULT '',
            data    TEXT    NOT NULL DEFAULT '{}'
        );
        CREATE INDEX events_at ON events(at);
        CREATE INDEX events_kind_id ON events(kind, id);
        CREATE INDEX events_host_id ON events(host, id);
    """,
    # What this console submitted (services.submissions), shared by every front end.
    2: """
        CREATE TABLE jobs (
            job_id           TEXT PRIMARY KEY,
            spec             TEXT NOT NULL,
            submitted_at     REAL NOT NULL,
            actor            TEXT NOT NULL DEFAULT '',
            resubmitted_from TEXT NOT NULL DEFAULT '',
            superseded_by    TEXT NOT NULL DEFAULT '',
            sweep_id         TEXT NOT NULL DEFAULT '',
            state            TEXT NOT NULL DEFAULT 'submitted'
        );
    """,
    # The GKE workloads this console created (backends.gke.registry): their specs, so a
    # Failed JobSet is resubmitted as it was (secrets stay $NAME references).
    3: """
        CREATE TABLE workloads (
            name        TEXT PRIMARY KEY,
            spec        TEXT NOT NULL,
            created_at  REAL NOT NULL,
            actor       TEXT NOT NULL DEFAULT '',
            state       TEXT NOT NULL DEFAULT 'submitted',
            submissions INTEGER NOT NULL DEFAULT 1
        );
    """,
    # Where things are and how jobs ended (record.place, record.outcomes): what a restarted,
    # second or one-shot front end needs to find the cluster after a zone move and to keep a
    # finished job finished after its head is replaced.
    4: """
        CREATE TABLE place (
            pod             TEXT PRIMARY KEY,
            zone            TEXT NOT NULL DEFAULT '',
            queued_resource TEXT NOT NULL DEFAULT '',
            head_host       TEXT NOT NULL DEFAULT '',
            head_address    TEXT NOT NULL DEFAULT '',
            updated_at      REAL NOT NULL
        );
        CREATE TABLE job_outcomes (
            job_id      TEXT PRIMARY KEY,
            status      TEXT NOT NULL,
            message     TEXT NOT NULL DEFAULT '',
            entrypoint  TEXT NOT NULL DEFAULT '',
            ended_at    REAL,
            recorded_at REAL NOT NULL
        );
    """,
}

# Version 5: what readers used to take out of a row's words is a field of its data. A
# ``recovery_started`` row carries its ``trigger``; an incident's summary its ``outcome``
# (``IncidentOutcome``), ``failed_step`` and ``cause`` (``IncidentCause``). Rows written
# before get them here, once, from the words they were written with.
_CAUSE_CASE = " ".join(f"WHEN '{k}' THEN '{c}'" for k, c in CAUSE_OF_KIND.items())
_MIGRATIONS[5] = f"""
    UPDATE events SET data = json_set(data, '$.trigger',
        CASE WHEN message LIKE 'recovery started: %' THEN substr(message, 19) ELSE message END)
    WHERE kind = '{EventKind.RECOVERY_STARTED}' AND json_valid(data)
        AND json_type(data) = 'object' AND json_type(data, '$.trigger') IS NULL;
    UPDATE events SET data = json_set(data,
        '$.outcome', CASE
            WHEN json_extract(data, '$.result') IN ({", ".join(f"'{o}'" for o in IncidentOutcome if o != IncidentOutcome.FAILED)})
                THEN json_extract(data, '$.result')
            WHEN json_extract(data, '$.result') LIKE 'failed%' THEN '{IncidentOutcome.FAILED}'
            ELSE '{IncidentOutcome.NO_RECOVERY}' END,
        '$.failed_step', CASE WHEN json_extract(data, '$.result') LIKE 'failed at %'
            THEN substr(json_extract(data, '$.result'), 11) ELSE '' END,
        '$.cause', CASE json_extract(data, '$.trigger_kind') {_CAUSE_CASE}
            ELSE '{IncidentCause.OTHER}' END)
    WHERE kind = '{EventKind.INCIDENT}' AND json_valid(data)
        AND json_type(data) = 'object' AND json_type(data, '$.outcome') IS NULL
"""

# Version 6: how a recovery ended is its end row's ``outcome`` (``IncidentOutcome``: recovered,
# nothing to recover, failed), written by the recovery runner. Rows written before get it
# here, once: a ``recovered`` row without an MTTR is the one the runner wrote when there was
# nothing to bring back.
_MIGRATIONS[6] = f"""
    UPDATE events SET data = json_set(data, '$.outcome', CASE
            WHEN kind = '{RECOVERY_FAILED}' THEN '{IncidentOutcome.FAILED}'
            WHEN json_type(data, '$.mttr_s') IN ('integer', 'real')
                THEN '{IncidentOutcome.RECOVERED}'
            ELSE '{IncidentOutcome.NOTHING_TO_RECOVER}' END)
    WHERE kind IN ('{RECOVERED}', '{RECOVERY_FAILED}') AND json_valid(data)
        AND json_type(data) = 'object' AND json_type(data, '$.outcome') IS NULL
"""

# Version 7: each row names its cluster (a fleet's journals are one per cluster; the column
# keeps the name with the row wherever it goes: a report over several, a copy, a backup).
# Rows written before name none ('').
_MIGRATIONS[7] = "ALTER TABLE events ADD COLUMN cluster TEXT NOT NULL DEFAULT ''"


class JournalError(Exception):
    """The journal file cannot be used (names the path and the fix)."""


def default_journal_path() -> Path:
    return default_state_dir() / "journal.sqlite"


# -- recoveries ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Recovery:
    """One recovery, from its ``recovery_started`` row to its ``recovered``/``recovery_failed``."""

    started_at: float
    ended_at: float | None  # None: still running, or the console died mid-recovery
    ok: bool | None  # None while unfinished
    trigger: str
    actor: str
    mttr_s: float | None  # detection -> verified cluster, as the watchdog measured it
    detect_s: float | None
    failed_step: str = ""
    started_id: int | None = None
    ended_id: int | None = None
    # When the watchdog first saw the trouble (rows before it journaled none): a takeover
    # finishing an interrupted recovery counts its MTTR from here.
    detected_at: float | None = None

    @property
    def duration_s(self) -> float | None:
        return None if self.ended_at is None else self.ended_at - self.started_at


@dataclass(frozen=True)
class MttrSummary:
    recoveries: int
    succeeded: int
    failed: int
    mean_mttr_s: float | None
    median_mttr_s: float | None
    max_mttr_s: float | None
    mean_detect_s: float | None


# -- the journal -----------------------------------------------------------------------------------
class Journal:
    """Append-only event log in SQLite (WAL). ``path=":memory:"`` for a throwaway one."""

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        scrubber: Scrubber | None = None,
        clock: Callable[[], float] = time.time,
        cluster: str = "",
    ) -> None:
        self.path = Path(path) if path is not None else default_journal_path()
        self.cluster = cluster  # stamped on every row this journal writes (a fleet's name)
        self._clock = clock
        self.scrub = scrubber or Scrubber()
        self._lock = threading.RLock()
        memory = str(path) == ":memory:"
        # A host's whole output, when its row keeps the tail (``record.bounds``).
        self.outputs = OutputFiles(
            None if memory else self.path.with_name(self.path.name + ".output")
        )
        if not memory:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise JournalError(
                    f"journal {self.path}: cannot create its directory ({exc.strerror}); "
                    "set XDG_STATE_HOME to a writable directory"
                ) from None
        try:
            self._db = sqlite3.connect(
                ":memory:" if memory else str(self.path),
                check_same_thread=False,
                isolation_level=None,  # autocommit; transactions are explicit
                timeout=10.0,
            )
            self._db.execute("PRAGMA busy_timeout = 10000")
            if not memory:
                mode = self._db.execute("PRAGMA journal_mode = WAL").fetchone()[0]
                if str(mode).lower() != "wal":
                    log.warning("journal %s: WAL not available (mode %s)", self.path, mode)
            self._db.execute("PRAGMA synchronous = NORMAL")
            self._migrate()
        except sqlite3.DatabaseError as exc:
            raise JournalError(
                f"journal {self.path}: not a usable SQLite database ({exc}); move it aside "
                f"(mv {self.path} {self.path}.bad) and phantom starts a new one"
            ) from None

    # schema ------------------------------------------------------------------------------------
    def _migrate(self) -> None:
        with self._lock:
            version = int(self._db.execute("PRAGMA user_version").fetchone()[0])
            if version > SCHEMA_VERSION:
                raise JournalError(
                    f"journal {self.path}: schema version {version} was written by a newer "
                    f"phantom (this one knows {SCHEMA_VERSION}); upgrade phantom or move the "
                    "file aside"
                )
            for target in range(version + 1, SCHEMA_VERSION + 1):
                self._db.execute("BEGIN IMMEDIATE")
                try:
                    for statement in _MIGRATIONS[target].split(";"):
                        if statement.strip():
                            self._db.execute(statement)
                    self._db.execute(f"PRAGMA user_version = {target}")
                    self._db.execute("COMMIT")
                except BaseException:
                    self._db.execute("ROLLBACK")
                    raise

    @property
    def schema_version(self) -> int:
        with self._lock:
            return int(self._db.execute("PRAGMA user_version").fetchone()[0])

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def __enter__(self) -> Journal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # writing -----------------------------------------------------------------------------------
    def record_event(self, event: Event) -> Event:
        """Store one event (secrets masked); returns it as stored, with its ``id``."""
        clean = replace(
            event,
            message=bounded(self.scrub.text(event.message), STRING_TAIL),
            host=self.scrub.text(event.host),
            actor=self.scrub.text(event.actor),
            data=bounded(self.scrub.data(dict(event.data)), STRING_TAIL),
            id=None,
            cluster=event.cluster or self.cluster,
        )
        payload = json.dumps(clean.data, separators=(",", ":"), default=str)
        row = (float(clean.at), clean.kind, clean.host, clean.actor, clean.message, payload)
        with self._lock:
            cur = self._db.execute(
                "INSERT INTO events (at, kind, host, actor, message, data, cluster) "
                "VALUES (?,?,?,?,?,?,?)",
                (*row, clean.cluster),
            )
            row_id = cur.lastrowid
        return replace(clean, id=row_id)

    def record_action(
        self,
        actor: str,
        action: str,
        per_host: Mapping[str, HostResult],
        duration_s: float,
        ok: bool,
        message: str = "",
        *,
        at: float | None = None,
        data: Mapping[str, Any] | None = None,
    ) -> Event:
        """Store an action (who, what, per-host results, duration) as an ``"action"`` event.

        ``at`` defaults to when the action started (now - duration), which orders an action
        before the events it caused.
        """
        started = at if at is not None else self._clock() - max(0.0, duration_s)
        hosts_ok = sum(1 for r in per_host.values() if r.ok)
        if not message:
            verdict = "ok" if ok else "failed"
            scope = f" ({hosts_ok}/{len(per_host)} hosts ok)" if per_host else ""
            message = f"{action} {verdict} in {duration_s:.1f}s{scope}"
        payload: dict[str, Any] = dict(data or {})
        payload.update(
            action=action,
            ok=bool(ok),
            duration_s=round(float(duration_s), 3),
            # Each host's output as a short tail, the whole of it in a side file.
            per_host={
                h: self.outputs.host_output(asdict(r), action, started, self.scrub.text)
                for h, r in per_host.items()
            },
        )
        failed_hosts = [h for h, r in per_host.items() if not r.ok]
        host = failed_hosts[0] if len(failed_hosts) == 1 else ""
        return self.record_event(
            Event(at=started, kind=ACTION, message=message, actor=actor, host=host, data=payload)
        )

    def record_result(self, result: ActionResult, actor: str, *, at: float | None = None) -> Event:
        """``record_action`` for an ``ActionResult`` (what the services return)."""
        return self.record_action(
            actor,
            result.action,
            result.per_host,
            result.elapsed_s,
            result.ok,
            result.message,
            at=at,
            data=result.data,
        )

    # reading -----------------------------------------------------------------------------------
    def after(self, last_id: int, limit: int = 1000) -> list[Event]:
        """Rows written after ``last_id`` (by any process), oldest first: how a front end
        follows what the others journal."""
        with self._lock:
            rows = self._db.execute(
                "SELECT id, at, kind, host, actor, message, data, cluster FROM events WHERE id > ? "
                "ORDER BY id LIMIT ?",
                (int(last_id), int(limit)),
            ).fetchall()
        return [_row_to_event(r) for r in rows]

    def last_id(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT COALESCE(MAX(id), 0) FROM events").fetchone()[0])

    @contextlib.contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """One write transaction on the journal's database (other tables than events)."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def read(self, sql: str, args: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with self._lock:
            return list(self._db.execute(sql, args).fetchall())

    def query(
        self,
        limit: int = 500,
        kinds: Iterable[str] | None = None,
        since: float | None = None,
        host: str | None = None,
        text: str | None = None,
        *,
        actions: Iterable[str] | None = None,
    ) -> list[Event]:
        """The newest ``limit`` matching rows, returned oldest first (newest last).

        ``kinds``: any of these kinds; ``since``: at >= since (epoch s); ``host``: exact host;
        ``text``: case-insensitive substring of the message or data; ``actions``: action names
        (kind "action" rows whose data.action is one of them).
        """
        where: list[str] = []
        args: list[Any] = []
        kinds = list(kinds) if kinds is not None else None
        if kinds is not None:
            if not kinds:
                return []
            where.append(f"kind IN ({','.join('?' * len(kinds))})")
            args += kinds
        if since is not None:
            where.append("at >= ?")
            args.append(float(since))
        if host:
            where.append("host = ?")
            args.append(host)
        if text:
            pattern = "%" + text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
            where.append("(message LIKE ? ESCAPE '\\' OR data LIKE ? ESCAPE '\\')")
            args += [pattern, pattern]
        if actions is not None:
            names = list(actions)
            if not names:
                return []
            where.append(
                f"kind = 'action' AND json_extract(data, '$.action') IN ({','.join('?' * len(names))})"
            )
            args += names
        sql = "SELECT id, at, kind, host, actor, message, data, cluster FROM events"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY id DESC LIMIT ?"
        args.append(max(0, int(limit)))
        with self._lock:
            rows = self._db.execute(sql, args).fetchall()
        return [_row_to_event(r) for r in reversed(rows)]

    def count(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT COUNT(*) FROM events").fetchone()[0])

    def recoveries(self, limit: int | None = None) -> list[Recovery]:
        """Recoveries, oldest first: each ``recovery_started`` paired with the next
        ``recovered``/``recovery_failed`` (one recovery runs at a time). MTTR is the
        watchdog's own figure (``data.mttr_s``: detection -> verified cluster) when it recorded
        one, else the time from start to end. "Nothing to recover" runs are left out."""
        rows = self.query(
            limit=1_000_000 if limit is None else max(1, limit) * 4,
            kinds=(RECOVERY_STARTED, RECOVERED, RECOVERY_FAILED),
        )
        out: list[Recovery] = []
        open_: Event | None = None
        for ev in rows:
            if ev.kind == RECOVERY_STARTED:
                if open_ is not None:  # console died mid-recovery: never ended
                    out.append(_unfinished(open_))
                open_ = ev
                continue
            if open_ is None:
                continue  # an end whose start fell outside the window
            ok = ev.kind == RECOVERED
            mttr = _num(ev.data.get("mttr_s"))
            if ev.data.get("outcome") == IncidentOutcome.NOTHING_TO_RECOVER:
                open_ = None
                continue
            detect = _num(ev.data.get("detect_s"))
            if detect is None:
                detect = _num(open_.data.get("detect_s"))
            out.append(
                Recovery(
                    started_at=open_.at,
                    ended_at=ev.at,
                    ok=ok,
                    trigger=trigger_of(open_),
                    actor=open_.actor,
                    mttr_s=mttr if mttr is not None or not ok else ev.at - open_.at,
                    detect_s=detect,
                    failed_step="" if ok else str(ev.data.get("step", "")),
                    started_id=open_.id,
                    ended_id=ev.id,
                    detected_at=_num(open_.data.get("detected_at")),
                )
            )
            open_ = None
        if open_ is not None:
            out.append(_unfinished(open_))
        return out[-limit:] if limit else out

    def owed(self, recovery: Recovery) -> dict[str, str]:
        """What ``recovery`` owed as its rows last said (job id -> sweep id): the jobs to
        resubmit should the head be lost, journaled before its steps act (``data.owed`` of
        its start and of each DETECT), so the process that resumes it owes them too. An
        ended recovery's rows end with its end: a later recovery's are not its own."""
        if recovery.started_id is None:
            return {}
        last = recovery.ended_id if recovery.ended_id is not None else -1
        rows = self.read(
            "SELECT data FROM events WHERE id >= ? AND (? < 0 OR id <= ?) AND json_valid(data) "
            "AND json_type(data, '$.owed') = 'object' ORDER BY id DESC LIMIT 1",
            (recovery.started_id, last, last),
        )
        if not rows:
            return {}
        owed = json.loads(rows[0][0]).get("owed", {})
        return {str(k): str(v or "") for k, v in owed.items()}

    def mttr_summary(self) -> MttrSummary:
        recs = self.recoveries()
        done = [r for r in recs if r.ok]
        mttrs = [r.mttr_s for r in done if r.mttr_s is not None]
        detects = [r.detect_s for r in recs if r.detect_s is not None]
        return MttrSummary(
            recoveries=len(recs),
            succeeded=len(done),
            failed=sum(1 for r in recs if r.ok is False),
            mean_mttr_s=statistics.fmean(mttrs) if mttrs else None,
            median_mttr_s=statistics.median(mttrs) if mttrs else None,
            max_mttr_s=max(mttrs) if mttrs else None,
            mean_detect_s=statistics.fmean(detects) if detects else None,
        )


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def trigger_of(started: Event) -> str:
    """What a ``recovery_started`` row says started it (its ``data.trigger``; rows written
    before it was a field got it when their journal was migrated to version 5)."""
    return str(started.data.get("trigger", ""))


def _unfinished(ev: Event) -> Recovery:
    return Recovery(
        started_at=ev.at,
        ended_at=None,
        ok=None,
        trigger=trigger_of(ev),
        actor=ev.actor,
        mttr_s=None,
        detect_s=_num(ev.data.get("detect_s")),
        started_id=ev.id,
        detected_at=_num(ev.data.get("detected_at")),
    )


def _row_to_event(row: tuple[Any, ...]) -> Event:
    row_id, at, kind, host, actor, message, data, cluster = row
    try:
        parsed = json.loads(data) if data else {}
    except ValueError:
        parsed = {"_unparsed": data}
    return Event(
        at=float(at),
        kind=kind,
        message=message,
        host=host,
        actor=actor,
        data=parsed if isinstance(parsed, dict) else {"value": parsed},
        id=int(row_id),
        cluster=cluster,
    )


class AsyncJournal:
    """The journal's reads for the event loop: each call runs in a worker thread."""

    def __init__(self, journal: Journal) -> None:
        self.journal = journal

    async def query(
        self,
        limit: int = 500,
        kinds: Iterable[str] | None = None,
        since: float | None = None,
        host: str | None = None,
        text: str | None = None,
    ) -> list[Event]:
        kinds = list(kinds) if kinds is not None else None
        return await asyncio.to_thread(self.journal.query, limit, kinds, since, host, text)

    async def recoveries(self, limit: int | None = None) -> list[Recovery]:
        return await asyncio.to_thread(self.journal.recoveries, limit)
