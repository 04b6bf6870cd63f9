"""What a script hears of an incident: each event line of it carries the incident's id, and
the incident's summary is a line of its own (``wait-event incident`` can wait for it)."""

from __future__ import annotations

from typing import Any

from console.commands.kit.feed import EventFeed
from console.services.record.incidents import incident_of
from tests.support.incident_rows import journaled_async, recorded


async def test_event_lines_carry_the_incident_id() -> None:
    rows = await journaled_async(recorded(start=1_800_000_000.0))
    lines: list[dict[str, Any]] = []
    feed = EventFeed(lines.append, clock=lambda: rows[-1].at)
    for row in rows:
        feed(row)
    stamped = {incident_of(r) for r in rows if incident_of(r)}
    assert len(stamped) == 2
    of_incidents = [x for x in lines if x.get("incident")]
    assert {x["incident"] for x in of_incidents} == stamped
    for kind in ("preempted", "head_lost", "ray_node_down", "recovered", "job_resubmitted"):
        assert all(x.get("incident") for x in lines if x["kind"] == kind), kind
    summaries = [x for x in lines if x["kind"] == "incident"]
    assert [x["result"] for x in summaries] == ["recovered", "recovered"]
    assert summaries[1]["head"] is True and summaries[1]["mttr_s"] > 40
    taken = feed.take_event("incident", "phantom-pod-w0")
    assert taken is not None and taken["incident"] == summaries[1]["incident"]
