"""``preempt``: a host (or all of them) reclaimed like a spot VM (the local emulator)."""

from __future__ import annotations

from dataclasses import dataclass

from console.commands.kit.base import Command, Confirm, Effect, Front, Session, relay
from console.commands.kit.params import Kind, arg
from console.services.capabilities import Capability
from console.services.model import ActionResult, PodSnapshot


@dataclass(frozen=True, kw_only=True)
class Args:
    host: str = arg(Kind.HOST_OR_ALL, "HOST|all")


async def run(s: Session, args: Args) -> ActionResult:
    return relay(await (await s.services()).preempt(args.host, s.actor))


def confirm(args: Args, pod: PodSnapshot | None) -> Confirm:
    return Confirm(
        f"Preempt {args.host}?",
        "Emulator: kills every process of this host like a spot reclaim.",
        "Preempt",
    )


COMMAND = Command(
    "preempt",
    "preempt a host or all of them (local only)",
    Args,
    run,
    Effect.ACTS,
    order=170,
    needs=Capability.POD_EMULATOR,
    fronts=frozenset({Front.TUI, Front.SCRIPT, Front.MCP}),
    title="Preempt host (emulator)",
    hint="Kill the emulated host like a spot reclaim",
    confirm=confirm,
)
