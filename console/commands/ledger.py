"""``ledger``: goodput, badput by cause, chip-hours, spot against on-demand, the advice.

Over a fleet of several read with no cluster named: every cluster's ledger and the fleet's
total in one answer (``ledger.fleet.FleetBook``, as `phantom report` and the Ledger screen
show it)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass

from console.commands.kit.base import Command, Effect, Front, Session
from console.commands.kit.params import TIMEOUT_HELP, Kind, arg
from console.services.ledger.book import read_book
from console.services.ledger.fleet import read_fleet
from console.services.model import ActionResult


@dataclass(frozen=True, kw_only=True)
class Args:
    since: float | None = arg(
        Kind.SECONDS, "S", f"look back S {TIMEOUT_HELP}; default: all", flag=True
    )


def _range(args: Args) -> tuple[float, float | None]:
    now = time.time()
    return now, None if args.since is None else now - args.since


async def run(s: Session, args: Args) -> ActionResult:
    now, since = _range(args)
    book = await read_book(await s.services(), now=now, since=since)
    return ActionResult.done("ledger", "the ledger", book.to_json())


async def over_fleet(sessions: Mapping[str, Session], args: Args) -> ActionResult:
    """Each cluster's ledger, read side by side, and the fleet's total: ``{"clusters":
    {name: ...}, "total": {...}, ...}`` (``FleetBook.to_json``)."""
    now, since = _range(args)
    members = {name: await s.services() for name, s in sessions.items()}
    fleet = await read_fleet(members, now=now, since=since)
    return ActionResult.done("ledger", "the fleet's ledger", fleet.to_json())


COMMAND = Command(
    "ledger",
    "goodput, badput by cause, chip-hours, spot against on-demand and the checkpoint "
    "advice, from the journal (as `status --json`'s ledger); --since: the last S only; "
    "over a fleet with no cluster named, every cluster's and the fleet's total",
    Args,
    run,
    Effect.READS,
    order=240,
    fronts=frozenset({Front.SCRIPT, Front.MCP}),
    document="goodput, badput by cause, cost, checkpoint advice",
    fleet=over_fleet,
)
