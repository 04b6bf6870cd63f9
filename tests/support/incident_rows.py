"""Recorded journal rows of real preemptions, replayed through the real event sink.

``tests/data/incidents/worker_then_head_preemption.jsonl`` is what the console journaled in
``tests/services/test_lifecycle.py`` against the pod emulator with Ray (a worker preempted,
recovered; then the head preempted, rebuilt, its job resubmitted), in journal order, with
times relative to the first row, the incident stamps and summaries removed and the per-host
output tails cut. Replaying it through ``EventSink`` runs the real incident logic over it.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from console.services.model import Event
from console.services.record.journal import Journal
from console.services.record.sink import EventSink

DATA = Path(__file__).resolve().parent.parent / "data" / "incidents"


def recorded(name: str = "worker_then_head_preemption", *, start: float = 0.0) -> list[Event]:
    """The recording's rows (no ids, no incident stamps), dated from ``start``."""
    rows = []
    for line in (DATA / f"{name}.jsonl").read_text().splitlines():
        r = json.loads(line)
        rows.append(
            Event(
                at=start + r["t"],
                kind=r["kind"],
                message=r["message"],
                host=r["host"],
                actor=r["actor"],
                data=r["data"],
            )
        )
    return rows


async def replay(journal: Journal, rows: list[Event]) -> list[Event]:
    """Journal ``rows`` in order through a fresh event sink; returns what it published."""
    published: list[Event] = []

    def keep(update: object) -> None:
        if isinstance(update, Event):
            published.append(update)

    sink = EventSink(journal, keep, clock=lambda: rows[-1].at if rows else 0.0)
    try:
        for row in rows:
            await sink.emit(row)
    finally:
        sink.close()
    return published


async def journaled_async(rows: list[Event]) -> list[Event]:
    """``rows`` as a journal holds them after the sink (stamped, summaries added, ids)."""
    journal = Journal(":memory:")
    try:
        await replay(journal, rows)
        return journal.query(limit=100_000)
    finally:
        journal.close()


def journaled(rows: list[Event]) -> list[Event]:
    """``journaled_async`` outside an event loop (a snapshot test builds its app first)."""
    return asyncio.run(journaled_async(rows))
