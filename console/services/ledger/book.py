"""The ledger as every surface shows it: goodput over a range, priced, with the advice.

One function builds it from journal rows and the pod's prices (``book``); the Ledger screen,
``status --json`` (its ``"ledger"`` key), the script's ``ledger`` verb and ``phantom report``
all print what it returns, so their numbers cannot differ.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from console.services.ledger.advice import (
    Advice,
    NoAdvice,
    advise,
    checkpoint_cost,
    mean_time_between_preemptions,
    training_rate,
)
from console.services.ledger.goodput import Ledger, Steps, account, trainers
from console.services.ledger.live import DEFAULT_EVERY, LOGS_OF, current_every
from console.services.ledger.prices import Pricing
from console.services.model import Event, JobInfo

log = logging.getLogger(__name__)

# Rows read for a ledger: weeks of a busy pod (a row is a few hundred bytes).
ROWS = 200_000
# The jobs' logs give the advice its save cost and training rate; a cluster that does not
# answer within this leaves the ledger without advice, never without its numbers.
LOGS_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class LedgerSettings:
    """The ledger's slice of the config, built once by the wiring."""

    pricing: Pricing
    """``[prices]`` over the shipped table, for the pod's accelerator and region."""
    hosts: int
    """The pod's hosts (at least 1): the preemption rate is per host."""


@dataclass(frozen=True)
class Book:
    ledger: Ledger
    advice: Advice | NoAdvice

    def to_json(self) -> dict[str, Any]:
        out = self.ledger.to_json()
        out["advice"] = self.advice.render()
        if isinstance(self.advice, Advice):
            out["advice_steps"] = self.advice.steps
        return out


def book(
    rows: Iterable[Event],
    settings: LedgerSettings,
    *,
    now: float,
    since: float | None = None,
    progress: Steps | None = None,
    outcomes: Mapping[str, float] | None = None,
    log_lines: Iterable[str] = (),
    current_steps: int = DEFAULT_EVERY,
) -> Book:
    """The ledger of ``rows`` from ``since`` (never before the first row) to ``now``.

    ``log_lines``: the jobs' logs, where the engine reports each save's duration (the
    advice's ``C``) and its training rate (used when ``progress`` gives none);
    ``current_steps``: the job's checkpoint interval the advice is compared with.
    """
    rows, log_lines = list(rows), list(log_lines)
    # The pod's record starts at the journal's first row: nothing before it is counted.
    first = min((e.at for e in rows), default=now)
    start = min(max(since, first) if since is not None else first, now)
    ledger = account(
        rows, settings.pricing, start=start, end=now, progress=progress, outcomes=outcomes
    )
    mtbf = mean_time_between_preemptions(rows, start, now, settings.hosts) if now > start else None
    rate = _steps_per_s(progress or {}) or training_rate(log_lines)
    return Book(ledger, advise(checkpoint_cost(log_lines), mtbf, rate, current_steps))


def _steps_per_s(progress: Steps) -> float | None:
    """Steps per second over every trainer's logged points (None without two of them)."""
    steps = seconds = 0.0
    for p in (t for job in progress for t in trainers(progress, job)):
        pts = sorted(p.points, key=lambda x: x.at)
        if len(pts) >= 2 and pts[-1].at > pts[0].at:
            steps += pts[-1].step - pts[0].step
            seconds += pts[-1].at - pts[0].at
    return steps / seconds if seconds > 0 and steps > 0 else None


class HasLedgerSettings(Protocol):
    @property
    def ledger(self) -> LedgerSettings: ...


class LedgerReads(Protocol):
    """What ``read_book`` reads of the services (``api.ConsoleServices``, which front ends hand
    in): declared here, below the services' interface, so the ledger never imports it."""

    @property
    def settings(self) -> HasLedgerSettings: ...

    async def events(self, limit: int = 500) -> list[Event]: ...

    async def list_jobs(self) -> list[JobInfo]: ...

    async def job_logs(self, job_id: str) -> str: ...


async def read_book(services: LedgerReads, *, now: float, since: float | None = None) -> Book:
    """``book`` over the services' journal and the newest jobs' logs (built off the loop)."""
    rows = await services.events(limit=ROWS)
    try:
        lines, current = await asyncio.wait_for(_newest_jobs(services), LOGS_TIMEOUT_S)
    except Exception as exc:  # a head that is down: the ledger still has its numbers
        log.info("ledger: job logs not read for the advice (%s)", exc)
        lines, current = [], DEFAULT_EVERY
    return await asyncio.to_thread(
        book,
        rows,
        services.settings.ledger,
        now=now,
        since=since,
        log_lines=lines,
        current_steps=current,
    )


async def _newest_jobs(services: LedgerReads) -> tuple[list[str], int]:
    """The log lines of the newest jobs the cluster knows (as the advice at submit reads
    them) and the newest one's own checkpoint interval (the engine's default without one)."""
    jobs = sorted(await services.list_jobs(), key=lambda j: j.start_time or 0.0, reverse=True)
    lines: list[str] = []
    for job in jobs[:LOGS_OF]:
        lines += (await services.job_logs(job.job_id)).splitlines()
    return lines, current_every(jobs[0].entrypoint) if jobs else DEFAULT_EVERY
