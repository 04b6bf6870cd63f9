"""The Ledger screen's bars: one cause per cell, an incident visible however short, blank
where the job did not exist; the screen reached by key 7 and by the palette; in a fleet, a
row per cluster and their total."""

from __future__ import annotations

import io

from rich.console import Console

from console.screens.ledger import LedgerScreen, bar_causes, fleet_table
from console.services.ledger.timeline import Cause, Segment
from tests.support.fake_fleet import fake_fleet
from tests.support.fake_services import T0, FakeServices
from tests.support.incident_rows import journaled_async
from tests.support.ledger_rows import drill
from tests.support.tui import make_app, make_fleet_app, settle, wait_for


def test_a_short_incident_still_shows_and_absence_is_blank() -> None:
    segs = [
        Segment(100.0, 1000.0, Cause.PRODUCTIVE),
        Segment(500.0, 501.0, Cause.RECOVER, "head"),
    ]
    cells = bar_causes(segs, 0.0, 1000.0, 10)
    assert cells[0] is None  # before the job
    assert cells[5] is Cause.RECOVER  # 1 s of 100 s in that cell, still shown
    assert cells.count(Cause.PRODUCTIVE) == 8
    assert bar_causes(segs, 0.0, 0.0, 10) == []


async def test_key_7_and_the_palette_open_the_ledger() -> None:
    services = FakeServices("healthy")
    services.events_list = await journaled_async(drill(start=T0 - 1000))
    app = make_app(services)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("7")
        await settle(pilot)
        assert isinstance(app.screen, LedgerScreen)
        await wait_for(pilot, lambda: app.state.ledger is not None)
        assert app.state.ledger is not None
        assert app.state.ledger.ledger.units[0].members == ("A", "B")
        await pilot.press("1")
        await settle(pilot)
        assert not isinstance(app.screen, LedgerScreen)
        await app.action_show_ledger()
        await settle(pilot)
        assert isinstance(app.screen, LedgerScreen)


async def test_a_fleets_ledger_has_a_row_per_cluster_and_their_sum() -> None:
    """In a fleet of three the Ledger reads every cluster's journal: a row each (pod-b has
    no rows: zeros) and the total, their sum; `C` shows the next cluster's own ledger
    below the same table. A lone cluster has no fleet table."""
    fleet = fake_fleet()
    fleet["pod-a"].events_list = await journaled_async(drill(start=T0 - 8400, scale=20))
    fleet["grpo"].events_list = await journaled_async(drill(start=T0 - 7200, scale=10))
    app = make_fleet_app(fleet)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("7")
        await wait_for(pilot, lambda: app.state.fleet_ledger is not None)
        book = app.state.fleet_ledger
        assert book is not None and list(book.books) == ["pod-a", "pod-b", "grpo"]
        rows, total = book.rows, book.total
        assert rows["pod-b"].wall_s == 0 and rows["pod-b"].goodput is None
        assert total.wall_s == round(sum(r.wall_s for r in rows.values()), 3) > 0
        assert total.spot_usd == round(sum(r.spot_usd or 0 for r in rows.values()), 2)
        for cause, seconds in total.badput_s.items():
            assert seconds == round(sum(r.badput_s[cause] for r in rows.values()), 3)
        assert app.state.ledger is book.books["pod-a"]
        assert app.screen.query_one("#ledger-fleet").display
        console = Console(width=80, record=True, file=io.StringIO())
        console.print(fleet_table(book, "pod-a"))
        lines = console.export_text().splitlines()
        assert [ln.split()[0] for ln in lines] == ["CLUSTER", "▸pod-a", "pod-b", "grpo", "total"]
        assert lines[-1].split()[1] == f"{total.goodput:.1%}"
        await pilot.press("C")
        await wait_for(pilot, lambda: app.services is fleet["pod-b"])
        await wait_for(pilot, lambda: app.state.fleet_ledger is not None)
        assert isinstance(app.screen, LedgerScreen)
        assert app.state.ledger is not None and app.state.ledger.ledger.cluster.wall_s == 0
    lone = make_app(FakeServices("healthy"))
    async with lone.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("7")
        await wait_for(pilot, lambda: lone.state.ledger is not None)
        assert lone.state.fleet_ledger is None
        assert not lone.screen.query_one("#ledger-fleet").display
