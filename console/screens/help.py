"""Help (`?`): every key of every screen, grouped by screen, with what it does: the keymap
(``keys``) with the user's ``[keys]`` applied, so a remapped key shows as the user set it."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, ClassVar

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.actions import parse as parse_action
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import ModalScreen, Screen
from textual.widgets import Footer, Static

from console.screens.cadence import CadenceScreen
from console.screens.confirm import ConfirmScreen
from console.screens.events import EventsScreen
from console.screens.fleet import FleetScreen
from console.screens.host import HostScreen
from console.screens.jobs import JobsScreen
from console.screens.keys import FLEET, UserKeymap, bindings, offered
from console.screens.logview import LogViewScreen
from console.screens.overview import OverviewScreen
from console.screens.palette import needs_of_entry
from console.screens.recovery import RecoveryScreen
from console.screens.submit import SubmitScreen
from console.screens.workload_form import WorkloadFormScreen
from console.screens.workloads import WorkloadsScreen
from console.services.capabilities import Capability
from console.widgets.table import PhantomTable

INTRO = (
    "Phantom Console shows what is alive on the pod, what was preempted, what each job "
    "prints and whether metrics still arrive. ctrl+p opens the command palette for rare "
    "actions: {rare}."
)
# What the intro names as the palette's rare actions (by their palette entry), where the
# cluster can do them.
RARE = (
    ("teardown", "teardown"),
    ("tunnel", "re-open tunnel"),
    ("bootstrap", "re-bootstrap one host"),
    ("open_dashboard", "open the dashboard URL"),
)
RARE_ELSE = "recover now, toggle auto-recovery"  # a cluster with none of those (GKE)
# The screens whose keys help lists, each with its section of the keymap.
SCREENS: Sequence[tuple[type[Screen[Any]], str]] = (
    (OverviewScreen, "overview"),
    (JobsScreen, "jobs"),
    (LogViewScreen, "log"),
    (CadenceScreen, "cadence"),
    (EventsScreen, "events"),
    (RecoveryScreen, "recovery"),
    (WorkloadsScreen, "workloads"),
    (SubmitScreen, "submit"),
    (WorkloadFormScreen, "workload_form"),
    (HostScreen, "host"),
    (ConfirmScreen, "confirm"),
)


def _bindings(bindings: Iterable[BindingType]) -> list[Binding]:
    return [b for b in bindings if isinstance(b, Binding)]


class HelpScreen(ModalScreen[None]):
    CSS_PATH = "modals.tcss"
    BINDING_GROUP_TITLE = "Help"
    BINDINGS: ClassVar[list[BindingType]] = list(bindings("help"))

    def __init__(self, keymap: UserKeymap | None = None) -> None:
        super().__init__()
        self.keymap = keymap or UserKeymap()

    def keys(self, binding: Binding) -> str:
        if binding.key_display:
            return binding.key_display
        return "/".join(
            self.app.get_key_display(Binding(key.strip(), binding.action))
            for key in binding.key.split(",")
        )

    def _capabilities(self) -> frozenset[Capability] | None:
        return getattr(getattr(self.app, "services", None), "capabilities", None)

    def offered(
        self, screen: type[Screen[Any]] | None, bindings: Sequence[BindingType]
    ) -> list[Binding]:
        """The keys of what this cluster can do (its backend's capabilities): a key for
        another kind of cluster is not listed, as the footer does not show it."""
        caps = self._capabilities()
        shown = [b for b in _bindings(bindings) if caps is None or offered(b, caps)]
        if screen is None:  # the app's own: where the app offers them (a fleet's keys)
            shown = [b for b in shown if self._app_offers(b)]
        return shown

    def _app_offers(self, binding: Binding) -> bool:
        _, name, params = parse_action(binding.action)
        return self.app.check_action(name, params) is not False

    def intro(self) -> str:
        caps = self._capabilities()
        rare = [
            words
            for name, words in RARE
            if caps is None or (need := needs_of_entry(name)) is None or need in caps
        ]
        return INTRO.format(rare=", ".join(rare) or RARE_ELSE)

    def section(self, title: str, bindings: Sequence[Binding]) -> Table:
        table = Table.grid(padding=(0, 2))
        table.add_column(width=10, style="bold cyan", no_wrap=True)
        table.add_column(width=14, no_wrap=True)
        table.add_column(style="dim", ratio=1)
        for binding in bindings:
            table.add_row(self.keys(binding), binding.description, binding.tooltip)
        table.title = title
        table.title_justify = "left"
        table.title_style = "bold"
        return table

    def compose(self) -> ComposeResult:
        keys = self.keymap.effective()
        parts: list[Table | Text] = [Text(self.intro()), Text("")]
        parts.append(self.section("Everywhere", self.offered(None, bindings("app", keys))))
        parts.append(self.section("Tables", _bindings(PhantomTable.BINDINGS)))
        fleet: Sequence[tuple[type[Screen[Any]], str]] = (
            [(FleetScreen, FLEET)] if getattr(self.app, "fleet_state", None) else []
        )
        for screen, section in (*fleet, *SCREENS):
            parts.append(
                self.section(
                    screen.BINDING_GROUP_TITLE or screen.__name__,
                    self.offered(screen, bindings(section, keys)),
                )
            )
        with VerticalScroll(id="dialog", classes="help", can_focus=True):
            yield Static(Group(*parts), id="help-body")
        yield Footer(compact=True)

    def on_mount(self) -> None:
        self.query_one("#dialog").focus()

    def action_close(self) -> None:
        self.dismiss(None)
