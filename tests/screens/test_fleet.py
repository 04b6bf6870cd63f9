"""The Fleet screen (a fleet of several clusters' home) and switching cluster, on a fleet of
fakes (``tests.support.fake_fleet``): three clusters, each its own services and bus."""

from __future__ import annotations

import io
import threading
from dataclasses import replace

from rich.console import Console
from textual.command import CommandPalette
from textual.widgets import Footer, Static
from textual.widgets._footer import FooterKey

from console.screens.fleet import FleetScreen
from console.screens.overview import OverviewScreen
from console.services.model import Event, EventKind, HostState, JobInfo, JobStatus
from console.widgets.status import StatusBar
from tests.support.fake_data import NODE, T0
from tests.support.fake_fleet import fake_fleet
from tests.support.fake_services import FakeServices
from tests.support.tui import make_app, make_fleet_app, settle, wait_for


def _header(app) -> StatusBar:
    return app.screen.query_one(StatusBar)


def _screen_keys(app) -> str:
    """The footer's screen keys, as it shows them ("012345")."""
    footer = app.screen.query_one(Footer)
    keys = [k.key for k in footer.query(FooterKey) if k.action.startswith("switch_mode")]
    return "".join(keys)


def _row(app, name: str) -> tuple[str, ...]:
    return app.screen.query_one("#fleet").cell_texts(name)


async def test_a_fleet_opens_on_its_fleet_screen_a_row_per_cluster() -> None:
    app = make_fleet_app()
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot)
        assert isinstance(app.screen, FleetScreen)
        table = app.screen.query_one("#fleet")
        assert table.row_keys == ["pod-a", "pod-b", "grpo"]
        a, b, grpo = (_row(app, n) for n in ("pod-a", "pod-b", "grpo"))
        assert a[:6] == ("▸ pod-a", "gcp", "us-central2-b", "v4-32", "3/4", "ray 3/4")
        assert b[:6] == ("  pod-b", "local", "local-b", "v5litepod-16", "4/4", "ray 4/4")
        assert grpo[:6] == ("  grpo", "gke", "us-east5", "v5p-64", "0/8", "jobset 0/2")
        # recoveries so far (pod-a's journal: one, and one running now), open incidents
        assert (a[7], b[7], grpo[7]) == ("1+⟳", "0", "0")
        assert (a[8], b[8], grpo[8]) == ("0", "0", "1")
        assert a[9].endswith(" w2") and b[9] == "never" and grpo[9].startswith("1m ")
        # the price of each slice per hour on spot, with the region it is priced in
        assert a[11] == "$15.52 us-central2" and grpo[11] == "$47.04 us-east5"
        summary = str(app.screen.query_one("#fleet-summary").render())
        assert "3 clusters" in summary and "1 open incident" in summary
        assert "spot $70.24/h" in summary
        # every cluster's services started, each once
        assert all(f.started for f in app.fleet.values())  # type: ignore[attr-defined]


async def test_one_cluster_keeps_the_overview_as_home_and_no_fleet_key() -> None:
    app = make_app("healthy")
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        assert isinstance(app.screen, OverviewScreen)
        assert _screen_keys(app) == "12345"
        await pilot.press("0", "C")
        await settle(pilot)
        assert isinstance(app.screen, OverviewScreen)


async def test_enter_opens_that_clusters_screens_and_the_header_names_it() -> None:
    fleet = fake_fleet()
    app = make_fleet_app(fleet)
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot)
        assert _header(app).cluster == "pod-a"
        await pilot.press("down", "down", "enter")  # grpo
        await wait_for(pilot, lambda: isinstance(app.screen, OverviewScreen))
        await settle(pilot)
        assert app.services is fleet["grpo"]
        header = _header(app)
        assert (header.cluster, header.world) == ("grpo", "GKE + JobSets")
        # the overview shows grpo's nodes, and the footer its screens (6: Workloads)
        assert app.state.pod is fleet["grpo"].pod
        assert _screen_keys(app) == "0123456"
        await pilot.press("0")
        await settle(pilot)
        assert _row(app, "grpo")[0] == "▸ grpo" and _row(app, "pod-a")[0] == "  pod-a"


async def test_the_cluster_key_switches_cluster_on_the_screen_shown() -> None:
    fleet = fake_fleet()
    app = make_fleet_app(fleet)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("2")  # pod-a's jobs
        await settle(pilot)
        assert set(app.state.jobs) == set(fleet["pod-a"].jobs)
        fleet["pod-b"].jobs = {"raysubmit_b": JobInfo("raysubmit_b", JobStatus.RUNNING, "b.py")}
        await pilot.press("C")
        await wait_for(pilot, lambda: app.services is fleet["pod-b"])
        await settle(pilot)
        assert app.current_mode == "jobs"
        assert _header(app).cluster == "pod-b"
        assert set(app.state.jobs) == {"raysubmit_b"}
        table = app.screen.query_one("#jobs")
        assert table.row_keys == ["raysubmit_b"]
        # pod-b is a TPU VM pod: no Workloads screen; on grpo the jobs screen stays shown
        assert _screen_keys(app) == "012345"
        await pilot.press("C")
        await wait_for(pilot, lambda: app.services is fleet["grpo"])
        await settle(pilot)
        assert app.current_mode == "jobs" and _screen_keys(app) == "0123456"
        await pilot.press("6", "C")  # grpo's Workloads -> pod-a has none: its Overview
        await wait_for(pilot, lambda: app.services is fleet["pod-a"])
        await settle(pilot)
        assert app.current_mode == "overview" and _header(app).cluster == "pod-a"


async def test_the_palette_switches_to_a_named_cluster() -> None:
    fleet = fake_fleet()
    app = make_fleet_app(fleet)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("ctrl+p", *"cluster grpo")
        await wait_for(pilot, lambda: isinstance(app.screen, CommandPalette))
        await wait_for(pilot, lambda: _palette_hits(app) >= 1)
        await pilot.press("enter")
        await wait_for(pilot, lambda: app.services is fleet["grpo"])
        await settle(pilot)
        assert _header(app).cluster == "grpo"


def _palette_hits(app) -> int:
    from textual.command import CommandList

    try:
        return app.screen.query_one(CommandList).option_count
    except Exception:
        return 0


async def test_a_row_follows_what_its_cluster_publishes_while_another_is_shown() -> None:
    fleet = fake_fleet()
    app = make_fleet_app(fleet)
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot)
        pod = fleet["pod-b"].pod
        lost = replace(pod.hosts[1], tpu_state=HostState.PREEMPTED)
        newer = replace(pod, at=T0 + 5, hosts=(pod.hosts[0], lost, *pod.hosts[2:]))
        fleet["pod-b"].pod = newer  # what its services hold, then publish (another thread)
        threading.Thread(target=fleet["pod-b"].publish, args=(newer,)).start()
        await wait_for(pilot, lambda: _row(app, "pod-b")[4] == "3/4")
        # the shown cluster (pod-a) is untouched by it
        assert app.state.pod is fleet["pod-a"].pod
        job = JobInfo("raysubmit_9", JobStatus.RUNNING, "train.py", start_time=T0)
        threading.Thread(target=fleet["grpo"].publish, args=(job,)).start()
        await wait_for(pilot, lambda: _row(app, "grpo")[6] == "2")
        # a journal row: the counts derived from the journal follow it (not cached past it)
        assert _row(app, "pod-b")[7:10] == ("0", "0", "never")
        lost = Event(T0 + 6, EventKind.PREEMPTED, "w1 preempted", f"{NODE}-w1", id=7001)
        threading.Thread(target=fleet["pod-b"].publish, args=(lost,)).start()
        await wait_for(pilot, lambda: _row(app, "pod-b")[9] != "never")
        back = Event(T0 + 9, EventKind.RECOVERED, "recovered", "", id=7002)
        threading.Thread(target=fleet["pod-b"].publish, args=(back,)).start()
        await wait_for(pilot, lambda: _row(app, "pod-b")[7] == "1")
        assert _row(app, "pod-b")[9].endswith(" w1")


async def test_a_publish_remakes_its_clusters_row_alone_and_a_tick_every_row() -> None:
    """Ten clusters polling: a publish costs its own row, not the table. The other rows keep
    the cells they were made with (their ages move on at the next tick, as every screen's
    do), and the summary follows the change."""
    fleet = fake_fleet()
    app = make_fleet_app(fleet)
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot)
        table = app.screen.query_one("#fleet")
        grpo_cells = table.row_cells("grpo")
        assert _row(app, "grpo")[9].startswith("1m ")
        app.clock = lambda: T0 + 3600  # an hour on: every age is out of date
        pod = fleet["pod-b"].pod
        lost = replace(pod.hosts[1], tpu_state=HostState.PREEMPTED)
        newer = replace(pod, at=T0 + 5, hosts=(pod.hosts[0], lost, *pod.hosts[2:]))
        fleet["pod-b"].pod = newer
        threading.Thread(target=fleet["pod-b"].publish, args=(newer,)).start()
        await wait_for(pilot, lambda: _row(app, "pod-b")[4] == "3/4")
        assert table.row_cells("grpo") is grpo_cells  # not remade
        summary = str(app.screen.query_one("#fleet-summary").render())
        assert "0 whole" in summary  # pod-b was the one whole cluster
        app._tick()  # what the clock's interval runs (off in tests)
        await settle(pilot)
        assert _row(app, "grpo")[9].startswith("1h01m ")


async def test_the_workloads_screen_of_a_tpu_vm_cluster_names_that_cluster() -> None:
    """A fleet drives GKE clusters too: the line says which cluster has no workloads (it
    said "this console drives a TPU VM pod")."""
    app = make_fleet_app(initial_mode="workloads")
    async with app.run_test(size=(120, 30)) as pilot:
        await settle(pilot)
        line = str(app.screen.query_one("#workloads-summary").render())
        assert line == "Workloads are GKE JobSets; pod-a is a TPU VM pod + Ray ('gcp')."


async def test_quitting_stops_every_clusters_services() -> None:
    fleet = fake_fleet()
    app = make_fleet_app(fleet)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("q")
        await pilot.pause()
    assert all(f.stopped for f in fleet.values())
    assert all(len(f.called("stop")) == 1 for f in fleet.values())


def test_fake_fleet_is_three_services_of_their_own() -> None:
    fleet = fake_fleet()
    assert [f.settings.cluster.name for f in fleet.values()] == ["pod-a", "pod-b", "grpo"]
    assert len({id(f.bus) for f in fleet.values()}) == 3
    assert all(isinstance(f, FakeServices) for f in fleet.values())


async def test_help_lists_the_fleets_keys_only_in_a_fleet() -> None:
    for app, fleet in ((make_app("healthy"), False), (make_fleet_app(), True)):
        async with app.run_test(size=(160, 48)) as pilot:
            await settle(pilot)
            await pilot.press("question_mark")
            await settle(pilot)
            body = app.screen.query_one("#help-body", Static).content
            console = Console(width=160, record=True, file=io.StringIO())
            console.print(body)
            text = console.export_text()
            assert ("Show the Fleet screen" in text) is fleet
            assert ("Switch to the fleet's next cluster" in text) is fleet
            assert ("Show only clusters whose row" in text) is fleet


async def test_two_quick_cluster_keys_move_two_clusters_on() -> None:
    fleet = fake_fleet()
    app = make_fleet_app(fleet)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("C", "C")  # the second while the first may still be remaking
        await settle(pilot)
        assert app.services is fleet["grpo"] and _header(app).cluster == "grpo"
        assert isinstance(app.screen, FleetScreen) and "_switching" not in app._modes
