"""What each script verb does: one handler per ``language.ACTIONS`` entry, in ``HANDLERS``.

A handler gets the run (``Run``: its services, its feed, what it started, who acts) and the line's
checked arguments, and returns the step's JSON-able result, or raises ``StepFailure`` with
the reason and the partial result. Every action but ``pod up|down`` and ``gke up|down`` (the
emulators' own clients) is one ``ConsoleServices`` call.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from console.config import Config
from console.script.feed import EventFeed
from console.script.language import DEFAULT_TIMEOUTS
from console.script.parse import build_spec
from console.script.told import error_sentence, plain_lines
from console.script.workload_args import build_workload_spec
from console.services.ledger.book import read_book
from console.services.model import (
    TERMINAL_JOBS,
    ActionResult,
    JobInfo,
    JobStatus,
    recovery_json,
    to_jsonable,
)
from console.status import collect_status

if TYPE_CHECKING:
    from console.services.api import ConsoleServices

Args = Mapping[str, Any]


class PodControl(Protocol):
    """A script's ``pod up`` / ``pod down`` (the local emulator)."""

    async def is_up(self) -> bool: ...

    async def up(
        self, hosts: int, *, ready_delay: float | None, ssh_port: int | None
    ) -> dict[str, Any]:
        """Start the pod and wait until READY; a JSON-able summary."""

    async def down(self) -> bool:
        """Stop it, leaving no process behind; True if one was running."""


class GkeControl(Protocol):
    """A script's ``gke up`` / ``gke down`` (the local GKE emulator)."""

    async def is_up(self) -> bool: ...

    async def up(self, slices: int | None, quota_stall: bool = False) -> dict[str, Any]:
        """Start the emulator (its API answering); a JSON-able summary."""

    async def down(self) -> bool:
        """Stop it and every container it runs; True if one was running."""


class Run(Protocol):
    """What a handler may use of the run it belongs to (``runner.ScriptRunner``)."""

    config: Config
    actor: str  # who the journal says acted: "script", or "mcp" for an agent's call
    pod: PodControl
    gke: GkeControl
    feed: EventFeed
    poll_s: float
    last_job: str | None
    pod_started: bool
    gke_started: bool
    ray_started: bool

    async def services(self) -> ConsoleServices: ...

    async def drop_services(self) -> None: ...

    async def wait(self, timeout: float) -> None: ...

    def set_last(self, info: JobInfo) -> None: ...

    def job_ref(self, args: Args) -> str: ...


Handler = Callable[[Run, Args], Awaitable[dict[str, Any]]]


class StepFailure(Exception):
    """A step did not reach its goal; ``result`` goes into the step's JSON line."""

    def __init__(self, message: str, result: Mapping[str, Any] | None = None) -> None:
        super().__init__(message)
        self.result = dict(result or {})


def action_result(res: ActionResult) -> dict[str, Any]:
    out: dict[str, Any] = to_jsonable(res)
    if not res.ok:
        reasons = [f"{h}: {r.error}" for h, r in res.per_host.items() if not r.ok and r.error]
        raise StepFailure(res.message or "; ".join(reasons) or f"{res.action} failed", out)
    return out


async def pod_up(run: Run, args: Args) -> dict[str, Any]:
    hosts = args.get("hosts") or run.config.cluster.hosts
    if await run.pod.is_up():
        raise StepFailure(
            "a pod emulator is already running for this config; `phantom pod down` it "
            "first, or remove `pod up` from the script"
        )
    await run.drop_services()  # services built before the pod existed are stale
    result = await run.pod.up(
        hosts, ready_delay=args.get("ready_delay"), ssh_port=args.get("ssh_port")
    )
    run.pod_started = True
    return result


async def pod_down(run: Run, args: Args) -> dict[str, Any]:
    await run.drop_services()
    was_running = await run.pod.down()
    run.pod_started = False
    return {"was_running": was_running}


async def gke_up(run: Run, args: Args) -> dict[str, Any]:
    if await run.gke.is_up():
        raise StepFailure(
            "a GKE emulator is already running for this config; `phantom gke down` it "
            "first, or remove `gke up` from the script"
        )
    await run.drop_services()  # services built before the cluster existed are stale
    result = await run.gke.up(args.get("slices"), bool(args.get("quota_stall")))
    run.gke_started = True
    return result


async def gke_down(run: Run, args: Args) -> dict[str, Any]:
    await run.drop_services()
    was_running = await run.gke.down()
    run.gke_started = False
    return {"was_running": was_running}


async def workload_create(run: Run, args: Args) -> dict[str, Any]:
    svc = await run.services()
    spec = build_workload_spec(args, run.config)
    preview = svc.preview_workload(spec)
    shown: dict[str, Any] = {
        "workload": spec.name,
        "kind": preview.kind,
        "spec": spec.display(),
        "command_line": preview.command_line,
        "console_url": preview.console_url,
        "logs_url": preview.logs_url,
        "output_uri": preview.output_uri,
    }
    if preview.secret_name:
        # (not under a key named "secret": the scrubber would mask the whole value)
        shown["env_delivery"] = {
            "kind": "Secret",
            "name": preview.secret_name,
            "variables": list(preview.secret_keys),
        }
    if args.get("dry_run"):
        return {**shown, "manifest": preview.manifest, "dry_run": True}
    info = await svc.create_workload(spec, run.actor)
    run.set_last(info)
    return {**to_jsonable(info), **shown}


async def workload_delete(run: Run, args: Args) -> dict[str, Any]:
    return action_result(await (await run.services()).delete_workload(args["name"], run.actor))


async def preempt_slice(run: Run, args: Args) -> dict[str, Any]:
    svc = await run.services()
    return action_result(await svc.preempt_slice(args["slice"], args.get("grace"), run.actor))


async def _poll_status(
    run: Run,
    svc: ConsoleServices,
    what: str,
    target: str,
    timeout: float,
    ref: Callable[[], str],
    judge: Callable[[str, JobInfo], dict[str, Any] | None],
) -> dict[str, Any]:
    """Poll ``svc.job_status(ref())`` until ``judge`` returns the step's result (or raises
    StepFailure), for at most ``timeout`` s. Errors (the API or the head busy or down
    mid-recovery) are kept for the timeout message and polling goes on."""
    deadline = time.monotonic() + timeout
    name = status = last_error = ""
    while True:
        name = ref()
        try:
            async with asyncio.timeout(max(5.0, run.poll_s * 5)):
                info = await svc.job_status(name)
            run.feed.observe_job(info)
            status, last_error = info.status, ""
            done = judge(name, info)
            if done is not None:
                return done
        except (StepFailure, asyncio.CancelledError):
            raise
        except Exception as exc:
            last_error = error_sentence(exc)
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            why = f"; last error: {last_error}" if last_error else ""
            raise StepFailure(
                f"{what} {name} not {target} within {timeout:g}s (status {status or '?'}){why}",
                {"job_id": name, "status": status},
            )
        await run.wait(min(run.poll_s, remaining))


def _ended(what: str, name: str, target: str, info: JobInfo) -> StepFailure:
    return StepFailure(
        f"{what} {name} ended {info.status}, expected {target}"
        + (f": {info.message}" if info.message else ""),
        to_jsonable(info),
    )


async def wait_workload(run: Run, args: Args) -> dict[str, Any]:
    """Until the workload reaches STATE. A Failed JobSet of this console is given the
    watchdog's resubmission before the step fails (it fails at once with auto recovery
    off); SUCCEEDED/STOPPED that is not STATE fails at once."""
    svc = await run.services()
    # COMPLETED is the JobSet's word for SUCCEEDED
    target = JobStatus.SUCCEEDED if args["status"] == "COMPLETED" else args["status"]
    timeout = args.get("timeout")
    timeout = DEFAULT_TIMEOUTS["wait-workload"] if timeout is None else timeout
    name = run.job_ref(args)
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
                raise _ended("workload", name, target, info)
        else:
            failed_since = None
        return None

    return await _poll_status(run, svc, "workload", target, timeout, lambda: name, judge)


async def wait_ready(run: Run, args: Args) -> dict[str, Any]:
    timeout = args.get("timeout")
    timeout = run.config.recovery.ready_timeout_s if timeout is None else timeout
    svc = await run.services()
    try:
        async with asyncio.timeout(timeout + 30):
            res = await svc.wait_ready(timeout, run.actor)
    except TimeoutError:
        raise StepFailure(f"not READY within {timeout:g}s") from None
    return action_result(res)


async def bootstrap(run: Run, args: Args) -> dict[str, Any]:
    svc = await run.services()
    return action_result(await svc.bootstrap(list(args.get("hosts") or []) or None, run.actor))


async def ray_up(run: Run, args: Args) -> dict[str, Any]:
    svc = await run.services()
    run.ray_started = True  # also when it fails half-way: a partial Ray needs teardown
    return action_result(await svc.ray_up(run.actor))


async def tunnel(run: Run, args: Args) -> dict[str, Any]:
    return action_result(await (await run.services()).open_tunnel(run.actor))


async def teardown(run: Run, args: Args) -> dict[str, Any]:
    return action_result(await (await run.services()).teardown(run.actor))


async def preempt(run: Run, args: Args) -> dict[str, Any]:
    return action_result(await (await run.services()).preempt(args["host"], run.actor))


async def recreate(run: Run, args: Args) -> dict[str, Any]:
    return action_result(await (await run.services()).recreate(args["host"], run.actor))


async def submit(run: Run, args: Args) -> dict[str, Any]:
    svc = await run.services()
    spec = build_spec(args, run.config)
    info = await svc.submit(spec, run.actor)
    run.set_last(info)
    result = to_jsonable(info)
    result["runtime_env"] = spec.display_runtime_env()
    if info.status is JobStatus.FAILED:
        raise StepFailure(f"job {info.job_id} FAILED at submit: {info.message}", result)
    return result


async def relaunch_sweep(run: Run, args: Args) -> dict[str, Any]:
    info: JobInfo = await (await run.services()).relaunch_sweep(run.actor)
    run.set_last(info)
    return to_jsonable(info)


async def wait_job(run: Run, args: Args) -> dict[str, Any]:
    """Until the job (or the job that replaced it after a head loss) reaches STATUS.

    Fails early when it ends otherwise, and when it is LOST with nothing bringing it back:
    no recovery running and no resubmission within ``lost_grace_s`` (the watchdog resubmits
    a lost job within a poll or two of seeing the head come back)."""
    svc = await run.services()
    target = args["status"]
    timeout = args.get("timeout")
    timeout = DEFAULT_TIMEOUTS["wait-job"] if timeout is None else timeout
    current = run.job_ref(args)
    ref = args.get("job") or "last"
    first_id = run.last_job if ref == "last" else ref
    lost_grace_s = svc.settings.polling.lost_grace_s
    lost_since: float | None = None

    def follow() -> str:
        nonlocal current
        current = svc.successor(run.feed.follow(current))
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
            raise _ended("job", job_id, target, info)
        if comes_back and not recovering:
            lost_since = lost_since or time.monotonic()
            if time.monotonic() - lost_since > lost_grace_s:
                why = "LOST" if status == JobStatus.LOST else "PREEMPTED (resumable)"
                raise StepFailure(
                    f"job {job_id} is {why} ({info.message[:200]}) and nothing resubmits "
                    "it (is auto recovery off? `recover` brings the cluster and its jobs "
                    "back)",
                    to_jsonable(info),
                )
        else:
            lost_since = None
        return None

    return await _poll_status(run, svc, "job", target, timeout, follow, judge)


async def logs(run: Run, args: Args) -> dict[str, Any]:
    svc = await run.services()
    job_id = run.job_ref(args)
    lines = plain_lines((await svc.job_logs(job_id)).splitlines())
    tail = args.get("tail") or 100
    return {"job_id": job_id, "total_lines": len(lines), "lines": lines[-tail:]}


async def stop_job(run: Run, args: Args) -> dict[str, Any]:
    svc = await run.services()
    return action_result(await svc.stop_job(run.job_ref(args), run.actor))


async def recover(run: Run, args: Args) -> dict[str, Any]:
    svc = await run.services()
    timeout = args.get("timeout")
    timeout = DEFAULT_TIMEOUTS["recover"] if timeout is None else timeout
    status = await svc.recover(run.actor, timeout)
    out: dict[str, Any] = recovery_json(status)
    if status.ok:
        return out
    if status.outcome is None:
        raise StepFailure(f"recovery still running after {timeout:g}s", out)
    raise StepFailure(f"recovery {status.result_text}", out)


async def auto_recovery(run: Run, args: Args) -> dict[str, Any]:
    (await run.services()).set_auto_recovery(bool(args["enabled"]), run.actor)
    return {"auto": bool(args["enabled"])}


async def wait_event(run: Run, args: Args) -> dict[str, Any]:
    await run.services()  # events only flow while services run
    kind, host = args["kind"], args.get("host")
    timeout = args.get("timeout")
    timeout = DEFAULT_TIMEOUTS["wait-event"] if timeout is None else timeout
    deadline = time.monotonic() + timeout
    while True:
        found = run.feed.take_event(kind, host)
        if found is not None:
            return found
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            where = f" on {host}" if host else ""
            raise StepFailure(f"no {kind!r} event{where} within {timeout:g}s")
        await run.wait(min(run.poll_s, remaining))


async def status(run: Run, args: Args) -> dict[str, Any]:
    return await collect_status(await run.services())


async def ledger(run: Run, args: Args) -> dict[str, Any]:
    now = time.time()
    since = args.get("since")
    book = await read_book(
        await run.services(), now=now, since=None if since is None else now - since
    )
    return book.to_json()


async def sleep(run: Run, args: Args) -> dict[str, Any]:
    await asyncio.sleep(args["seconds"])
    return {"slept_s": args["seconds"]}


HANDLERS: dict[str, Handler] = {
    "pod up": pod_up,
    "pod down": pod_down,
    "gke up": gke_up,
    "gke down": gke_down,
    "workload create": workload_create,
    "workload delete": workload_delete,
    "wait-workload": wait_workload,
    "preempt-slice": preempt_slice,
    "wait-ready": wait_ready,
    "bootstrap": bootstrap,
    "ray-up": ray_up,
    "tunnel": tunnel,
    "submit": submit,
    "wait-job": wait_job,
    "logs": logs,
    "stop-job": stop_job,
    "preempt": preempt,
    "recreate": recreate,
    "recover": recover,
    "relaunch-sweep": relaunch_sweep,
    "auto-recovery": auto_recovery,
    "wait-event": wait_event,
    "status": status,
    "ledger": ledger,
    "teardown": teardown,
    "sleep": sleep,
}
