"""``checkpoint [JOB|all]``: every running trainer of the job writes a checkpoint now and trains on.

The preemption notice's path without the stop: each trainer finishes the step it is on,
writes a complete checkpoint at that step and goes on training; the result names every
trainer's host, run, step and checkpoint, and is journaled with who asked. Where the
cluster's trainers cannot be asked (a real GKE cluster: a pod's trainer cannot be signalled
from here), the command is refused, saying so.
"""

from __future__ import annotations

from dataclasses import dataclass

from console.commands.kit.base import Command, Effect, Front, Session, relay
from console.commands.kit.params import job, timeout
from console.services.capabilities import Capability
from console.services.model import ActionResult

ALL = "all"
DEFAULT_TIMEOUT_S = 120.0


@dataclass(frozen=True, kw_only=True)
class Args:
    job: str | None = job("JOB|all", "a job id, all (every running job), or last (the default)")
    timeout: float | None = timeout(f"{DEFAULT_TIMEOUT_S:g}")


async def run(s: Session, args: Args) -> ActionResult:
    svc = await s.services()
    target = ALL if args.job == ALL else s.job_ref(args.job)
    limit = DEFAULT_TIMEOUT_S if args.timeout is None else args.timeout
    s.tell(f"Asking the trainers of {'every job' if target == ALL else target} for a checkpoint…")
    return relay(await svc.checkpoint(target, s.actor, limit))


COMMAND = Command(
    "checkpoint",
    "every running trainer of the job (all: of every job) writes a checkpoint now and trains "
    "on; each one's step and checkpoint in the result",
    Args,
    run,
    Effect.ACTS,
    order=165,
    needs=Capability.CHECKPOINT,
    fronts=frozenset({Front.TUI, Front.SCRIPT, Front.MCP}),
    title="Checkpoint now",
    hint="The highlighted job's trainers write a checkpoint at their step and train on",
)
