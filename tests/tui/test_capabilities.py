"""Each surface offers what the cluster's backend declares it can do, never by provider name.

On GKE the palette has no Teardown or Restart Ray and the footer no `u Bring up`; on the
local pod emulator every TPU VM verb and the emulator's preempt/recreate are there; on a real
TPU VM pod (gcp) no emulator verb is.
"""

from __future__ import annotations

from console.commands import Front
from console.commands import offered as offered_on
from console.config import parse_config
from console.screens.help import HelpScreen
from console.screens.keys import DEFAULT, UserKeymap
from console.screens.overview import OverviewScreen
from console.screens.palette import PhantomCommands
from console.screens.workloads import WorkloadsScreen
from console.services.capabilities import Capability
from console.widgets.fast_table import FastTable
from tests.support.fake_services import FakeServices
from tests.support.tui import make_app, settle

TPU_ONLY = ("Teardown", "Restart Ray", "Re-open tunnel", "Open dashboard URL", "Relaunch sweep")


def _footer_keys(app) -> set[str]:  # type: ignore[no-untyped-def]
    return {
        b.key
        for _, b, enabled, _ in app.screen.active_bindings.values()
        if b.show
        and enabled
        and app.screen.check_action(b.action, ()) is not False
        and (not b.action.startswith("app.") or app.check_action(b.action[4:], ()) is not False)
    }


async def _palette_titles(fake: FakeServices) -> list[str]:
    app = make_app(fake)
    async with app.run_test(size=(120, 34)) as pilot:
        await settle(pilot)
        return [title for title, *_ in PhantomCommands(app.screen).commands()]


async def test_the_palette_on_gke_offers_only_what_gke_can_do() -> None:
    titles = await _palette_titles(FakeServices("gke"))
    assert not [t for t in titles if t.startswith(TPU_ONLY)], titles
    assert not [t for t in titles if "host" in t], titles  # no SSH hosts, no pod emulator
    assert {"Recover now", "Toggle auto-recovery", "Refresh now", "Submit"} <= set(titles)


async def test_the_palette_on_the_pod_emulator_offers_every_pod_verb() -> None:
    titles = await _palette_titles(FakeServices("healthy"))
    for prefix in TPU_ONLY:
        assert any(t.startswith(prefix) for t in titles), (prefix, titles)
    assert any(t.startswith("Preempt host ") for t in titles)


async def test_a_real_tpu_pod_has_no_emulator_verbs() -> None:
    gcp = parse_config({"cluster": {"provider": "gcp", "project": "p", "zone": "us-central2-b"}})
    titles = await _palette_titles(FakeServices("healthy", config=gcp))
    assert any(t.startswith("Teardown") for t in titles)
    assert not [t for t in titles if "(emulator)" in t], titles


async def test_bring_up_is_a_key_only_where_there_are_vms_to_bring_up() -> None:
    for fake, offered in ((FakeServices("healthy"), True), (FakeServices("gke"), False)):
        app = make_app(fake)
        async with app.run_test(size=(120, 34)) as pilot:
            await settle(pilot)
            await pilot.press("1")
            await settle(pilot)
            assert app.check_action("run", ("bring_up",)) is offered
            assert ("u" in _footer_keys(app)) is offered


async def test_every_command_of_the_console_has_a_key_or_a_palette_entry() -> None:
    """What the console runs is reachable: each of its commands has a key on some screen, an
    entry in the palette (on the cluster that can run it), or, when it acts on a highlighted
    row and has no key of its own, one the user's [keys] gives it; and it needs a known
    capability."""
    commands = offered_on(Front.TUI)
    assert all(c.needs is None or isinstance(c.needs, Capability) for c in commands)
    keyed = {k.name for k in DEFAULT if not k.action}
    reach: set[str] = set(keyed)
    for fake in (FakeServices("healthy"), FakeServices("gke")):
        titles = await _palette_titles(fake)
        reach |= {
            c.name for c in commands if any(t.startswith(c.title.split(" host")[0]) for t in titles)
        }
    for c in commands:
        if c.name not in reach:  # a key of the user's keymap, on every screen
            assert UserKeymap.check({c.name: "f12"}).added, c.name


async def test_the_overview_on_gke_lists_nodes_apart_without_ray_or_ssh_columns() -> None:
    fake = FakeServices("gke")
    app = make_app(fake)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("1")
        await settle(pilot)
        table = app.screen.query_one("#hosts", FastTable)
        headers = [label for _, label, _ in table._columns]
        assert "RAY" not in headers and "SSH" not in headers and "NODE" in headers
        names = [table.cell_texts(key)[0] for key in table.row_keys]
        assert len(set(names)) == len(fake.pod.hosts) == 8, names


async def test_help_on_gke_lists_only_what_gke_can_do() -> None:
    """The help screen's keys and intro follow the same declaration as the footer."""
    for fake, tpu in ((FakeServices("gke"), False), (FakeServices("healthy"), True)):
        app = make_app(fake)
        async with app.run_test(size=(120, 60)) as pilot:
            await settle(pilot)
            await pilot.press("question_mark")
            await settle(pilot)
            shown = app.screen
            assert isinstance(shown, HelpScreen)
            listed = {b.action for b in shown.offered(OverviewScreen, OverviewScreen.BINDINGS)}
            workloads = {b.action for b in shown.offered(WorkloadsScreen, WorkloadsScreen.BINDINGS)}
            assert ("app.run('bring_up')" in listed) is tpu
            assert ("app.run('preempt_slice')" in workloads) is not tpu  # the GKE emulator's key
            assert ("teardown" in shown.intro()) is tpu
