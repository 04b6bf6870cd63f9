"""``bootstrap``: run the bootstrap command on the hosts (default: all)."""

from __future__ import annotations

from dataclasses import dataclass

from console.commands.kit.base import Command, Effect, Front, Session, relay
from console.commands.kit.params import Kind, arg
from console.services.capabilities import Capability
from console.services.model import ActionResult


@dataclass(frozen=True, kw_only=True)
class Args:
    hosts: tuple[str, ...] = arg(Kind.HOST, "HOST", variadic=True)


async def run(s: Session, args: Args) -> ActionResult:
    hosts = list(args.hosts) or None
    s.tell(f"Bootstrapping {', '.join(hosts) if hosts else 'every host'}…")
    return relay(await (await s.services()).bootstrap(hosts, s.actor))


COMMAND = Command(
    "bootstrap",
    "run the bootstrap command on the hosts (default: all)",
    Args,
    run,
    Effect.ACTS,
    order=100,
    needs=Capability.HOSTS,
    fronts=frozenset({Front.TUI, Front.SCRIPT, Front.MCP}),
    title="Re-bootstrap host",
    hint="Run the bootstrap command again on this host only",
)
