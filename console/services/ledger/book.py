"""The ledger as every surface shows it: goodput over a range, priced, with the advice.

One function builds it from journal rows and the config (``book``); the Ledger screen,
``status --json`` (its ``"ledger"`` key), the script's ``ledger`` verb and ``phantom report``
all print what it returns, so their numbers cannot differ.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from console.config import Config
from console.services.ledger.advice import (
    Advice,
    NoAdvice,
    advise,
    checkpoint_cost,
    mean_time_between_preemptions,
)
from console.services.ledger.goodput import Ledger, Steps, account, trainers
from console.services.ledger.prices import pricing_for
from console.services.model import Event

if TYPE_CHECKING:
    from console.services.api import ConsoleServices

# Rows read for a ledger: weeks of a busy pod (a row is a few hundred bytes).
ROWS = 200_000


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
    config: Config,
    *,
    now: float,
    since: float | None = None,
    progress: Steps | None = None,
    outcomes: Mapping[str, float] | None = None,
    log_lines: Iterable[str] = (),
    current_steps: int = 0,
) -> Book:
    """The ledger of ``rows`` from ``since`` (never before the first row) to ``now``."""
    rows = list(rows)
    # The pod's record starts at the journal's first row: nothing before it is counted.
    first = min((e.at for e in rows), default=now)
    start = min(max(since, first) if since is not None else first, now)
    ledger = account(
        rows, pricing_for(config), start=start, end=now, progress=progress, outcomes=outcomes
    )
    mtbf = (
        mean_time_between_preemptions(rows, start, now, max(1, config.cluster.hosts))
        if now > start
        else None
    )
    rate = _steps_per_s(progress or {})
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


async def read_book(services: ConsoleServices, *, now: float, since: float | None = None) -> Book:
    """``book`` over the services' journal (read off the event loop by the services)."""
    rows = await services.events(limit=ROWS)
    return book(rows, services.config, now=now, since=since)
