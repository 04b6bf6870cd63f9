"""``wait-job``: until a job (or the job that replaced it after a head loss) reaches a state."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from console.commands.kit.base import Command, CommandFailed, Effect, Front, Session
from console.commands.kit.params import JOB_STATUSES, Kind, arg, job, timeout
from console.commands.kit.poll import DEFAULT_TIMEOUTS, ended, poll_status
from console.services.model import TERMINAL_JOBS, ActionResult, JobInfo, JobStatus, to_jsonable


@dataclass(frozen=True, kw_only=True)
class Args:
    job: str | None = job()
    status: str = arg(Kind.CHOICE, choices=JOB_STATUSES)
    timeout: float | None = timeout("3600")


async def run(s: Session, args: Args) -> ActionResult:
    """Until the job (or the job that replaced it after a head loss) reaches STATUS.

    Fails early when it ends otherwise, and when it is LOST with nothing bringing it back:
    no recovery running and no resubmission within ``lost_grace_s`` (the watchdog resubmits
    a lost job within a poll or two of seeing the head come back)."""
    svc = await s.services()
    target = args.status
    limit = DEFAULT_TIMEOUTS["wait_job"] if args.timeout is None else args.timeout
    current = s.job_ref(args.job)
    ref = args.job or "last"
    first_id = s.last_job if ref == "last" else ref
    lost_grace_s = svc.settings.polling.lost_grace_s
    lost_since: float | None = None

    def follow() -> str:
        nonlocal current
        current = svc.successor(s.feed.follow(current))
        return current

    def judge(job_id: str, info: JobInfo) -> dict[str, Any] | None:
        nonlocal lost_since
        status = info.status
        # "RUNNING" means "has started": a short job may be done before we look.
        if status == target or (target == JobStatus.RUNNING and status is JobStatus.SUCCEEDED):
            out = to_jsonable(info)
            if job_id != first_id:
                out["followed_from"] = first_id
            return out
        recovering = svc.recovery_status().active
        # PREEMPTED (checkpointed on the notice) and LOST wait for the resubmission
        comes_back = status in (JobStatus.LOST, JobStatus.PREEMPTED)
        if status in TERMINAL_JOBS and not comes_back and not recovering:
            raise ended("job", job_id, target, info)
        if comes_back and not recovering:
            lost_since = lost_since or time.monotonic()
            if time.monotonic() - lost_since > lost_grace_s:
                why = "LOST" if status == JobStatus.LOST else "PREEMPTED (resumable)"
                raise CommandFailed(
                    f"job {job_id} is {why} ({info.message[:200]}) and nothing resubmits "
                    "it (is auto recovery off? `recover` brings the cluster and its jobs "
                    "back)",
                    to_jsonable(info),
                )
        else:
            lost_since = None
        return None

    out = await poll_status(s, svc, "job", target, limit, follow, judge)
    return ActionResult.done("wait_job", f"job {out.get('job_id', current)} {target}", out)


COMMAND = Command(
    "wait_job",
    "wait until the job reaches STATUS (fails early if it ends otherwise; RUNNING "
    "means started, so an already SUCCEEDED job counts)",
    Args,
    run,
    Effect.READS,
    order=140,
    fronts=frozenset({Front.SCRIPT}),
    verb="wait-job",
)
