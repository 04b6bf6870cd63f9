"""``auto-recovery``: the watchdog recovers on its own, or only when asked."""

from __future__ import annotations

from dataclasses import dataclass

from console.commands.kit.base import Command, Effect, Front, Session
from console.commands.kit.params import Kind, arg
from console.services.capabilities import Capability
from console.services.model import ActionResult


@dataclass(frozen=True, kw_only=True)
class Args:
    enabled: bool = arg(Kind.ONOFF, "on|off")


async def run(s: Session, args: Args) -> ActionResult:
    (await s.services()).set_auto_recovery(args.enabled, s.actor)
    words = "on" if args.enabled else "off"
    return ActionResult.done("auto_recovery", f"auto recovery {words}", {"auto": args.enabled})


def told(result: ActionResult) -> str:
    return f"Auto-recovery {'on' if result.data.get('auto') else 'off'}."


COMMAND = Command(
    "auto_recovery",
    "switch the watchdog's automatic recovery on or off",
    Args,
    run,
    Effect.ACTS,
    order=210,
    needs=Capability.RECOVER,
    fronts=frozenset({Front.TUI, Front.SCRIPT, Front.MCP}),
    title="Toggle auto-recovery",
    hint="Let the watchdog recover on its own, or only when you press r",
    told=told,
)
