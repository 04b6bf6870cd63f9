"""Notice verification: every preemption notice is matched to the checkpoint it should have
produced, and one that produced none is said (``notice_not_honoured``), not left silent.

A notice (``preemption_notice`` row: the VM's own notice time in ``data.notice_at``, else the
row's time) gives the jobs on the pod ``recovery.notice_grace_s`` to checkpoint (the engine
checkpoints at the step it reached on SIGTERM, ``engine.notice``). Once that grace has ended
(plus ``MARGIN_S`` for the save to land), the checkpoint storage is read: a notice is honoured
when some run there (a job's, or a sweep trial's under ``<sweep id>/_runs``) holds a
*complete* checkpoint (manifest valid, files of the listed sizes: ``engine.storage``) created
at or after the notice and by the end of its grace. A notice with no job active at its time
(the journal's ``job_state`` rows) expects nothing.

Exactly once per notice, across restarts: the ``notice_not_honoured`` row names its notice
(``data.notice_id``, the notice row's id); a notice already named is never judged again, and
on start the verifier judges every notice in the journal whose grace ended unjudged, within
``HORIZON_S`` (an older one's checkpoint may have been pruned since by the run's own later
saves, and a verdict from missing evidence would be wrong). Honoured verdicts are kept in
memory only: re-judging one after a restart finds the same checkpoint.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from console.services.model import ACTIVE_JOBS, Event, EventKind, Update
from console.services.record.journal import Journal
from console.services.record.sink import EventSink
from engine.storage import FsspecCheckpointStore, StorageError, resolve_storage

log = logging.getLogger(__name__)

MARGIN_S = 5.0  # after the grace: the save's last file and manifest land
HORIZON_S = 6 * 3600.0  # judged after a restart only this long after their grace
SLACK_S = 1.0  # clocks of the VM (notice) and the storage writer (manifest) may differ


@dataclass(frozen=True)
class Saved:
    """A complete checkpoint in the storage."""

    run: str
    step: int
    created_at: float
    trigger: str = ""
    attempt: str = ""  # the trainer process that wrote it (its manifest's ``attempt``)


@dataclass(frozen=True)
class Verdict:
    notice_id: int
    host: str
    notice_at: float
    deadline: float
    expected: bool  # some job was active at the notice
    matched: tuple[Saved, ...]  # the checkpoints in its window

    @property
    def honoured(self) -> bool:
        return bool(self.matched) or not self.expected

    def event(self, at: float) -> Event:
        """The ``notice_not_honoured`` row of an unhonoured notice."""
        grace = self.deadline - self.notice_at
        return Event(
            at=at,
            kind=EventKind.NOTICE_NOT_HONOURED,
            message=(
                f"{self.host}: preemption notice not honoured: no complete checkpoint within "
                f"its {grace:.0f}s grace"
            ),
            host=self.host,
            actor="watchdog",
            data={
                "notice_id": self.notice_id,
                "notice_at": self.notice_at,
                "deadline": self.deadline,
            },
        )


def notice_time(notice: Event) -> float:
    value = notice.data.get("notice_at")
    return float(value) if isinstance(value, int | float) and value > 0 else notice.at


def active_at(job_rows: Iterable[Event], t: float) -> list[str]:
    """Jobs whose last ``job_state`` row at or before ``t`` left them active."""
    last: dict[str, str] = {}
    for row in sorted(job_rows, key=lambda e: (e.at, e.id or 0)):
        if row.at > t:
            break
        job = row.data.get("job_id")
        if isinstance(job, str):
            last[job] = str(row.data.get("new_status", ""))
    return sorted(j for j, status in last.items() if status in ACTIVE_JOBS)


def judge(
    notice: Event,
    saved: Sequence[Saved],
    *,
    grace_s: float,
    expected: bool = True,
    slack_s: float = SLACK_S,
) -> Verdict:
    """Whether ``notice`` (a journal row with its id) was followed by a complete checkpoint."""
    if notice.id is None:
        raise ValueError("a notice is judged by its journal row (it has no id)")
    at = notice_time(notice)
    deadline = at + grace_s
    matched = tuple(s for s in saved if at - slack_s <= s.created_at <= deadline + slack_s)
    return Verdict(notice.id, notice.host, at, deadline, expected, matched)


def run_stores(storage: str) -> list[tuple[str, str]]:
    """``(storage, run)`` of every run under ``storage``: a job's run at its top, and a
    sweep's trials in ``<sweep storage>/<sweep id>/_runs/<run>`` (``engine.sweep_tune``),
    the sweep storage being ``storage`` or a directory in it (e.g. ``<storage>/sweeps``)."""
    try:
        fs, root = resolve_storage(storage)
        root = root.rstrip("/")
        parents = [root]
        for pattern in (f"{root}/*/_runs", f"{root}/*/*/_runs"):
            parents += sorted(str(p).rstrip("/") for p in fs.glob(pattern) if fs.isdir(p))
        out = []
        for parent in parents:
            base = storage.rstrip("/") + parent[len(root) :]
            for p in fs.ls(parent, detail=False):
                out.append((base, str(p).rstrip("/").rsplit("/", 1)[-1]))
        return out
    except (StorageError, OSError):
        return []


def saved_checkpoints(storage: str) -> list[Saved]:
    """Every complete checkpoint of every run under ``storage`` (incomplete ones skipped)."""
    out: list[Saved] = []
    for base, run in run_stores(storage):
        store = FsspecCheckpointStore(base, run)
        for step, path in store.list_steps():
            manifest = store._read_manifest(path)  # the one validity check
            if manifest is None or manifest.get("step") != step:
                continue
            created = manifest.get("created_unix")
            if isinstance(created, int | float):
                trigger, attempt = manifest.get("trigger", ""), manifest.get("attempt", "")
                out.append(Saved(run, step, float(created), str(trigger), str(attempt or "")))
    return out


class NoticeVerifier:
    """A bus consumer: a notice heard is judged when its grace has ended; on start, every
    notice of the journal whose grace ended unjudged (within ``HORIZON_S``)."""

    def __init__(
        self,
        journal: Journal,
        sink: EventSink,
        storage: str,
        *,
        grace_s: float,
        clock: Callable[[], float] = time.time,
        margin_s: float = MARGIN_S,
        horizon_s: float = HORIZON_S,
    ) -> None:
        self.journal = journal
        self.sink = sink
        self.storage = storage
        self.grace_s = grace_s
        self._clock = clock
        self.margin_s = margin_s
        self.horizon_s = horizon_s
        self.honoured: set[int] = set()
        self._lock = asyncio.Lock()
        self._tasks: set[asyncio.Task[Any]] = set()

    # -- BusConsumer ---------------------------------------------------------------------------
    def offer(self, update: Update) -> None:
        if isinstance(update, Event) and update.kind == EventKind.PREEMPTION_NOTICE:
            wait = notice_time(update) + self.grace_s + self.margin_s - self._clock()
            self._spawn(self._later(max(0.0, wait)))

    async def start(self) -> None:
        self._spawn(self.check())

    async def stop(self) -> None:
        tasks, self._tasks = list(self._tasks), set()
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    def _spawn(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _later(self, wait: float) -> None:
        await asyncio.sleep(wait)
        await self.check()

    # -- judging -------------------------------------------------------------------------------
    async def check(self) -> list[Verdict]:
        """Judge every notice whose grace (and margin) has ended and that is not judged yet;
        journal one ``notice_not_honoured`` per unhonoured one. Returns the new verdicts."""
        async with self._lock:  # one judge at a time: a notice is judged once
            try:
                return await self._check()
            except Exception:
                log.exception("notice verification failed")
                return []

    async def _check(self) -> list[Verdict]:
        now = self._clock()
        due = await asyncio.to_thread(self._due, now)
        if not due:
            return []
        saved = await asyncio.to_thread(saved_checkpoints, self.storage)
        jobs = await asyncio.to_thread(self.journal.query, 1_000_000, [EventKind.JOB_STATE])
        verdicts = []
        for notice in due:
            expected = bool(active_at(jobs, notice_time(notice)))
            verdict = judge(notice, saved, grace_s=self.grace_s, expected=expected)
            verdicts.append(verdict)
            if verdict.honoured:
                self.honoured.add(verdict.notice_id)
            elif not await asyncio.to_thread(self._named, verdict.notice_id):
                await self.sink.emit(verdict.event(now))
        return verdicts

    def _due(self, now: float) -> list[Event]:
        named = {
            e.data.get("notice_id")
            for e in self.journal.query(1_000_000, [EventKind.NOTICE_NOT_HONOURED])
        }
        out = []
        for notice in self.journal.query(
            1_000_000, [EventKind.PREEMPTION_NOTICE], since=now - self.horizon_s - self.grace_s
        ):
            if notice.id in named or notice.id in self.honoured:
                continue
            end = notice_time(notice) + self.grace_s
            if end + self.margin_s <= now and now - end <= self.horizon_s:
                out.append(notice)
        return out

    def _named(self, notice_id: int) -> bool:
        """Another front end on this journal said it already (the check just before the
        write narrows the window two consoles could both write in)."""
        rows = self.journal.query(1_000_000, [EventKind.NOTICE_NOT_HONOURED])
        return any(e.data.get("notice_id") == notice_id for e in rows)
