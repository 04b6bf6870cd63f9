"""``tunnel``: open the SSH tunnel to the dashboard and Ray client ports."""

from __future__ import annotations

from console.commands.kit.base import Command, Effect, Front, Session, relay
from console.commands.kit.params import NoArgs
from console.services.capabilities import Capability
from console.services.model import ActionResult


async def run(s: Session, args: NoArgs) -> ActionResult:
    return relay(await (await s.services()).open_tunnel(s.actor))


COMMAND = Command(
    "tunnel",
    "open the SSH tunnel to the dashboard and Ray client ports",
    NoArgs,
    run,
    Effect.ACTS,
    order=120,
    needs=Capability.TUNNEL,
    fronts=frozenset({Front.TUI, Front.SCRIPT, Front.MCP}),
    title="Re-open tunnel",
    hint="Re-open the SSH tunnel to the Ray dashboard",
)
