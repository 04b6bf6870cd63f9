"""What an agent reads that the script has no verb for: the journal's events, its incidents
and a search through a job's log (the table's MCP-only rows), and the resources' bodies."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

from console.script.told import error_sentence, plain_lines
from console.services.ledger.book import read_book
from console.services.record.incidents import Incident, group
from console.status import collect_status

if TYPE_CHECKING:
    from console.services.api import ConsoleServices

Args = Mapping[str, Any]
INCIDENT_ROWS = 5000  # journal rows read to group incidents (as `status` does)


def _row(event: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"id": event.id, **event.to_json()}
    return out


async def events(services: ConsoleServices, args: Args) -> dict[str, Any]:
    limit = int(args.get("limit") or 50)
    kind = args.get("kind")
    rows = await services.events(limit=limit, kinds=[str(kind)] if kind else None)
    return {"events": [_row(e) for e in rows[-limit:]]}


async def incidents(services: ConsoleServices, args: Args) -> dict[str, Any]:
    limit = int(args.get("limit") or 20)
    rows = await services.events(limit=INCIDENT_ROWS)
    found = [x for x in group(rows) if isinstance(x, Incident)]
    return {"incidents": [x.to_json() for x in found[-limit:]]}


async def search_logs(services: ConsoleServices, args: Args) -> dict[str, Any]:
    job_id = services.successor(str(args["job"]))
    text = str(args["text"])
    lines = plain_lines((await services.job_logs(job_id)).splitlines())
    hits = [(n, line) for n, line in enumerate(lines, start=1) if text in line]
    tail = int(args.get("tail") or 100)
    return {
        "job_id": job_id,
        "total_lines": len(lines),
        "matching_lines": len(hits),
        "lines": [{"line": n, "text": line} for n, line in hits[-tail:]],
    }


async def status(services: ConsoleServices, args: Args) -> dict[str, Any]:
    return await collect_status(services)


async def ledger(services: ConsoleServices, args: Args) -> dict[str, Any]:
    try:
        book = await read_book(services, now=time.time())
    except Exception as exc:  # a record: the resource still answers, saying why it is empty
        return {"error": error_sentence(exc)}
    result: dict[str, Any] = book.to_json()
    return result


# The table's MCP-only reads, by row name.
READS: dict[str, Callable[[ConsoleServices, Args], Awaitable[dict[str, Any]]]] = {
    "events": events,
    "incidents": incidents,
    "search_logs": search_logs,
}
# The resources: (uri, name, description, reader).
RESOURCES: tuple[
    tuple[str, str, str, Callable[[ConsoleServices, Args], Awaitable[dict[str, Any]]]], ...
] = (
    ("phantom://status", "status", "hosts, Ray, jobs, cadence and recovery now", status),
    ("phantom://events", "events", "the journal's newest 50 events", events),
    ("phantom://incidents", "incidents", "each preemption and its recovery", incidents),
    ("phantom://ledger", "ledger", "goodput, badput by cause, cost, checkpoint advice", ledger),
)
