"""``refresh``: poll every layer of the cluster now (the result is published as usual)."""

from __future__ import annotations

from console.commands.kit.base import Command, Effect, Front, Session
from console.commands.kit.params import NoArgs
from console.services.model import ActionResult, to_jsonable


async def run(s: Session, args: NoArgs) -> ActionResult:
    snap = await (await s.services()).refresh()
    return ActionResult.done("refresh", "polled", to_jsonable(snap))


COMMAND = Command(
    "refresh",
    "Poll every layer of the cluster now",
    NoArgs,
    run,
    Effect.READS,
    order=280,
    fronts=frozenset({Front.TUI}),
    title="Refresh now",
)
