"""``teardown``: `ray stop -f` everywhere and close the tunnel (the VMs stay)."""

from __future__ import annotations

from console.commands.kit.base import Command, Confirm, Effect, Front, Session, relay
from console.commands.kit.params import NoArgs
from console.services.capabilities import Capability
from console.services.model import ActionResult, PodSnapshot


async def run(s: Session, args: NoArgs) -> ActionResult:
    return relay(await (await s.services()).teardown(s.actor))


def confirm(args: NoArgs, pod: PodSnapshot | None) -> Confirm:
    return Confirm(
        "Tear down Ray?",
        "Runs `ray stop -f` on every host and closes the tunnel. Running jobs stop. "
        "The VMs are left alone.",
        "Tear down",
    )


COMMAND = Command(
    "teardown",
    "`ray stop -f` everywhere and close the tunnel (VMs stay)",
    NoArgs,
    run,
    Effect.DESTROYS,
    order=250,
    needs=Capability.RAY,
    fronts=frozenset({Front.TUI, Front.SCRIPT, Front.MCP}),
    title="Teardown: ray stop everywhere, close tunnel",
    hint="Stops Ray on every host and closes the tunnel; VMs stay",
    confirm=confirm,
)
