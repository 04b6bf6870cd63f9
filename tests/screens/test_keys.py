"""The console's keys are its keymap, and the keymap is the commands': every screen's
bindings are its section of the keymap, a key either runs a command the console offers or
is one of the console's own (moving, filtering, a form), the palette is the commands that
need nothing highlighted, and help lists every screen with a command's key. The user's
``[keys]`` remaps a command everywhere (help and footer show the new key), gives a key to a
command that has none, and refuses a name that is not there or a key that would do two
things on one screen, naming both.

(Moved here from tests/tui/test_action_table.py, which walked the action table: same
checks, now against the keymap and the commands.)
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from textual.binding import Binding
from textual.widgets import Static

from console.commands import Front, all_commands, by_name, offered
from console.commands.kit.base import ASKS
from console.commands.kit.params import Kind
from console.screens.confirm import ConfirmScreen
from console.screens.help import SCREENS as HELP_SECTIONS
from console.screens.help import HelpScreen
from console.screens.host import HostScreen
from console.screens.keys import DEFAULT, KeymapError, UserKeymap, bindings, command_of
from console.screens.logview import LogViewScreen
from console.screens.palette import OWN, PhantomCommands
from console.screens.submit import SubmitScreen
from console.screens.workload_form import WorkloadFormScreen
from console.tui.app import PhantomApp, TuiSettings
from tests.support import REPO
from tests.support.fake_data import T0
from tests.support.fake_services import FakeServices
from tests.support.tui import make_app, settle

SECTION_OF: dict[str, Any] = {
    "app": PhantomApp,
    **PhantomApp.MODES,  # each main screen's section is its mode
    "host": HostScreen,
    "log": LogViewScreen,
    "submit": SubmitScreen,
    "workload_form": WorkloadFormScreen,
    "confirm": ConfirmScreen,
    "help": HelpScreen,
}
# The console's own actions: moving around it, filtering, its forms; never the cluster's.
OWN_ACTIONS = {
    "filter", "clear_filter", "close", "back", "cancel", "confirm", "submit", "pause",
    "follow", "search", "next_match", "prev_match", "jump_end", "reconnect", "toggle_raw",
    "help", "quit", "submit_form", "logs", "app.refresh_jobs", "app.refresh_cadence",
    "app.refresh_events", "app.refresh_ledger", "app.refresh_recovery", "next_cluster",
}  # fmt: skip


def _bindings(cls: Any) -> list[Binding]:
    return [b for b in cls.BINDINGS if isinstance(b, Binding)]


def _fields(b: Binding) -> tuple[Any, ...]:
    return (b.key, b.action, b.description, b.tooltip, b.show, b.id, b.priority, b.group)


@pytest.mark.parametrize("section", SECTION_OF)
def test_each_screen_binds_its_section_of_the_keymap(section: str) -> None:
    assert [_fields(b) for b in _bindings(SECTION_OF[section])] == [
        _fields(b) for b in bindings(section)
    ]


def test_a_key_runs_a_command_of_the_console_or_is_its_own() -> None:
    tui = {c.name for c in offered(Front.TUI)}
    for section, cls in SECTION_OF.items():
        for b in _bindings(cls):
            command = command_of(b)
            if command is not None:
                assert command.name in tui, (section, b.action)
            else:
                action = b.action
                assert action.startswith("switch_mode(") or action in OWN_ACTIONS, (section, b)


def test_every_key_of_a_command_says_what_it_does() -> None:
    for key in DEFAULT:
        command = key.command
        if command is None:
            continue
        binding = key.binding()
        assert binding.description and binding.tooltip, key
        assert binding.action == f"app.run('{command.name}')"


def test_a_commands_text_is_said_once_on_the_command() -> None:
    """A key of a command restates nothing of it: its tooltip is the command's ``help`` (so
    the palette and the help screen say the same), a label is there only to be shorter than
    the title, and "asks to confirm" comes from the command's ``confirm``, never its words."""
    for key in DEFAULT:
        command = key.command
        if command is None:
            continue
        assert not key.tooltip, key
        assert key.label != command.title, key
        assert key.binding().tooltip == command.help
    for command in all_commands():
        assert "confirm" not in (command.hint + command.summary).lower(), command.name
        assert command.help.endswith(ASKS) == (command.confirm is not None), command.name


async def test_the_palette_is_the_commands_that_need_nothing_highlighted() -> None:
    app = make_app(FakeServices("healthy"))
    async with app.run_test(size=(120, 34)) as pilot:
        await settle(pilot)
        titles = [t for t, *_ in PhantomCommands(app.screen).commands()]
    on_screen = {Kind.JOB, Kind.NAME, Kind.SLICE}
    whole = [
        c
        for c in offered(Front.TUI)
        if c.refusal(app.services.capabilities) is None
        and not {a.kind for a in c.positionals} & on_screen
        and not {a.kind for a in c.positionals} & {Kind.HOST, Kind.HOST_OR_ALL}
    ]
    assert {c.title for c in whole} | {o.title for o in OWN} <= set(titles)
    per_host = [t for t in titles if "host phantom-pod-w" in t]
    assert len(per_host) == 3 * 4  # re-bootstrap, preempt, recreate: each of 4 hosts
    for name in ("stop_job", "workload_delete", "preempt_slice"):
        command = by_name(name)
        assert command is not None and command.title not in titles


def test_help_lists_every_screen_that_carries_a_command_key() -> None:
    carrying = {k.screen for k in DEFAULT if not k.action} - {"app"}
    listed = {section for _, section in HELP_SECTIONS}
    assert carrying <= listed


# the user's keymap -----------------------------------------------------------------------------


def test_a_command_remapped_everywhere_it_has_a_key() -> None:
    mine = UserKeymap.check({"recover": "R", "jobs.refresh": "f5"})
    assert mine.keymap == {"overview.recover": "R", "recovery.recover": "R", "jobs.refresh": "f5"}
    keys = {k.binding_id: k.key for k in mine.effective()}
    assert keys["overview.recover"] == keys["recovery.recover"] == "R"
    assert keys["overview.refresh"] == "ctrl+r"  # another screen's refresh is left alone


def test_a_name_that_is_not_there_is_refused_naming_it() -> None:
    with pytest.raises(KeymapError) as unknown:
        UserKeymap.check({"recovr": "R"})
    assert "keys.recovr = 'R': no command or key 'recovr'" in str(unknown.value)
    assert "recover" in str(unknown.value)  # the names there are
    with pytest.raises(KeymapError) as script_only:
        UserKeymap.check({"sleep": "z"})
    assert "sleep is not run from the console" in str(script_only.value)


def test_a_clash_is_refused_naming_both() -> None:
    with pytest.raises(KeymapError) as clash:
        UserKeymap.check({"recover": "q"})
    problem = clash.value.problems[0]
    assert "recover" in problem and "app.quit" in problem and "q" in problem
    with pytest.raises(KeymapError) as on_a_screen:
        UserKeymap.check({"stop_job": "slash"})
    assert "stop_job and jobs.filter both take slash on the jobs screen" in str(on_a_screen.value)
    # two keys of one command, or the default's own shadowing (host's q closes), are fine
    UserKeymap.check({"recover": "r", "bring_up": "U"})


async def test_remapped_keys_run_their_command_and_help_and_footer_show_them() -> None:
    fake = FakeServices("preempted")
    app = PhantomApp(
        fake,
        clock=lambda: T0,
        settings=TuiSettings(tick_s=None, cursor_blink=False, keys={"recover": "R"}),
    )
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        footer = {b.key for _, b, enabled, _ in app.screen.active_bindings.values() if b.show}
        assert "R" in footer and "r" not in footer
        await pilot.press("r")
        await settle(pilot)
        assert not isinstance(app.screen, ConfirmScreen)  # r is no longer recover
        await pilot.press("R")
        await settle(pilot)
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("n")
        await settle(pilot)
        await pilot.press("question_mark")
        await settle(pilot)
        help_screen = app.screen
        assert isinstance(help_screen, HelpScreen)
        overview = bindings("overview", help_screen.keymap.effective())
        recover = next(b for b in overview if b.id == "overview.recover")
        assert help_screen.keys(recover) == "R"
        body = help_screen.query_one("#help-body", Static).content
        printer = Console(record=True, width=160)
        printer.print(body)
        rows = [line.split() for line in printer.export_text().splitlines()]
        assert ["R", "Recover", "Run", "the", "whole", "recovery", "loop"] in [r[:7] for r in rows]
    assert not fake.called("recover")


async def test_a_command_without_a_key_gets_one_everywhere() -> None:
    fake = FakeServices("healthy")
    app = PhantomApp(
        fake, clock=lambda: T0, settings=TuiSettings(tick_s=None, keys={"teardown": "T"})
    )
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("2", "T")  # on the Jobs screen, where no key of its own is T
        await settle(pilot)
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("y")
        await settle(pilot)
    assert fake.called("teardown")


def test_phantom_refuses_a_bad_keymap_before_anything_starts(tmp_path: Path) -> None:
    config = tmp_path / "phantom.toml"
    config.write_text('[keys]\nrecovr = "R"\nstop_job = "slash"\n')
    env = {"PHANTOM_NO_CONFIG_DISCOVERY": "1", "NO_GCE_CHECK": "True", "PATH": "/usr/bin:/bin"}
    env["XDG_STATE_HOME"] = str(tmp_path / "state")
    got = subprocess.run(
        [sys.executable, "-m", "console.cli", "--config", str(config)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert got.returncode == 2, got.stderr
    assert "keys.recovr" in got.stderr and "stop_job and jobs.filter" in got.stderr
    assert not (tmp_path / "state").exists()  # nothing was started


@pytest.mark.parametrize("blink", [False, True])
async def test_the_palettes_cursor_blinks_as_the_consoles_does(blink: bool) -> None:
    """The palette's input is Textual's own: it blinked whatever the settings said, so the
    palette's snapshot depended on the instant it was taken (test_palette[80x24] failed
    under a loaded make test with the cursor drawn, passed alone without it)."""
    from textual.command import CommandInput, CommandPalette

    app = make_app(FakeServices("healthy"), cursor_blink=blink)
    async with app.run_test(size=(120, 34)) as pilot:
        await pilot.press("ctrl+p")
        await settle(pilot)
        assert isinstance(app.screen, CommandPalette)
        assert app.screen.query_one(CommandInput).cursor_blink is blink
