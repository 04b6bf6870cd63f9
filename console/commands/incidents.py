"""``incidents``: each preemption and what it caused, one row per incident, with its outcome."""

from __future__ import annotations

from dataclasses import dataclass

from console.commands.kit.base import Command, Effect, Front, Session
from console.commands.kit.params import Kind, arg
from console.services.model import ActionResult
from console.services.record.incidents import Incident, group

INCIDENT_ROWS = 5000  # journal rows read to group incidents (as `status` does)


@dataclass(frozen=True, kw_only=True)
class Args:
    limit: int | None = arg(Kind.INT, "N", "how many (default 20)", flag=True, min=1, max=500)


async def run(s: Session, args: Args) -> ActionResult:
    limit = args.limit or 20
    rows = await (await s.services()).events(limit=INCIDENT_ROWS)
    found = [x for x in group(rows) if isinstance(x, Incident)]
    return ActionResult.done(
        "incidents",
        f"{len(found[-limit:])} incidents",
        {"incidents": [x.to_json() for x in found[-limit:]]},
    )


COMMAND = Command(
    "incidents",
    "each preemption and what it caused, one row per incident, with its outcome",
    Args,
    run,
    Effect.READS,
    order=340,
    fronts=frozenset({Front.MCP}),
    document="each preemption and its recovery",
)
