"""Every front end offers exactly what the one action table says, and nothing it lacks.

Walks ``console.services.action_table``: each row's keys are bindings on the screens it
names (same key, label, tooltip, action, id), the palette's entries are the palette rows,
the help screen lists every screen that carries a table key, the script's verbs and their
arguments are the script rows. The other way round: a binding on any screen that runs a
cluster action the table does not declare, a palette handler or a script verb the table
lacks, fails here.
"""

from __future__ import annotations

from typing import Any

import pytest
from textual.binding import Binding

from console.commands import by_words
from console.screens.cadence import CadenceScreen
from console.screens.confirm import ConfirmScreen
from console.screens.events import EventsScreen
from console.screens.help import SCREENS as HELP_SCREENS
from console.screens.host import HostScreen
from console.screens.jobs import JobsScreen
from console.screens.ledger import LedgerScreen
from console.screens.logview import LogViewScreen
from console.screens.overview import OverviewScreen
from console.screens.palette import PhantomCommands
from console.screens.recovery import RecoveryScreen
from console.screens.submit import SubmitScreen
from console.screens.workload_form import WorkloadFormScreen
from console.screens.workloads import WorkloadsScreen
from console.script.language import ACTIONS as VERBS
from console.services.action_table import ACTIONS, BY_TUI, Front, intent_of, on
from console.tui.app import PhantomApp
from tests.support.fake_services import FakeServices
from tests.support.tui import make_app, settle

SCREEN_OF: dict[str, Any] = {
    "app": PhantomApp,
    "overview": OverviewScreen,
    "jobs": JobsScreen,
    "cadence": CadenceScreen,
    "events": EventsScreen,
    "recovery": RecoveryScreen,
    "workloads": WorkloadsScreen,
    "ledger": LedgerScreen,
    "host": HostScreen,
    "log": LogViewScreen,
    "submit": SubmitScreen,
    "workload_form": WorkloadFormScreen,
    "confirm": ConfirmScreen,
}
# Keys that move around the console or reload a view: not actions on the cluster.
VIEW_ONLY = {
    "filter", "clear_filter", "close", "back", "cancel", "confirm", "submit", "pause",
    "follow", "search", "next_match", "prev_match", "jump_end", "reconnect", "toggle_raw",
    "help", "quit", "refresh_jobs", "refresh_cadence", "refresh_events", "refresh_ledger",
    "refresh_recovery",
}  # fmt: skip
DIRECTIVES = {"finally", "set"}  # the script language's syntax, not actions


def _bindings(screen: Any) -> list[Binding]:
    return [b for b in screen.BINDINGS if isinstance(b, Binding)]


@pytest.mark.parametrize("action", ACTIONS, ids=lambda a: a.name)
def test_each_row_has_its_keys_on_the_screens_it_names(action: Any) -> None:
    assert bool(action.keys) == (Front.KEYS in action.fronts), action.name
    for key in action.keys:
        by_id = {b.id: b for b in _bindings(SCREEN_OF[key.screen])}
        binding = by_id.get(key.id)
        assert binding is not None, f"{key.id} not bound on {key.screen}"
        assert (binding.key, binding.action, binding.description, binding.tooltip) == (
            key.key,
            key.action,
            key.label,
            key.tooltip,
        )
        assert binding.show is key.show
        intent = key.action.removeprefix("app.")
        assert intent_of(key.screen).get(key.action, intent) == action.tui


def test_no_screen_binds_a_cluster_action_the_table_lacks() -> None:
    declared = {k.id for a in ACTIONS for k in a.keys}
    for name, screen in SCREEN_OF.items():
        for b in _bindings(screen):
            action = b.action.removeprefix("app.")
            if action.startswith("switch_mode(") or action in VIEW_ONLY:
                continue
            assert b.id in declared, f"{name}: key {b.key!r} runs {b.action!r}, not in the table"


def test_the_palette_offers_the_palette_rows_and_nothing_else() -> None:
    rows = {a.tui for a in on(Front.PALETTE)}
    assert set(PhantomCommands.handled()) == rows
    assert all(BY_TUI[t].label for t in rows)  # a title to show


async def test_the_palette_handlers_are_exactly_its_rows() -> None:
    app = make_app(FakeServices("healthy"))
    async with app.run_test(size=(120, 34)) as pilot:
        await settle(pilot)
        handlers = PhantomCommands(app.screen).handlers()
        titles = {t for t, *_ in PhantomCommands(app.screen).commands()}
    assert set(handlers) == set(PhantomCommands.handled())
    assert {a.label for a in on(Front.PALETTE) if not a.per_host} <= titles


def test_help_lists_every_screen_that_carries_a_table_key() -> None:
    screens = {k.screen for a in ACTIONS for k in a.keys} - {"app"}
    assert {SCREEN_OF[s] for s in screens} <= set(HELP_SCREENS)


def test_the_script_verbs_are_the_script_rows_with_their_arguments() -> None:
    rows = {a.script: a for a in on(Front.SCRIPT)}
    assert set(VERBS) - DIRECTIVES == set(rows)
    assert all(VERBS[v].command is not None for v in rows)
    for verb, row in rows.items():
        adef, command = VERBS[verb], by_words(verb)
        assert command is not None and adef.command is command
        assert (adef.positionals, adef.flags, adef.needs, adef.summary) == (
            command.positionals,
            command.flags,
            row.needs,
            row.description,
        )
