"""``stop-job``: stop a job (its checkpoints stay in storage)."""

from __future__ import annotations

from dataclasses import dataclass

from console.commands.kit.base import Command, Confirm, Effect, Front, Session, relay
from console.commands.kit.params import job
from console.services.model import ActionResult, PodSnapshot


@dataclass(frozen=True, kw_only=True)
class Args:
    job: str | None = job()


async def run(s: Session, args: Args) -> ActionResult:
    svc = await s.services()
    return relay(await svc.stop_job(s.job_ref(args.job), s.actor))


def confirm(args: Args, pod: PodSnapshot | None) -> Confirm:
    return Confirm(
        f"Stop job {args.job}?", "Ray stops the job; its checkpoints stay in storage.", "Stop job"
    )


COMMAND = Command(
    "stop_job",
    "stop a job",
    Args,
    run,
    Effect.DESTROYS,
    order=160,
    fronts=frozenset({Front.TUI, Front.SCRIPT, Front.MCP}),
    verb="stop-job",
    title="Stop job",
    hint="Stop the highlighted job",
    confirm=confirm,
)
