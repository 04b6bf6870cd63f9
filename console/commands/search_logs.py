"""``search_logs``: the lines of a job's (on GKE a workload's or pod's) log that contain TEXT."""

from __future__ import annotations

from dataclasses import dataclass

from console.commands.kit.base import Command, Effect, Front, Session
from console.commands.kit.params import Kind, arg
from console.commands.kit.told import plain_lines
from console.services.model import ActionResult


@dataclass(frozen=True, kw_only=True)
class Args:
    job: str = arg(Kind.JOB, "ID|POD|WORKLOAD", "a Ray submission id; on GKE a workload or a pod")
    text: str = arg(Kind.STR, "TEXT", "what the lines contain (plain text, case-sensitive)")
    tail: int | None = arg(
        Kind.INT, "N", "matching lines to keep, newest (default 100)", flag=True, min=1
    )


async def run(s: Session, args: Args) -> ActionResult:
    services = await s.services()
    job_id = services.successor(args.job)
    lines = plain_lines((await services.job_logs(job_id)).splitlines())
    hits = [(n, line) for n, line in enumerate(lines, start=1) if args.text in line]
    tail = args.tail or 100
    return ActionResult.done(
        "search_logs",
        f"{len(hits)} matching lines of {job_id}",
        {
            "job_id": job_id,
            "total_lines": len(lines),
            "matching_lines": len(hits),
            "lines": [{"line": n, "text": line} for n, line in hits[-tail:]],
        },
    )


COMMAND = Command(
    "search_logs",
    "the lines of a job's (on GKE a workload's or pod's) log that contain TEXT",
    Args,
    run,
    Effect.READS,
    order=330,
    fronts=frozenset({Front.MCP}),
)
