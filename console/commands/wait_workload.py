"""``wait-workload``: until a workload reaches a state."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from console.commands.kit.base import Command, Effect, Front, Session
from console.commands.kit.params import WORKLOAD_STATES, Kind, arg, timeout
from console.commands.kit.poll import DEFAULT_TIMEOUTS, ended, poll_status
from console.services.capabilities import Capability
from console.services.model import TERMINAL_JOBS, ActionResult, JobInfo, JobStatus, to_jsonable


@dataclass(frozen=True, kw_only=True)
class Args:
    job: str = arg(Kind.JOB, "NAME|last")
    status: str = arg(Kind.CHOICE, choices=WORKLOAD_STATES)
    timeout: float | None = timeout("3600")


async def run(s: Session, args: Args) -> ActionResult:
    """Until the workload reaches STATE. A Failed JobSet of this console is given the
    watchdog's resubmission before the step fails (it fails at once with auto recovery
    off); SUCCEEDED/STOPPED that is not STATE fails at once."""
    svc = await s.services()
    # COMPLETED is the JobSet's word for SUCCEEDED
    target = JobStatus.SUCCEEDED if args.status == "COMPLETED" else args.status
    limit = DEFAULT_TIMEOUTS["wait_workload"] if args.timeout is None else args.timeout
    name = s.job_ref(args.job)
    grace_s = svc.settings.polling.lost_grace_s
    failed_since: float | None = None

    def judge(name: str, info: JobInfo) -> dict[str, Any] | None:
        nonlocal failed_since
        if info.status == target:
            return to_jsonable(info)
        if info.status in TERMINAL_JOBS and not svc.recovery_status().active:
            failed_since = failed_since or time.monotonic()
            waited = time.monotonic() - failed_since
            resumable = info.status in (JobStatus.FAILED, JobStatus.PREEMPTED)
            if not resumable or not svc.recovery_status().auto or waited > grace_s:
                raise ended("workload", name, target, info)
        else:
            failed_since = None
        return None

    out = await poll_status(s, svc, "workload", target, limit, lambda: name, judge)
    return ActionResult.done("wait_workload", f"workload {name} {target}", out)


COMMAND = Command(
    "wait_workload",
    "wait until the workload reaches STATE (COMPLETED = SUCCEEDED; fails early if "
    "it ends otherwise and nothing resubmits it)",
    Args,
    run,
    Effect.READS,
    order=70,
    needs=Capability.WORKLOADS,
    fronts=frozenset({Front.SCRIPT}),
    verb="wait-workload",
)
