"""``preempt-slice``: a TPU slice reclaimed as GKE reclaims spot capacity (its emulator)."""

from __future__ import annotations

from dataclasses import dataclass

from console.commands.kit.base import Command, Confirm, Effect, Front, Session, relay
from console.commands.kit.params import Kind, arg
from console.services.capabilities import Capability
from console.services.model import ActionResult, PodSnapshot


@dataclass(frozen=True, kw_only=True)
class Args:
    slice: str = arg(Kind.SLICE, "SLICE", "index or node pool name")
    grace: float | None = arg(
        Kind.SECONDS, "S", "pods' grace before SIGKILL (default 30)", flag=True
    )


async def run(s: Session, args: Args) -> ActionResult:
    svc = await s.services()
    return relay(await svc.preempt_slice(args.slice, args.grace, s.actor))


def confirm(args: Args, pod: PodSnapshot | None) -> Confirm:
    nodes = sum(1 for h in pod.hosts if h.pool == args.slice) if pod else 0
    return Confirm(
        f"Preempt slice {args.slice}?",
        f"Emulator: GKE reclaims the spot slice ({nodes} nodes) as it does in life: its "
        "pods get DisruptionTarget, SIGTERM, exit 143, and the nodes go and come back.",
        "Preempt",
    )


COMMAND = Command(
    "preempt_slice",
    "preempt a TPU slice as GKE reclaims spot capacity (GKE emulator only)",
    Args,
    run,
    Effect.ACTS,
    order=80,
    needs=Capability.GKE_EMULATOR,
    fronts=frozenset({Front.TUI, Front.SCRIPT, Front.MCP}),
    verb="preempt-slice",
    title="Preempt slice (emulator)",
    hint="Reclaim the selected workload's TPU slice as GKE does",
    confirm=confirm,
)
