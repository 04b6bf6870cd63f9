"""``workload delete``: a workload and its Secret (`xpk workload delete`)."""

from __future__ import annotations

from dataclasses import dataclass

from console.commands.kit.base import Command, Confirm, Effect, Front, Session, relay
from console.commands.kit.params import Kind, arg
from console.services.capabilities import Capability
from console.services.model import ActionResult, PodSnapshot


@dataclass(frozen=True, kw_only=True)
class Args:
    name: str = arg(Kind.NAME, "NAME")


async def run(s: Session, args: Args) -> ActionResult:
    return relay(await (await s.services()).delete_workload(args.name, s.actor))


def confirm(args: Args, pod: PodSnapshot | None) -> Confirm:
    return Confirm(
        f"Delete workload {args.name}?",
        "Deletes the JobSet (or Job) and its pods, as `kubectl delete jobset` does; its "
        "checkpoints stay in the bucket.",
        "Delete",
    )


COMMAND = Command(
    "workload_delete",
    "delete a workload and its Secret (`xpk workload delete`)",
    Args,
    run,
    Effect.DESTROYS,
    order=60,
    needs=Capability.WORKLOADS,
    fronts=frozenset({Front.TUI, Front.SCRIPT, Front.MCP}),
    verb="workload delete",
    title="Delete workload",
    hint="Delete the selected workload, its pods and its Secret",
    confirm=confirm,
)
