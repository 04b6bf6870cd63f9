"""What a session hears from the services: event lines, job states, resubmissions.

The feed subscribes to the services' bus (any thread) and turns updates into deduplicated
``{"type": "event", ...}`` lines (a script prints them on stdout), keeps each job's last known status, follows
watchdog resubmissions (``old -> new`` job ids, so ``last`` follows a job through a head
loss) and wakes a command's waits (``wait-job``, ``wait-event``). Journal rows carry their id, so each is one line however
many ways it arrives; the runner's own step actions are not repeated as events. A row that
belongs to an incident carries its id (``"incident"``), and the incident's summary is a line
of kind ``incident`` of its own (``services.record.incidents``).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable
from typing import Any

from console.services.model import TERMINAL_JOBS, Event, EventKind, JobInfo, RunCadence, Update


class EventFeed:
    def __init__(self, emit: Callable[[dict[str, Any]], None], clock: Callable[[], float]):
        self._emit = emit
        self._clock = clock
        self._lock = threading.Lock()
        self._seen: set[Any] = set()
        self.events: list[dict[str, Any]] = []
        self._consumed: set[int] = set()
        self.job_status: dict[str, str] = {}
        self.resubmitted: dict[str, str] = {}
        self._stalled_runs: set[str] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._wake = asyncio.Event()

    # -- the bus subscriber ---------------------------------------------------------------
    def __call__(self, update: Update) -> None:
        if isinstance(update, Event):
            self._on_event(update)
        elif isinstance(update, JobInfo):
            self.observe_job(update)
        elif isinstance(update, RunCadence):
            self._on_cadence(update)

    def _on_event(self, update: Event) -> None:
        if update.kind == EventKind.ACTION:
            return  # the script's own steps are step lines; others' actions are not events
        data = dict(update.data)
        obj = {"type": "event", **update.to_json()}
        status = data.get("new_status") or data.get("status")
        key: Any = ("id", update.id) if update.id is not None else None
        if update.kind == EventKind.JOB_STATE and "job_id" in data and status:
            # Same key as transitions seen by our own polling: one line per transition.
            key = (EventKind.JOB_STATE, data["job_id"], status)
            obj["status"] = status
            with self._lock:
                self.job_status[str(data["job_id"])] = str(status)
        elif update.kind == EventKind.STALLED and "run_id" in data:
            # One line per stall episode, whether the journal or the cadence feed says so.
            with self._lock:
                if str(data["run_id"]) in self._stalled_runs:
                    return
                self._stalled_runs.add(str(data["run_id"]))
        elif update.kind == EventKind.CADENCE_RESUMED and "run_id" in data:
            with self._lock:
                self._stalled_runs.discard(str(data["run_id"]))
        elif update.kind == EventKind.JOB_RESUBMITTED:
            old, new = data.get("old_job_id"), data.get("new_job_id")
            if old and new:
                with self._lock:
                    self.resubmitted[str(old)] = str(new)
        if key is None:
            key = (update.kind, update.host, update.at, update.message)
        self.record(key, obj)

    def _on_cadence(self, update: RunCadence) -> None:
        with self._lock:
            new_stall = update.stalled and update.run_id not in self._stalled_runs
            if new_stall:
                self._stalled_runs.add(update.run_id)
            elif not update.stalled:
                self._stalled_runs.discard(update.run_id)
        if new_stall:
            self.record(
                (EventKind.STALLED, update.run_id, "cadence"),
                {
                    "type": "event",
                    "kind": EventKind.STALLED,
                    "host": "",
                    "at": self._clock(),
                    "message": f"run {update.run_id}: metrics stalled",
                    "run_id": update.run_id,
                    "seconds_since": update.seconds_since,
                    "median_interval_s": update.median_interval_s,
                },
            )

    def observe_job(self, info: JobInfo) -> None:
        """A job status seen by the runner's own polling or published by the services."""
        with self._lock:
            before = self.job_status.get(info.job_id)
            self.job_status[info.job_id] = info.status
        if before == info.status:
            return
        ended = info.message and info.status in TERMINAL_JOBS
        self.record(
            (EventKind.JOB_STATE, info.job_id, info.status),
            {
                "type": "event",
                "kind": EventKind.JOB_STATE,
                "host": "",
                "at": self._clock(),
                "message": f"job {info.job_id} {before or 'new'} -> {info.status}"
                + (f": {info.message}" if ended else ""),
                "job_id": info.job_id,
                "old_status": before,
                "new_status": info.status,
                "status": info.status,
            },
        )

    def record(self, key: Any, obj: dict[str, Any]) -> None:
        with self._lock:
            if key in self._seen:
                return
            self._seen.add(key)
            self.events.append(obj)
        self._emit(obj)
        self.poke()

    # -- queries ------------------------------------------------------------------------------
    def follow(self, job_id: str) -> str:
        """The job that carries on ``job_id`` after watchdog resubmissions."""
        seen = {job_id}
        with self._lock:
            while job_id in self.resubmitted:
                job_id = self.resubmitted[job_id]
                if job_id in seen:
                    break
                seen.add(job_id)
        return job_id

    def take_event(self, kind: str, host: str | None) -> dict[str, Any] | None:
        """The oldest event of ``kind`` (on ``host``) not taken by an earlier wait."""
        with self._lock:
            for i, ev in enumerate(self.events):
                if i in self._consumed or ev.get("kind") != kind:
                    continue
                if host is not None and ev.get("host") != host:
                    continue
                self._consumed.add(i)
                return dict(ev)
        return None

    # -- waking the runner --------------------------------------------------------------------
    def poke(self) -> None:
        loop, wake = self._loop, self._wake
        if loop is None or wake is None:
            return
        with contextlib.suppress(RuntimeError):  # loop already closed: nobody is waiting
            loop.call_soon_threadsafe(wake.set)

    async def wait(self, timeout: float) -> None:
        """Until something new arrives, or ``timeout`` seconds."""
        assert self._wake is not None
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await self._wake.wait()
        self._wake.clear()
