"""Waiting for a job or a workload to reach a state: the reads a waiting command repeats."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from console.commands.kit.base import CommandFailed, Session
from console.commands.kit.told import error_sentence
from console.services.model import JobInfo, to_jsonable

if TYPE_CHECKING:
    from console.services.api import ConsoleServices

# A command's own default, said in its --timeout help.
DEFAULT_TIMEOUTS = {
    "wait_job": 3600.0,
    "wait_workload": 3600.0,
    "recover": 1800.0,
    "wait_event": 600.0,
}


async def poll_status(
    s: Session,
    svc: ConsoleServices,
    what: str,
    target: str,
    timeout: float,
    ref: Callable[[], str],
    judge: Callable[[str, JobInfo], dict[str, Any] | None],
) -> dict[str, Any]:
    """Poll ``svc.job_status(ref())`` until ``judge`` returns the result (or raises
    CommandFailed), for at most ``timeout`` s. Errors (the API or the head busy or down
    mid-recovery) are kept for the timeout message and polling goes on."""
    deadline = time.monotonic() + timeout
    name = status = last_error = ""
    while True:
        name = ref()
        try:
            async with asyncio.timeout(max(5.0, s.poll_s * 5)):
                info = await svc.job_status(name)
            s.feed.observe_job(info)
            status, last_error = info.status, ""
            done = judge(name, info)
            if done is not None:
                return done
        except (CommandFailed, asyncio.CancelledError):
            raise
        except Exception as exc:
            last_error = error_sentence(exc)
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            why = f"; last error: {last_error}" if last_error else ""
            raise CommandFailed(
                f"{what} {name} not {target} within {timeout:g}s (status {status or '?'}){why}",
                {"job_id": name, "status": status},
            )
        await s.wait(min(s.poll_s, remaining))


def ended(what: str, name: str, target: str, info: JobInfo) -> CommandFailed:
    return CommandFailed(
        f"{what} {name} ended {info.status}, expected {target}"
        + (f": {info.message}" if info.message else ""),
        to_jsonable(info),
    )
