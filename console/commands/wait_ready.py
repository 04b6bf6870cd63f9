"""``wait-ready``: until the TPU node and every host are READY."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from console.commands.kit.base import Command, CommandFailed, Effect, Front, Session, relay
from console.commands.kit.params import timeout
from console.services.model import ActionResult


@dataclass(frozen=True, kw_only=True)
class Args:
    timeout: float | None = timeout("recovery.ready_timeout_s")


async def run(s: Session, args: Args) -> ActionResult:
    svc = await s.services()
    limit = svc.settings.recovery.ready_timeout_s if args.timeout is None else args.timeout
    try:
        async with asyncio.timeout(limit + 30):
            res = await svc.wait_ready(limit, s.actor)
    except TimeoutError:
        raise CommandFailed(f"not READY within {limit:g}s") from None
    return relay(res)


COMMAND = Command(
    "wait_ready",
    "wait until the TPU node and every host are READY",
    Args,
    run,
    Effect.READS,
    order=90,
    fronts=frozenset({Front.SCRIPT}),
    verb="wait-ready",
)
