"""``status``: one snapshot of pod, Ray, jobs, cadence, recovery, incidents and the ledger
(as `phantom status --json` prints it)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from console.commands.kit.base import Command, Effect, Front, Session
from console.commands.kit.params import NoArgs
from console.config import ConfigError
from console.services.cadence.snapshot import with_jobs
from console.services.ledger.book import Book, read_book
from console.services.model import ActionResult, PodSnapshot, RayState, recovery_json, to_jsonable
from console.services.record.incidents import Incident, group

if TYPE_CHECKING:
    from console.services.api import ConsoleServices


def reachable(snap: PodSnapshot) -> tuple[bool, str]:
    """Whether the snapshot shows a cluster we could talk to, and why not if not."""
    if snap.hosts:
        return True, ""
    reason = "; ".join(snap.warnings) or f"no hosts known (TPU state {snap.tpu_state})"
    return False, reason


async def collect_status(services: ConsoleServices, *, refresh: bool = True) -> dict[str, Any]:
    """One JSON-able snapshot: pod, Ray, jobs, cadence (read now, under
    ``recovery.cadence_deadline_s``: ``ConsoleServices.cadence_now``), recovery."""
    return (await status_and_book(services, refresh=refresh))[0]


async def status_and_book(
    services: ConsoleServices, *, refresh: bool = True
) -> tuple[dict[str, Any], Book | None]:
    """``collect_status``'s snapshot and the ledger its ``"ledger"`` is (None where the
    journal could not be read): a fleet's status totals the clusters' books
    (``ledger.fleet.FleetBook``) without reading them twice."""
    snap = await services.refresh() if refresh else services.snapshot()
    jobs_error = ""
    try:
        jobs = await services.list_jobs()
    except Exception as exc:  # Ray down is a state to report, not a crash of `status`
        jobs, jobs_error = [], reason_line(exc)
    ok, why = reachable(snap)
    pod = to_jsonable(snap)
    pod["ready_hosts"] = snap.ready_hosts
    pod["ray_alive"] = snap.ray_alive
    out: dict[str, Any] = {
        "type": "status",
        "at": snap.at,
        "reachable": ok,
        "pod": pod,
        "ray": {
            "alive_nodes": snap.ray_alive,
            "hosts": len(snap.hosts),
            "dead_hosts": [h.name for h in snap.hosts if h.ray_state != RayState.ALIVE],
            "duplicate_hosts": [h.name for h in snap.hosts if h.ray_nodes > 1],
            "dashboard_url": snap.dashboard_url,
            "tunnel_up": snap.tunnel_up,
        },
        "jobs": to_jsonable(jobs),
        "cadence": to_jsonable(with_jobs(await services.cadence_now(), jobs)),
        "recovery": recovery_json(services.recovery_status()),
    }
    incidents = await _incidents(services)
    # The incident the recovery above belongs to (the newest), so a cron job can follow it.
    out["recovery"]["incident"] = incidents[-1]["incident"] if incidents else ""
    out["incidents"] = incidents
    book, out["ledger"] = await _ledger(services, snap.at)
    if not ok:
        out["unreachable_reason"] = why
    if jobs_error:
        out["jobs_error"] = jobs_error
    return out, book


async def _incidents(services: ConsoleServices, limit: int = 3) -> list[dict[str, Any]]:
    """The newest incidents in the journal, oldest first (id, trigger, MTTR, result, ...)."""
    try:
        rows = await services.events(limit=5000)
    except Exception:  # the journal is a record: a status without it still reports the pod
        return []
    found = [x for x in group(rows) if isinstance(x, Incident)]
    return [x.to_json() for x in found[-limit:]]


async def _ledger(services: ConsoleServices, now: float) -> tuple[Book | None, dict[str, Any]]:
    """Goodput, badput by cause, money and advice over the whole journal (``ledger.book``)."""
    try:
        book = await read_book(services, now=now)
    except Exception as exc:  # a record: a status without it still reports the pod
        return None, {"error": reason_line(exc)}
    return book, book.to_json()


def reason_line(exc: BaseException) -> str:
    """One line for a user: our own errors already name what and how to fix it; only an
    unexpected exception is worth its class name."""
    text = str(exc).strip().splitlines()
    if not text:
        return type(exc).__name__
    if isinstance(exc, ValueError | OSError | TimeoutError | ConfigError):
        return text[0]
    return f"{type(exc).__name__}: {text[0]}"


async def run(s: Session, args: NoArgs) -> ActionResult:
    out = await collect_status(await s.services())
    return ActionResult.done("status", "status", out)


COMMAND = Command(
    "status",
    "snapshot of pod, Ray, jobs and cadence (as `phantom status --json`)",
    NoArgs,
    run,
    Effect.READS,
    order=230,
    fronts=frozenset({Front.SCRIPT, Front.MCP}),
    document="hosts, Ray, jobs, cadence and recovery now",
)
