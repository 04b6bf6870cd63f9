"""Help (`?`): every key of every screen, grouped by screen, with what it does."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, ClassVar

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import ModalScreen, Screen
from textual.widgets import Footer, Static

from console.screens.cadence import CadenceScreen
from console.screens.confirm import ConfirmScreen
from console.screens.events import EventsScreen
from console.screens.host import HostScreen
from console.screens.jobs import JobsScreen
from console.screens.logview import LogViewScreen
from console.screens.overview import OverviewScreen
from console.screens.recovery import RecoveryScreen
from console.screens.submit import SubmitScreen
from console.screens.workload_form import WorkloadFormScreen
from console.screens.workloads import WorkloadsScreen
from console.services.action_table import can
from console.widgets.table import PhantomTable

INTRO = (
    "Phantom Console shows what is alive on the pod, what was preempted, what each job "
    "prints and whether metrics still arrive. ctrl+p opens the command palette for rare "
    "actions: {rare}."
)
# What the intro names as the palette's rare actions, where the cluster can do them.
RARE = (
    ("teardown", "teardown"),
    ("open_tunnel", "re-open tunnel"),
    ("bootstrap", "re-bootstrap one host"),
    ("open_dashboard", "open the dashboard URL"),
)
RARE_ELSE = "recover now, toggle auto-recovery"  # a cluster with none of those (GKE)
SCREENS: Sequence[type[Screen[Any]]] = (
    OverviewScreen,
    JobsScreen,
    LogViewScreen,
    CadenceScreen,
    EventsScreen,
    RecoveryScreen,
    WorkloadsScreen,
    SubmitScreen,
    WorkloadFormScreen,
    HostScreen,
    ConfirmScreen,
)


def _bindings(bindings: Iterable[BindingType]) -> list[Binding]:
    return [b for b in bindings if isinstance(b, Binding)]


class HelpScreen(ModalScreen[None]):
    CSS_PATH = "modals.tcss"
    BINDING_GROUP_TITLE = "Help"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding(
            "escape,q,question_mark",
            "close",
            "Close",
            id="help.close",
            tooltip="Close help",
        ),
    ]

    def __init__(self, app_bindings: Sequence[BindingType]) -> None:
        super().__init__()
        self.app_bindings = _bindings(app_bindings)

    def keys(self, binding: Binding) -> str:
        if binding.key_display:
            return binding.key_display
        return "/".join(
            self.app.get_key_display(Binding(key.strip(), binding.action))
            for key in binding.key.split(",")
        )

    def offered(
        self, screen: type[Screen[Any]] | None, bindings: Sequence[Binding]
    ) -> list[Binding]:
        """The keys of what this cluster can do (its backend's capabilities): a key for
        another kind of cluster is not listed, as the footer does not show it."""
        caps = getattr(self.app, "services", None)
        caps = getattr(caps, "capabilities", None)
        if caps is None:
            return list(bindings)
        aliases: dict[str, str] = getattr(screen, "INTENT_OF", {}) if screen else {}
        return [
            b for b in bindings if can(aliases.get(b.action, b.action.removeprefix("app.")), caps)
        ]

    def intro(self) -> str:
        services = getattr(self.app, "services", None)
        caps = getattr(services, "capabilities", None)
        rare = [words for i, words in RARE if caps is None or can(i, caps)]
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
        parts: list[Table | Text] = [Text(self.intro()), Text("")]
        parts.append(self.section("Everywhere", self.offered(None, self.app_bindings)))
        parts.append(self.section("Tables", _bindings(PhantomTable.BINDINGS)))
        for screen in SCREENS:
            parts.append(
                self.section(
                    screen.BINDING_GROUP_TITLE or screen.__name__,
                    self.offered(screen, _bindings(screen.BINDINGS)),
                )
            )
        with VerticalScroll(id="dialog", classes="help", can_focus=True):
            yield Static(Group(*parts), id="help-body")
        yield Footer(compact=True)

    def on_mount(self) -> None:
        self.query_one("#dialog").focus()

    def action_close(self) -> None:
        self.dismiss(None)
