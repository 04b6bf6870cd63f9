"""``recover``: the whole recovery loop now (or join the running one), and wait for it."""

from __future__ import annotations

from dataclasses import dataclass

from console.commands.kit.base import Command, CommandFailed, Confirm, Effect, Front, Session
from console.commands.kit.params import timeout
from console.commands.kit.poll import DEFAULT_TIMEOUTS
from console.commands.kit.told import duration
from console.services.capabilities import Capability
from console.services.model import ActionResult, HostState, PodSnapshot, recovery_json


@dataclass(frozen=True, kw_only=True)
class Args:
    timeout: float | None = timeout("1800")


async def run(s: Session, args: Args) -> ActionResult:
    svc = await s.services()
    limit = DEFAULT_TIMEOUTS["recover"] if args.timeout is None else args.timeout
    s.tell("Recovery started.")
    status = await svc.recover(s.actor, limit)
    out = recovery_json(status)
    if status.ok:
        return ActionResult("recover", True, status.mttr_s or 0.0, message="recovered", data=out)
    if status.outcome is None:
        raise CommandFailed(f"recovery still running after {limit:g}s", out)
    raise CommandFailed(f"recovery {status.result_text}", out)


def confirm(args: Args, pod: PodSnapshot | None) -> Confirm:
    lost = [h.name for h in pod.hosts if h.tpu_state != HostState.READY] if pod else []
    body = (
        "Runs detect → recreate preempted VMs → wait READY → bootstrap → Ray head and "
        "workers → tunnel → relaunch jobs/sweep → verify metrics.\n"
        "Ray is restarted on every host: running jobs are resubmitted."
    )
    if lost:
        body = f"Not READY: {', '.join(lost[:8])}{' …' if len(lost) > 8 else ''}.\n" + body
    return Confirm("Run the recovery loop now?", body, "Recover")


def told(result: ActionResult) -> str:
    mttr = result.data.get("mttr_s")
    words = result.data.get("result") or "finished"
    return f"Recovery {words}" + (f" (MTTR {duration(mttr)})" if mttr is not None else "")


COMMAND = Command(
    "recover",
    "run the recovery loop now (or join the running one) and wait",
    Args,
    run,
    Effect.ACTS,
    order=190,
    needs=Capability.RECOVER,
    fronts=frozenset({Front.TUI, Front.SCRIPT, Front.MCP}),
    title="Recover now",
    hint="Run the whole recovery loop now",
    confirm=confirm,
    told=told,
)
