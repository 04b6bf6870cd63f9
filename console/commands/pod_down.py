"""``pod down``: stop the local pod emulator and every process of its hosts."""

from __future__ import annotations

from console.commands.kit.base import Command, CommandFailed, Effect, Front, Session, Started
from console.commands.kit.params import NoArgs
from console.services.capabilities import Capability
from console.services.model import ActionResult


async def run(s: Session, args: NoArgs) -> ActionResult:
    if s.pod is None:
        raise CommandFailed("no pod emulator to bring down here")
    await s.drop_services()
    was_running = await s.pod.down()
    s.started.discard(Started.POD)
    return ActionResult.done("pod_down", "pod down", {"was_running": was_running})


COMMAND = Command(
    "pod_down",
    "stop the emulator and every process of its hosts (local only)",
    NoArgs,
    run,
    Effect.DESTROYS,
    order=20,
    needs=Capability.POD_EMULATOR,
    fronts=frozenset({Front.SCRIPT}),
    verb="pod down",
)
