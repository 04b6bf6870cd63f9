"""``wait-event``: until an event of a kind is heard (since the session started)."""

from __future__ import annotations

import time
from dataclasses import dataclass

from console.commands.kit.base import Command, CommandFailed, Effect, Front, Session
from console.commands.kit.params import Kind, arg, timeout
from console.commands.kit.poll import DEFAULT_TIMEOUTS
from console.services.model import ActionResult


@dataclass(frozen=True, kw_only=True)
class Args:
    kind: str = arg(Kind.EVENT, "KIND")
    host: str | None = arg(Kind.HOST, "HOST", flag=True)
    timeout: float | None = timeout("600")


async def run(s: Session, args: Args) -> ActionResult:
    await s.services()  # events only flow while services run
    limit = DEFAULT_TIMEOUTS["wait_event"] if args.timeout is None else args.timeout
    deadline = time.monotonic() + limit
    while True:
        found = s.feed.take_event(args.kind, args.host)
        if found is not None:
            return ActionResult.done("wait_event", f"heard {args.kind}", found)
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            where = f" on {args.host}" if args.host else ""
            raise CommandFailed(f"no {args.kind!r} event{where} within {limit:g}s")
        await s.wait(min(s.poll_s, remaining))


COMMAND = Command(
    "wait_event",
    "wait for an event of KIND (e.g. preempted, recovered, stalled) seen since the "
    "script started and not matched by an earlier wait-event",
    Args,
    run,
    Effect.READS,
    order=220,
    fronts=frozenset({Front.SCRIPT}),
    verb="wait-event",
)
