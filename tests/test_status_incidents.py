"""`status --json` names the incidents: each with its id, trigger, MTTR and result, and the
recovery block carries the newest incident's id."""

from __future__ import annotations

import json

from console.status import collect_status, render_table
from tests.support.fake_data import T0
from tests.support.fake_services import FakeServices
from tests.support.incident_rows import journaled_async, recorded


async def test_status_json_carries_the_incident_ids() -> None:
    services = FakeServices("healthy")
    rows = await journaled_async(recorded(start=T0 - 120))
    services.events_list = rows
    status = await collect_status(services, refresh=False)
    json.dumps(status)  # one JSON object, as `status --json` prints it
    ids = [r.data["incident"] for r in rows if r.kind == "incident"]
    assert [i["incident"] for i in status["incidents"]] == ids
    head = status["incidents"][-1]
    assert head["head"] is True and head["trigger_kind"] == "preempted"
    assert head["result"] == "recovered" and round(head["mttr_s"], 1) == 42.0
    assert head["message"].startswith("head preempted (phantom-pod-w0): recovered in 42.0s")
    assert status["recovery"]["incident"] == ids[-1]
    (line,) = [x for x in render_table(status).splitlines() if x.startswith("incident ")]
    assert line.startswith(f"incident {ids[-1]}: head preempted") and len(line) <= 80


async def test_no_incident_no_id() -> None:
    services = FakeServices("healthy")
    services.events_list = []
    status = await collect_status(services, refresh=False)
    assert status["incidents"] == [] and status["recovery"]["incident"] == ""
