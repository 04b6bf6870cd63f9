"""The Events screen over a real head preemption's rows: one row per incident, `enter` opens
it, `a` shows every row; always in time order."""

from __future__ import annotations

from console.screens.events import EventsScreen, host_text
from console.services.model import Event
from console.services.record.incidents import incident_of
from console.tui.app import PhantomApp
from tests.support.fake_services import T0, FakeServices
from tests.support.incident_rows import journaled_async, recorded
from tests.support.tui import make_app


def app_with(rows: list[Event]) -> PhantomApp:
    services = FakeServices("healthy")
    services.events_list = rows
    return make_app(services, cursor_blink=True)


async def test_incidents_fold_open_and_show_raw_rows_in_time_order() -> None:
    rows = await journaled_async(recorded(start=T0 - 120))
    by_key = {f"e{e.id}": e for e in rows}
    head = next(incident_of(e) for e in rows if e.kind == "head_lost")
    app = app_with(rows)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("4")
        await pilot.app.workers.wait_for_complete()
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, EventsScreen)
        keys = [str(k) for k in screen.table.row_keys]
        # Folded: two incident rows, no member row, no Ray-node-down noise of the rebuild.
        assert [k for k in keys if k.startswith("inc:")] == [
            f"inc:{head}",
            f"inc:{incident_of(next(e for e in rows if e.kind == 'preempted'))}",
        ]
        shown = [by_key[k] for k in keys if k in by_key]
        assert not any(incident_of(e) for e in shown)
        assert [e.at for e in shown] == sorted((e.at for e in shown), reverse=True)
        assert "preempted" in screen.table.cell_texts(f"inc:{head}")[1]

        # enter on the head's incident opens it into its rows, in the order they happened.
        screen.table.move_cursor(row=keys.index(f"inc:{head}"))
        await pilot.press("enter")
        await pilot.pause()
        keys = [str(k) for k in screen.table.row_keys]
        start = keys.index(f"inc:{head}") + 1
        inside = [by_key[k] for k in keys[start:] if k in by_key and incident_of(by_key[k])]
        assert {incident_of(e) for e in inside} == {head}
        assert len(inside) == sum(
            1 for e in rows if incident_of(e) == head and e.kind != "incident"
        )
        assert [e.at for e in inside] == sorted(e.at for e in inside)
        assert sum(e.kind == "ray_node_down" for e in inside) == 4

        # a: every raw row (summaries included), newest first by time, not by id.
        await pilot.press("a")
        await pilot.pause()
        keys = [str(k) for k in screen.table.row_keys]
        assert sorted(keys) == sorted(by_key)
        times = [by_key[k].at for k in keys]
        assert times == sorted(times, reverse=True)
        await pilot.press("a")
        await pilot.pause()
        assert f"inc:{head}" in [str(k) for k in screen.table.row_keys]


def test_a_long_host_is_ellipsised_in_the_middle_not_cut() -> None:
    """A GKE slice or node in the HOST column keeps its start and the end that tells slices
    and nodes apart (before: cut to "phanto", every slice alike); a pod's host stays whole."""
    assert host_text("phantom-gke-np-0", "") == "pha…-0"
    assert host_text("phantom-gke-np-1", "") != host_text("phantom-gke-np-0", "")
    assert host_text("phantom-pod-w3", "phantom-pod") == "w3"
    assert host_text("", "phantom-pod") == "-"
