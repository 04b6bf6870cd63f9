"""`status --json` carries the ledger (``"ledger"``): the same numbers ``ledger.book`` gives
for the journal, badput and productive summing to wall time; the table prints its headline."""

from __future__ import annotations

import json

import pytest

from console.config import Config
from console.services.ledger.book import book
from console.status import collect_status, render_table
from console.wiring.settings import ledger_settings
from tests.support.fake_services import T0, FakeServices
from tests.support.incident_rows import journaled_async, recorded


async def test_status_json_carries_the_ledger() -> None:
    services = FakeServices("healthy")
    rows = await journaled_async(recorded(start=T0 - 120))
    services.events_list = rows
    status = await collect_status(services, refresh=False)
    json.dumps(status)
    ledger = status["ledger"]
    now = services.snapshot().at
    assert ledger == json.loads(
        json.dumps(book(rows, ledger_settings(Config()), now=now).to_json())
    )
    assert ledger["productive_s"] + sum(ledger["badput_s"].values()) == pytest.approx(
        ledger["wall_s"], abs=0.01
    )
    assert ledger["badput_s"]["detect"] > 0 and ledger["recover_steps"]["head"] > 0
    assert len(ledger["cluster"]["incidents"]) == 2
    assert ledger["money"]["spot_saved_usd"] is not None
    assert ledger["advice"].startswith("no checkpoint advice: ")
    (line,) = [x for x in render_table(status).splitlines() if x.startswith("ledger: ")]
    assert line.startswith("ledger: goodput ") and len(line) <= 80


async def test_an_empty_journal_gives_an_empty_ledger() -> None:
    services = FakeServices("healthy")
    services.events_list = []
    ledger = (await collect_status(services, refresh=False))["ledger"]
    assert ledger["goodput"] is None and ledger["wall_s"] == 0


def test_a_fleets_status_ends_with_the_fleets_ledger_each_cluster_and_the_total() -> None:
    """Over a fleet `phantom status` gave each cluster's ledger and no total (`phantom
    report` and the Ledger screen total them): now one more object (or section) does, the
    same ``{"clusters", "total"}`` as report's (``ledger.fleet.FleetBook``), from the books
    the snapshots read; a cluster out of reach is a note, not in the total."""
    import asyncio
    import io

    from console.config.fleet import parse_fleet
    from console.status import status_fleet_main

    fleet = parse_fleet(
        {
            "clusters": [
                {"name": n, "cluster": {"node_name": n}} for n in ("pod-a", "pod-b", "pod-c")
            ]
        }
    )
    rows = asyncio.run(journaled_async(recorded(start=T0 - 120)))

    def factory(config: Config) -> FakeServices:
        if config.name == "pod-c":
            raise ValueError("no pod emulator is running")
        services = FakeServices("healthy", config=config)
        services.events_list = rows if config.name == "pod-a" else []
        return services

    out, err = io.StringIO(), io.StringIO()
    code = status_fleet_main(fleet, as_json=True, services_factory=factory, stdout=out, stderr=err)
    assert code == 1  # pod-c out of reach
    *clusters, last = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [c["cluster"] for c in clusters] == ["pod-a", "pod-b", "pod-c"]
    assert last["type"] == "fleet" and "cluster" not in last
    ledger = last["ledger"]
    assert list(ledger["clusters"]) == ["pod-a", "pod-b"]
    assert ledger["clusters"]["pod-a"] == clusters[0]["ledger"]  # the same book, not re-read
    total = ledger["total"]
    assert total["clusters"] == ["pod-a", "pod-b"]
    assert total["wall_s"] == round(sum(c["ledger"]["wall_s"] for c in clusters[:2]), 3)
    assert total["incidents"] == 2
    assert ledger["notes"] == [
        "pod-c: its journal was not read (no pod emulator is running); the total leaves it out"
    ]
    out = io.StringIO()
    status_fleet_main(fleet, as_json=False, services_factory=factory, stdout=out, stderr=err)
    text = out.getvalue()
    section = text[text.index("== the fleet's ledger ==") :].splitlines()
    assert section[1].split() == [
        "CLUSTER",
        "WALL",
        "GOODPUT",
        "BADPUT",
        "INCIDENTS",
        "SPOT",
        "SAVED",
    ]
    assert [r.split()[0] for r in section[2:5]] == ["pod-a", "pod-b", "total"]
    assert section[5].startswith("ledger: goodput ") and section[6].startswith("note: pod-c")
    assert max(len(line) for line in section) <= 80
