"""``ledger``: goodput, badput by cause, chip-hours, spot against on-demand, the advice."""

from __future__ import annotations

import time
from dataclasses import dataclass

from console.commands.kit.base import Command, Effect, Front, Session
from console.commands.kit.params import TIMEOUT_HELP, Kind, arg
from console.services.ledger.book import read_book
from console.services.model import ActionResult


@dataclass(frozen=True, kw_only=True)
class Args:
    since: float | None = arg(
        Kind.SECONDS, "S", f"look back S {TIMEOUT_HELP}; default: all", flag=True
    )


async def run(s: Session, args: Args) -> ActionResult:
    now = time.time()
    since = None if args.since is None else now - args.since
    book = await read_book(await s.services(), now=now, since=since)
    return ActionResult.done("ledger", "the ledger", book.to_json())


COMMAND = Command(
    "ledger",
    "goodput, badput by cause, chip-hours, spot against on-demand and the checkpoint "
    "advice, from the journal (as `status --json`'s ledger); --since: the last S only",
    Args,
    run,
    Effect.READS,
    order=240,
    fronts=frozenset({Front.SCRIPT, Front.MCP}),
    document="goodput, badput by cause, cost, checkpoint advice",
)
