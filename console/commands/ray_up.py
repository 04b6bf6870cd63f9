"""``ray-up``: start the Ray head and join every worker (restarts a running Ray)."""

from __future__ import annotations

from console.commands.kit.base import Command, Confirm, Effect, Front, Session, Started, relay
from console.commands.kit.params import NoArgs
from console.services.capabilities import Capability
from console.services.model import ActionResult, PodSnapshot


async def run(s: Session, args: NoArgs) -> ActionResult:
    svc = await s.services()
    s.started.add(Started.RAY)  # also when it fails half-way: a partial Ray needs teardown
    return relay(await svc.ray_up(s.actor))


def confirm(args: NoArgs, pod: PodSnapshot | None) -> Confirm:
    return Confirm(
        "Restart Ray on the pod?",
        "Starts the head and joins every worker; a running Ray is restarted and its jobs stop.",
        "Restart Ray",
    )


COMMAND = Command(
    "ray_up",
    "start the Ray head and join every worker (restarts if up)",
    NoArgs,
    run,
    Effect.ACTS,
    order=110,
    needs=Capability.RAY,
    fronts=frozenset({Front.TUI, Front.SCRIPT, Front.MCP}),
    title="Restart Ray",
    hint="Start the head and join every worker; restarts Ray",
    confirm=confirm,
)
