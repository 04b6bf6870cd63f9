"""``events``: the journal's newest events, newest last."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from console.commands.kit.base import Command, Effect, Front, Session
from console.commands.kit.params import Kind, arg
from console.services.model import ActionResult


@dataclass(frozen=True, kw_only=True)
class Args:
    limit: int | None = arg(Kind.INT, "N", "how many (default 50)", flag=True, min=1, max=2000)
    kind: str | None = arg(
        Kind.STR, "KIND", "only this kind (preempted, recovered, stalled, ...)", flag=True
    )


async def run(s: Session, args: Args) -> ActionResult:
    limit = args.limit or 50
    kinds = [str(args.kind)] if args.kind else None
    rows = await (await s.services()).events(limit=limit, kinds=kinds)
    events: list[dict[str, Any]] = [{"id": e.id, **e.to_json()} for e in rows[-limit:]]
    return ActionResult.done("events", f"{len(events)} events", {"events": events})


COMMAND = Command(
    "events",
    "the journal's newest events (kind, host, actor, message, incident id), newest last",
    Args,
    run,
    Effect.READS,
    order=320,
    fronts=frozenset({Front.MCP}),
    document="the journal's newest 50 events",
)
