"""``gke down``: stop the local GKE emulator and every container it runs."""

from __future__ import annotations

from console.commands.kit.base import Command, Effect, Front, Session, Started
from console.commands.kit.params import NoArgs
from console.services.capabilities import Capability
from console.services.model import ActionResult


async def run(s: Session, args: NoArgs) -> ActionResult:
    await s.drop_services()
    was_running = await s.gke.down() if s.gke is not None else False
    s.started.discard(Started.GKE)
    return ActionResult.done("gke_down", "GKE emulator down", {"was_running": was_running})


COMMAND = Command(
    "gke_down",
    "stop the GKE emulator and every container it runs",
    NoArgs,
    run,
    Effect.DESTROYS,
    order=40,
    needs=Capability.GKE_EMULATOR,
    fronts=frozenset({Front.SCRIPT}),
    verb="gke down",
)
