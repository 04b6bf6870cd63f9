"""``relaunch-sweep``: the sweep's agents again, with the same sweep id."""

from __future__ import annotations

from console.commands.kit.base import Command, Effect, Front, Session
from console.commands.kit.params import NoArgs
from console.services.capabilities import Capability
from console.services.model import ActionResult, to_jsonable


async def run(s: Session, args: NoArgs) -> ActionResult:
    info = await (await s.services()).relaunch_sweep(s.actor)
    s.made(info)
    return ActionResult.done("relaunch_sweep", f"relaunched as {info.job_id}", to_jsonable(info))


def told(result: ActionResult) -> str:
    return f"Sweep relaunched as {result.data.get('job_id')}."


COMMAND = Command(
    "relaunch_sweep",
    "relaunch the sweep agents with the same sweep id; sets `last`",
    NoArgs,
    run,
    Effect.ACTS,
    order=200,
    needs=Capability.RAY_JOBS,
    fronts=frozenset({Front.TUI, Front.SCRIPT, Front.MCP}),
    verb="relaunch-sweep",
    title="Relaunch sweep",
    hint="Relaunch sweep agents with the same sweep id",
    told=told,
    sets_job=True,
)
