"""``logs``: a job's log, its last lines; on GKE a workload's (its coordinator pod) or a pod's."""

from __future__ import annotations

from dataclasses import dataclass

from console.commands.kit.base import Command, Effect, Front, Session
from console.commands.kit.params import Kind, arg, job
from console.commands.kit.told import plain_lines
from console.services.model import ActionResult


@dataclass(frozen=True, kw_only=True)
class Args:
    job: str | None = job(
        "ID|POD|WORKLOAD|last",
        "a Ray submission id; on GKE a workload or a pod; or last (the default)",
    )
    tail: int | None = arg(Kind.INT, "N", "lines to keep (default 100)", flag=True, min=1)


async def run(s: Session, args: Args) -> ActionResult:
    svc = await s.services()
    job_id = s.job_ref(args.job)
    lines = plain_lines((await svc.job_logs(job_id)).splitlines())
    tail = args.tail or 100
    return ActionResult.done(
        "logs",
        f"{len(lines)} lines of {job_id}",
        {"job_id": job_id, "total_lines": len(lines), "lines": lines[-tail:]},
    )


COMMAND = Command(
    "logs",
    "the job's log (last N lines in the step result); on GKE a workload's "
    "(its coordinator pod) or a pod's",
    Args,
    run,
    Effect.READS,
    order=150,
    fronts=frozenset({Front.SCRIPT, Front.MCP}),
)
