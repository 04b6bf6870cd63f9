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
