"""The ledger of a fleet: each cluster's ``Book`` by name, and the fleet's total.

The total is the sum of the clusters' published figures and nothing else: wall and
productive seconds, seconds by badput cause, incidents, chip-hours, spot and on-demand
dollars (each cluster priced with its own accelerator and region, ``LedgerSettings``), so a
reader can check it against the rows. The fleet's goodput is its productive seconds over its
wall seconds (cluster-time: a cluster idle for a day weighs a day). A cluster with no price
adds its chip-hours but no dollars, and the total names it (``unpriced``). A cluster with no
rows (never run, or nothing in the range) is a row of zeros and no goodput.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from console.services.ledger.book import Book, LedgerReads, read_book
from console.services.ledger.goodput import dur
from console.services.ledger.timeline import BADPUT, Cause

_MONEY = ("spot_usd", "on_demand_same_work_usd", "spot_saved_usd")


@dataclass(frozen=True)
class Figures:
    """One cluster's figures as the fleet table shows them (or their sum: the total),
    rounded as the single-cluster ledger publishes them."""

    wall_s: float
    productive_s: float
    badput_s: Mapping[Cause, float]
    incidents: int
    chip_hours: float
    productive_chip_hours: float
    spot_usd: float | None
    on_demand_same_work_usd: float | None
    spot_saved_usd: float | None
    unpriced: tuple[str, ...] = ()

    @property
    def goodput(self) -> float | None:
        return round(self.productive_s / self.wall_s, 4) if self.wall_s > 0 else None

    @property
    def badput_total_s(self) -> float:
        return round(sum(self.badput_s.values()), 3)

    @classmethod
    def of(cls, name: str, book: Book) -> Figures:
        """``book``'s figures (the same numbers its ``to_json`` writes)."""
        ledger = book.ledger
        c = ledger.cluster
        money = ledger.money
        return cls(
            wall_s=round(c.wall_s, 3),
            productive_s=round(c.productive_s, 3),
            badput_s={k: round(v, 3) for k, v in c.seconds.items() if k in BADPUT},
            incidents=len(ledger.incidents()),
            chip_hours=money["chip_hours"],
            productive_chip_hours=money["productive_chip_hours"],
            spot_usd=money["spot_usd"],
            on_demand_same_work_usd=money["on_demand_same_work_usd"],
            spot_saved_usd=money["spot_saved_usd"],
            unpriced=(name,) if money["spot_usd"] is None and c.wall_s > 0 else (),
        )

    @classmethod
    def sum(cls, rows: Iterable[Figures]) -> Figures:
        """The total of ``rows``: every figure summed (dollars over the priced rows)."""
        rows = list(rows)

        def total(values: Iterable[float]) -> float:
            return round(sum(values), 4)

        def usd(key: str) -> float | None:
            priced = [getattr(r, key) for r in rows if getattr(r, key) is not None]
            return round(sum(priced), 2) if priced else None

        return cls(
            wall_s=round(sum(r.wall_s for r in rows), 3),
            productive_s=round(sum(r.productive_s for r in rows), 3),
            badput_s={k: round(sum(r.badput_s.get(k, 0.0) for r in rows), 3) for k in BADPUT},
            incidents=sum(r.incidents for r in rows),
            chip_hours=total(r.chip_hours for r in rows),
            productive_chip_hours=total(r.productive_chip_hours for r in rows),
            spot_usd=usd("spot_usd"),
            on_demand_same_work_usd=usd("on_demand_same_work_usd"),
            spot_saved_usd=usd("spot_saved_usd"),
            unpriced=tuple(n for r in rows for n in r.unpriced),
        )

    def verdict(self) -> str:
        saved = self.spot_saved_usd
        if saved is None:
            return "no price for any cluster"
        word = "saved" if saved >= 0 else "lost"
        out = f"spot {word} ${abs(saved):,.2f} against on-demand for the same productive work"
        if self.unpriced:
            out += f" (without {', '.join(self.unpriced)}: no price)"
        return out

    def headline(self) -> str:
        """One line, as a cluster's ``Ledger.headline``: goodput, the largest badput, money."""
        if self.goodput is None:
            return "ledger: no time recorded in this range"
        bad = sorted(((v, k) for k, v in self.badput_s.items() if v > 0), reverse=True)
        worst = ", ".join(f"{k} {dur(v)}" for v, k in bad[:3]) or "none"
        return (
            f"goodput {self.goodput:.1%} of {dur(self.wall_s)}; badput: {worst}; {self.verdict()}"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "goodput": self.goodput,
            "wall_s": self.wall_s,
            "productive_s": self.productive_s,
            "badput_s": {str(k): v for k, v in self.badput_s.items()},
            "incidents": self.incidents,
            "money": {
                "chip_hours": self.chip_hours,
                "productive_chip_hours": self.productive_chip_hours,
                **{k: getattr(self, k) for k in _MONEY},
                "unpriced": list(self.unpriced),
            },
        }


@dataclass(frozen=True)
class FleetBook:
    """Every cluster's ledger by name, in the fleet's order, and their total."""

    books: Mapping[str, Book]
    notes: tuple[str, ...] = field(default=())

    @property
    def rows(self) -> dict[str, Figures]:
        return {name: Figures.of(name, b) for name, b in self.books.items()}

    @property
    def total(self) -> Figures:
        return Figures.sum(self.rows.values())

    @property
    def start(self) -> float:
        return min((b.ledger.start for b in self._timed()), default=0.0)

    @property
    def end(self) -> float:
        return max((b.ledger.end for b in self._timed()), default=0.0)

    def _timed(self) -> list[Book]:
        return [b for b in self.books.values() if b.ledger.cluster.wall_s > 0]

    def to_json(self) -> dict[str, Any]:
        """``{"start", "end", "headline", "clusters": {name: <a cluster's ledger, as
        `phantom report --format json` prints it for one>}, "total": {...}, "notes"}``."""
        total = self.total
        return {
            "start": self.start,
            "end": self.end,
            "headline": total.headline(),
            "clusters": {name: b.to_json() for name, b in self.books.items()},
            "total": {"clusters": list(self.books), **total.to_json()},
            "notes": list(self.notes),
        }


async def read_fleet(
    members: Mapping[str, LedgerReads], *, now: float, since: float | None = None
) -> FleetBook:
    """Every cluster's ``read_book``, side by side (a slow cluster holds up none of the
    others' reads); one whose journal cannot be read is left out and named in the notes."""

    async def one(services: LedgerReads) -> Book | BaseException:
        try:
            return await read_book(services, now=now, since=since)
        except Exception as exc:
            return exc

    found = await asyncio.gather(*(one(m) for m in members.values()))
    books = {n: b for n, b in zip(members, found, strict=True) if isinstance(b, Book)}
    notes = tuple(
        unread(n, str(b)) for n, b in zip(members, found, strict=True) if not isinstance(b, Book)
    )
    return FleetBook(books, notes)


def unread(name: str, why: str) -> str:
    """The note for a cluster whose ledger could not be read, and so is not in the total."""
    return f"{name}: its journal was not read ({why}); the total leaves it out"
