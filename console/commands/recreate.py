"""``recreate``: a host brought back bare, with a new host key (the local emulator)."""

from __future__ import annotations

from dataclasses import dataclass

from console.commands.kit.base import Command, Confirm, Effect, Front, Session, relay
from console.commands.kit.params import Kind, arg
from console.services.capabilities import Capability
from console.services.model import ActionResult, PodSnapshot


@dataclass(frozen=True, kw_only=True)
class Args:
    host: str = arg(Kind.HOST, "HOST")


async def run(s: Session, args: Args) -> ActionResult:
    return relay(await (await s.services()).recreate(args.host, s.actor))


def confirm(args: Args, pod: PodSnapshot | None) -> Confirm:
    return Confirm(
        f"Recreate {args.host}?",
        "Emulator: deletes the host and brings it back bare (new host key).",
        "Recreate",
    )


COMMAND = Command(
    "recreate",
    "recreate a host: bare sandbox, new host key (local only)",
    Args,
    run,
    Effect.ACTS,
    order=180,
    needs=Capability.POD_EMULATOR,
    fronts=frozenset({Front.TUI, Front.SCRIPT, Front.MCP}),
    title="Recreate host (emulator)",
    hint="Bring the emulated host back, bare",
    confirm=confirm,
)
