"""``gke up``: start the local GKE emulator."""

from __future__ import annotations

from dataclasses import dataclass

from console.commands.kit.base import Command, CommandFailed, Effect, Front, Session, Started
from console.commands.kit.params import Kind, arg
from console.services.capabilities import Capability
from console.services.model import ActionResult


@dataclass(frozen=True, kw_only=True)
class Args:
    slices: int | None = arg(
        Kind.INT, "N", "v5p-64 slices (default gke.slices)", flag=True, min=1, max=16
    )
    quota_stall: bool = arg(Kind.FLAG, help="preempted slices never come back", flag=True)


async def run(s: Session, args: Args) -> ActionResult:
    if s.gke is None:
        raise CommandFailed(
            f"no GKE emulator for {s.settings.cluster.words} (it needs cluster.provider = "
            "'gke' and no gke.kubeconfig)"
        )
    if await s.gke.is_up():
        name = s.settings.cluster.name
        raise CommandFailed(
            f"a GKE emulator is already running for {s.settings.cluster.words}; "
            f"`phantom --cluster {name} gke down` it first, or remove `gke up` from the script"
        )
    await s.drop_services()  # services built before the cluster existed are stale
    result = await s.gke.up(args.slices, args.quota_stall)
    s.started.add(Started.GKE)
    return ActionResult.done("gke_up", "GKE emulator up", result)


COMMAND = Command(
    "gke_up",
    "start the local GKE emulator (provider gke, no kubeconfig)",
    Args,
    run,
    Effect.ACTS,
    order=30,
    needs=Capability.GKE_EMULATOR,
    fronts=frozenset({Front.SCRIPT}),
    verb="gke up",
)
