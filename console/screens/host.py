"""One host in full (enter on the overview), with the per-host actions."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar, cast

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Footer, Static

from console.screens.keys import table_key
from console.screens.state import ago, clock_time, resources_text
from console.services.action_table import can
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
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,q", "close", "Close", id="host.close", tooltip="Back to the overview"),
        table_key("host.bootstrap"),
        table_key("host.preempt"),
        table_key("host.recreate"),
    ]

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

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        return can(action, self.phantom.services.capabilities)

    def action_close(self) -> None:
        self.dismiss(None)

    def action_bootstrap(self) -> None:
        self.phantom.ops.run_bootstrap([self.host_name])

    def action_preempt(self) -> None:
        self.phantom.ops.request_preempt(self.host_name)

    def action_recreate(self) -> None:
        self.phantom.ops.request_recreate(self.host_name)
