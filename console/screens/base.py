"""What every main screen shares: the status line, the footer, and pulling state on change.

Attributes down: the app keeps a ``ConsoleState`` and bumps ``versions[kind]`` when data of
that kind changes; the visible screen re-renders only the kinds it watches and that moved
since it last looked. Hidden screens do nothing until they are shown again.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, ClassVar, cast

from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import Footer, Input

from console.commands.kit.params import Kind
from console.screens.keys import offered
from console.screens.state import ConsoleState
from console.services.capabilities import Capability
from console.widgets.fast_table import FastTable
from console.widgets.status import StatusBar, health_text
from console.widgets.table import PhantomTable

if TYPE_CHECKING:
    from console.tui.app import PhantomApp


class PhantomScreen(Screen[None]):
    """A main screen (one of the numbered tabs)."""

    MODE: ClassVar[str] = ""
    WATCHES: ClassVar[frozenset[str]] = frozenset()

    def __init__(self) -> None:
        super().__init__()
        self._seen: dict[str, int] = {}

    @property
    def phantom(self) -> PhantomApp:
        return cast("PhantomApp", self.app)

    @property
    def state(self) -> ConsoleState:
        return self.phantom.state

    def compose(self) -> ComposeResult:
        cluster = self.phantom.services.settings.cluster
        yield StatusBar(
            self.MODE,
            screens=self.phantom.screens(),
            cluster=cluster.name,
            world=cluster.world,
            id="status",
        )
        yield from self.compose_body()
        yield Footer(compact=True)

    def compose_body(self) -> ComposeResult:
        yield from ()

    def on_mount(self) -> None:
        self.sync(force=True)

    def on_screen_resume(self) -> None:
        self.sync()

    def sync(self, *, force: bool = False) -> None:
        """Re-render what changed since the last look (everything when ``force``)."""
        if not self.is_mounted:
            return
        versions = self.state.versions
        watched = self.WATCHES | {"pod", "recovery"}
        changed = {k for k in watched if force or versions[k] != self._seen.get(k, -1)}
        if not changed:
            return
        for kind in changed:
            self._seen[kind] = versions[kind]
        if changed & {"pod", "recovery"}:
            ray = Capability.RAY in self.phantom.services.capabilities
            bar = self.query_one(StatusBar)
            bar.set_health(health_text(self.state.pod, self.state.recovery, ray=ray))
        mine = self.WATCHES if force else changed & self.WATCHES
        if mine:
            self.render_state(mine)

    def render_state(self, changed: Iterable[str]) -> None:
        """Update widgets for the changed kinds (override)."""

    def selection(self) -> dict[Kind, str]:
        """What a command run from here acts on, by its argument's kind (override)."""
        return {}

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """A key of the console's own is offered where the cluster can do what it does."""
        caps = self.phantom.services.capabilities
        mine = (b for b in self.BINDINGS if isinstance(b, Binding) and b.action == action)
        return all(offered(b, caps) for b in mine)


class FilteredScreen(PhantomScreen):
    """A main screen built around one table, filtered with `/` (esc clears)."""

    FILTER_PLACEHOLDER: ClassVar[str] = "filter"

    def __init__(self) -> None:
        super().__init__()
        self.filter_text = ""

    def make_filter_input(self) -> Input:
        box = Input(placeholder=self.FILTER_PLACEHOLDER, id="filter", compact=True)
        box.display = False
        return box

    def make_table(self, table_id: str) -> PhantomTable:
        return PhantomTable(id=table_id, classes="main-table")

    @property
    def table(self) -> PhantomTable | FastTable:
        table = self.query_one(".main-table")
        assert isinstance(table, PhantomTable | FastTable)
        return table

    def on_mount(self) -> None:
        self.query_one("#filter", Input).cursor_blink = self.phantom.settings.cursor_blink
        super().on_mount()
        self.table.focus()

    def matches(self, cells: Iterable[tuple[str, str]], extra: str = "") -> bool:
        needle = self.filter_text.lower()
        if not needle:
            return True
        return any(needle in text.lower() for text, _ in cells) or needle in extra.lower()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "clear_filter":  # esc is listed only while there is a filter to clear
            return bool(self.filter_text) or self.query_one("#filter", Input).display
        return super().check_action(action, parameters)

    def action_filter(self) -> None:
        box = self.query_one("#filter", Input)
        box.display = True
        box.focus()
        self.refresh_bindings()

    def action_clear_filter(self) -> None:
        box = self.query_one("#filter", Input)
        box.value = ""
        box.display = False
        self.filter_text = ""
        self.render_state(self.WATCHES)
        self.table.focus()
        self.refresh_bindings()

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id == "filter":
            self.filter_text = event.value.strip()
            self.render_state(self.WATCHES)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id == "filter":
            if not event.value.strip():
                event.input.display = False
            self.table.focus()
            self.refresh_bindings()
