"""One host in full (enter on the overview), with the per-host actions: the keymap's
``host`` keys run their commands on this host (``selection``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar, cast

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Footer, Static

from console.commands.kit.params import Kind
from console.screens.keys import bindings
from console.screens.state import ago, clock_time, resources_text
from console.services.model import HostStatus

if TYPE_CHECKING:
    from console.tui.app import PhantomApp


def host_table(host: HostStatus | None, now: float) -> Table | Text:
    if host is None:
        return Text("This host is no longer in the pod snapshot.", "yellow")
    table = Table.grid(padding=(0, 2))
    table.add_column(style="dim")
    table.add_column()
    rows = [
        ("index", str(host.index)),
        ("IP", host.ip),
        ("TPU state", str(host.tpu_state)),
        ("health", host.health or "-"),
        ("Ray", f"{host.ray_state} ({host.ray_nodes} node{'s' if host.ray_nodes != 1 else ''})"),
        ("SSH", str(host.ssh)),
        ("resources", resources_text(host.resources) or "-"),
        ("last seen", f"{clock_time(host.last_seen)} ({ago(now, host.last_seen)} ago)"),
    ]
    for key, value in rows:
        table.add_row(key, value)
    return table


class HostScreen(ModalScreen[None]):
    CSS_PATH = "modals.tcss"
    BINDING_GROUP_TITLE = "Host"
    BINDINGS: ClassVar[list[BindingType]] = list(bindings("host"))

    def __init__(self, host_name: str) -> None:
        super().__init__()
        self.host_name = host_name

    @property
    def phantom(self) -> PhantomApp:
        return cast("PhantomApp", self.app)

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            yield Static(Text(self.host_name, "bold"), id="dialog-title")
            yield Static(id="dialog-body")
        yield Footer(compact=True)

    def on_mount(self) -> None:
        self.refresh_host()

    def refresh_host(self) -> None:
        pod = self.phantom.state.pod
        host = next((h for h in pod.hosts if h.name == self.host_name), None) if pod else None
        self.query_one("#dialog-body", Static).update(host_table(host, self.phantom.clock()))

    def selection(self) -> dict[Kind, str]:
        """What a command run here acts on: this host."""
        return {Kind.HOST: self.host_name, Kind.HOST_OR_ALL: self.host_name}

    def action_close(self) -> None:
        self.dismiss(None)
