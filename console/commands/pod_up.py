"""``pod up``: start the local pod emulator and wait until READY."""

from __future__ import annotations

from dataclasses import dataclass

from console.commands.kit.base import Command, CommandFailed, Effect, Front, Session, Started
from console.commands.kit.params import MAX_EMULATED_HOSTS, Kind, arg
from console.services.capabilities import Capability
from console.services.model import ActionResult


@dataclass(frozen=True, kw_only=True)
class Args:
    hosts: int | None = arg(
        Kind.INT, "N", "number of hosts", flag=True, min=1, max=MAX_EMULATED_HOSTS
    )
    ready_delay: float | None = arg(
        Kind.SECONDS, "S", "seconds a (re)created host stays CREATING", flag=True
    )
    ssh_port: int | None = arg(
        Kind.INT, "PORT", "SSH port on every host (0: any free)", flag=True, min=0, max=65535
    )


async def run(s: Session, args: Args) -> ActionResult:
    if s.pod is None:
        raise CommandFailed("no pod emulator to bring up here")
    if await s.pod.is_up():
        name = s.settings.cluster.name
        raise CommandFailed(
            f"a pod emulator is already running for {s.settings.cluster.words}; "
            f"`phantom --cluster {name} pod down` it first, or remove `pod up` from the script"
        )
    await s.drop_services()  # services built before the pod existed are stale
    hosts = args.hosts or s.settings.cluster.hosts
    result = await s.pod.up(hosts, ready_delay=args.ready_delay, ssh_port=args.ssh_port)
    s.started.add(Started.POD)
    return ActionResult.done("pod_up", f"pod up with {hosts} hosts", result)


COMMAND = Command(
    "pod_up",
    "start the local pod emulator and wait until READY (local only)",
    Args,
    run,
    Effect.ACTS,
    order=10,
    needs=Capability.POD_EMULATOR,
    fronts=frozenset({Front.SCRIPT}),
    verb="pod up",
)
