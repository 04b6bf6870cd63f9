"""The Ledger screen's bars: one cause per cell, an incident visible however short, blank
where the job did not exist; and the screen reached by key 7 and by the palette."""

from __future__ import annotations

from console.screens.ledger import LedgerScreen, bar_causes
from console.services.ledger.timeline import Cause, Segment
from tests.support.fake_services import T0, FakeServices
from tests.support.incident_rows import journaled_async
from tests.support.ledger_rows import drill
from tests.support.tui import make_app, settle, wait_for


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
