"""Journal rows of a preemption with a capacity wait and a resubmission, for the ledger's
tests (``tests/services/ledger``) and the Ledger screen's snapshots: written as the console
writes them, to be journaled through the real event sink (``incident_rows.journaled``)."""

from __future__ import annotations

from dataclasses import replace

from console.services.model import Event, EventKind


def _act(at: float, action: str, duration: float, **data: object) -> Event:
    return Event(
        at=at,
        kind=EventKind.ACTION,
        message=action,
        actor="watchdog",
        data={"action": action, "ok": True, "duration_s": duration, "per_host": {}, **data},
    )


def _state(at: float, job: str, old: str | None, new: str) -> Event:
    return Event(
        at=at,
        kind=EventKind.JOB_STATE,
        message=f"job {job} {old or 'new'} -> {new}",
        actor="jobs",
        data={"job_id": job, "old_status": old, "new_status": new},
    )


def drill(start: float = 0.0, scale: float = 1.0, *, earlier_job: bool = False) -> list[Event]:
    """Job A runs from 10 s; its pod is lost at 98 s (seen at 100 s: detect_s 2); capacity is
    short from 101 s to 131 s; the head is rebuilt and A resubmitted as B, which runs from
    175 s and succeeds at 400 s. Times are ``start + scale * t``; ``earlier_job`` adds a job
    W that ran before A was submitted (submitted at -60 s, running -58 s to -5 s)."""
    rows = [
        Event(0.0, EventKind.ACTION, "submitted A", actor="user",
              data={"action": "submit", "ok": True, "duration_s": 0.1, "job_id": "A", "per_host": {}}),
        _state(1.0, "A", None, "PENDING"),
        _state(10.0, "A", "PENDING", "RUNNING"),
        Event(100.0, EventKind.PREEMPTED, "w0: VM lost", host="w0", actor="watchdog",
              data={"detect_s": 2.0}),
        Event(100.5, EventKind.RECOVERY_STARTED, "recovery started: w0", actor="watchdog",
              data={"detect_s": 2.0}),
        _act(100.5, "recovery.recreate", 1.0),
        Event(101.0, EventKind.CAPACITY, "stockout in zone a", actor="watchdog",
              data={"zone": "a", "attempt": 1, "ok": False}),
        Event(131.0, EventKind.CAPACITY, "created in zone b", actor="watchdog",
              data={"zone": "b", "attempt": 2, "ok": True}),
        _act(131.0, "recovery.wait_ready", 10.0),
        _act(141.0, "recovery.head", 20.0),
        _state(150.0, "A", "RUNNING", "LOST"),
        _act(161.0, "recovery.resubmit", 1.0, resubmitted={"A": "B"}),
        Event(162.0, EventKind.JOB_RESUBMITTED, "A resubmitted as B", actor="watchdog",
              data={"old_job_id": "A", "new_job_id": "B"}),
        _state(162.0, "B", None, "PENDING"),
        Event(170.0, EventKind.RECOVERED, "cluster recovered", actor="watchdog",
              data={"mttr_s": 70.0, "detect_s": 2.0}),
        _state(175.0, "B", "PENDING", "RUNNING"),
        _state(400.0, "B", "RUNNING", "SUCCEEDED"),
    ]  # fmt: skip
    if earlier_job:
        rows = [
            Event(-60.0, EventKind.ACTION, "submitted W", actor="user",
                  data={"action": "submit", "ok": True, "duration_s": 0.1, "job_id": "W",
                        "per_host": {}}),
            _state(-58.0, "W", None, "RUNNING"),
            _state(-5.0, "W", "RUNNING", "SUCCEEDED"),
            *rows,
        ]  # fmt: skip
    return [_scaled(e, start, scale) for e in rows]


def _scaled(e: Event, start: float, scale: float) -> Event:
    data = dict(e.data)
    for key in ("duration_s", "detect_s", "mttr_s"):
        if isinstance(data.get(key), int | float):
            data[key] = data[key] * scale
    return replace(e, at=start + scale * e.at, data=data)
