"""``sleep``: wait S seconds."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from console.commands.kit.base import Command, Effect, Front, Session
from console.commands.kit.params import Kind, arg
from console.services.model import ActionResult


@dataclass(frozen=True, kw_only=True)
class Args:
    seconds: float = arg(Kind.SECONDS, "S")


async def run(s: Session, args: Args) -> ActionResult:
    await asyncio.sleep(args.seconds)
    return ActionResult.done("sleep", f"slept {args.seconds:g}s", {"slept_s": args.seconds})


COMMAND = Command(
    "sleep",
    "wait S seconds",
    Args,
    run,
    Effect.READS,
    order=260,
    fronts=frozenset({Front.SCRIPT}),
    on_cluster=False,
)
