"""``ledger``: goodput, badput by cause, chip-hours, spot against on-demand, the advice.

Over a fleet of several read with no cluster named: every cluster's ledger and the fleet's
total in one answer (``ledger.fleet.FleetBook``, as `phantom report` and the Ledger screen
show it)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from console.commands.kit.base import Command, Effect, Front, Session
from console.commands.kit.params import TIMEOUT_HELP, Kind, arg
from console.commands.kit.told import error_sentence
from console.config import ConfigError
from console.services.ledger.book import read_book
from console.services.ledger.fleet import read_fleet, unread
from console.services.model import ActionResult

if TYPE_CHECKING:
    from console.services.api import ConsoleServices


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
    {name: ...}, "total": {...}, ...}`` (``FleetBook.to_json``). A cluster whose services
    cannot be had (its pod emulator down, for a script) is a note, as one whose journal
    cannot be read is; a config found wrong stops the read."""
    now, since = _range(args)
    built = await asyncio.gather(*(s.services() for s in sessions.values()), return_exceptions=True)
    members: dict[str, ConsoleServices] = {}
    notes: list[str] = []
    for name, services in zip(sessions, built, strict=True):
        if isinstance(services, ConfigError) or (
            isinstance(services, BaseException) and not isinstance(services, Exception)
        ):
            raise services  # a bad config is the script's to fix; a cancel is the caller's
        if isinstance(services, Exception):
            notes.append(unread(name, error_sentence(services)))
        else:
            members[name] = services
    fleet = await read_fleet(members, now=now, since=since)
    fleet = replace(fleet, notes=(*notes, *fleet.notes))
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
