"""Pod overview: every host on one table, the pod summary line and its warnings.

Built for 1,024 hosts: rows are keyed by host name and only changed cells are written;
`/` filters by any text in the row (name, IP, PREEMPTED, DEAD, down...).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import BindingType
from textual.widgets import Static

from console.screens.base import FilteredScreen
from console.screens.keys import bindings
from console.screens.state import ago, middle_ellipsis, resources_text, short_host
from console.services.capabilities import Capability
from console.services.model import HostState, HostStatus, PodSnapshot, RayState, Reachability
from console.widgets.fast_table import FastTable
from console.widgets.table import Cell

COLUMNS: list[tuple[str, str, int]] = [
    ("host", "HOST", 6),
    ("ip", "IP", 11),
    ("tpu", "TPU", 9),
    ("health", "HEALTH", 9),
    ("ray", "RAY", 7),
    ("ssh", "SSH", 4),
    ("res", "RESOURCES", 10),
    ("seen", "SEEN", 5),
]
# A cluster without SSH hosts of the console's (GKE) lists its nodes: no Ray, no SSH column,
# and the node's own part of its name (every GKE node name starts with the cluster's).
NODE_WIDTH, POOL_WIDTH = 13, 18  # a node's "3e01e57e-0003", a pool's "phantom-gke-np-0"
NODE_COLUMNS: list[tuple[str, str, int]] = [
    ("host", "NODE", NODE_WIDTH),
    ("pool", "POOL", POOL_WIDTH),
    ("tpu", "STATE", 9),
    ("health", "HEALTH", 12),
    ("res", "RESOURCES", 10),
    ("seen", "SEEN", 5),
]
MAX_WARNINGS = 3

_TPU_STYLE: dict[str, str] = {
    HostState.READY: "green",
    HostState.CREATING: "yellow",
    HostState.REPAIRING: "yellow",
    HostState.PREEMPTED: "bold red",
    HostState.DELETING: "red",
    HostState.DELETED: "red",
}
_HEALTH: dict[str, tuple[str, str]] = {
    "HEALTHY": ("healthy", "green"),
    "TIMEOUT": ("timeout", "red"),
    "UNHEALTHY_TENSORFLOW": ("unhealthy", "red"),
    "UNHEALTHY_MAINTENANCE": ("maint", "yellow"),
    "HEALTH_UNSPECIFIED": ("-", "dim"),
    "": ("-", "dim"),
}


def host_cells(host: HostStatus, node_name: str, now: float) -> tuple[Cell, ...]:
    """One table row: what a reviewer reads for a host, with its colour."""
    health, health_style = _HEALTH.get(host.health, (host.health.lower(), "yellow"))
    if host.ray_nodes > 1:
        ray: Cell = (f"{host.ray_state}×{host.ray_nodes}", "bold yellow")
    elif host.ray_state == RayState.ALIVE:
        ray = (RayState.ALIVE.value, "green")
    elif host.ray_state == RayState.DEAD:
        ray = (RayState.DEAD.value, "red")
    else:
        ray = (host.ray_state or "-", "dim")
    ssh_style = {str(Reachability.OK): "green", str(Reachability.DOWN): "red"}.get(
        str(host.ssh), "dim"
    )
    return (
        (short_host(host.name, node_name), "bold"),
        (host.ip, ""),
        (str(host.tpu_state), _TPU_STYLE.get(host.tpu_state, "dim")),
        (health, health_style),
        ray,
        (str(host.ssh), ssh_style),
        (resources_text(host.resources), ""),
        (ago(now, host.last_seen), ""),
    )


def node_cells(host: HostStatus, now: float) -> tuple[Cell, ...]:
    """One row of a node pool's node (GKE): what tells the nodes of a slice apart. A name
    longer than its column (GKE truncates a long cluster's and pool's names inside its node
    names, so the pool is not found there) keeps its start and its distinguishing end."""
    health, health_style = _HEALTH.get(host.health, (host.health.lower(), "yellow"))
    return (
        (middle_ellipsis(short_node(host.name, host.pool), NODE_WIDTH), "bold"),
        (middle_ellipsis(host.pool or "-", POOL_WIDTH), ""),
        (str(host.tpu_state), _TPU_STYLE.get(host.tpu_state, "dim")),
        (health, health_style),
        (resources_text(host.resources), ""),
        (ago(now, host.last_seen), ""),
    )


def short_node(name: str, pool: str) -> str:
    """``gke-<cluster>-<pool>-3e01e57e-0003`` -> ``3e01e57e-0003`` (unique within the pool)."""
    if pool and f"-{pool}-" in name:
        return name.split(f"-{pool}-", 1)[1]
    return name


def summary_text(pod: PodSnapshot | None, now: float, *, ray: bool = True) -> Text:
    out = Text()
    if pod is None:
        out.append("No snapshot yet: the first poll of TPU API, SSH and Ray is running.", "dim")
        return out
    out.append(pod.node_name or "pod", "bold")
    if pod.accelerator_type:
        out.append(f" {pod.accelerator_type}")
    out.append(f" ({pod.provider})", "dim")
    tpu_style = "green" if pod.tpu_state == HostState.READY else "bold red"
    out.append("  TPU ")
    out.append(str(pod.tpu_state), tpu_style)
    if pod.health:
        out.append(f"/{pod.health.lower()}", "dim")
    total = len(pod.hosts)
    out.append("  hosts ")
    out.append(f"{pod.ready_hosts}/{total} ready", "green" if pod.ready_hosts == total else "red")
    if not ray:  # no Ray or tunnel of the console's own: JobSets run there
        running = sum(1 for p in pod.pods if p.phase == "Running")
        out.append("\npods ")
        out.append(f"{running}/{len(pod.pods)} running", "green" if running else "yellow")
        out.append(f"  {len(pod.workloads)} workloads (screen 6)")
    else:
        out.append("  ray ")
        out.append(
            f"{pod.ray_alive}/{total} alive", "green" if pod.ray_alive == total else "yellow"
        )
        out.append("\ntunnel ")
        if pod.tunnel_up:
            out.append("up", "green")
            if pod.dashboard_url:
                out.append(f" {pod.dashboard_url}", "dim")
        else:
            out.append("down", "bold red")
    out.append(f"  polled {ago(now, pod.at)} ago", "dim")
    return out


def warnings_text(warnings: tuple[str, ...]) -> Text:
    out = Text()
    for i, warning in enumerate(warnings[:MAX_WARNINGS]):
        if i:
            out.append("\n")
        out.append("⚠ ", "bold yellow")
        out.append(warning)
    if len(warnings) > MAX_WARNINGS:
        out.append(f"\n  … and {len(warnings) - MAX_WARNINGS} more (see Events)", "dim")
    return out


class OverviewScreen(FilteredScreen):
    MODE = "overview"
    WATCHES = frozenset({"pod", "tick"})
    CSS_PATH = "overview.tcss"
    BINDING_GROUP_TITLE = "Pod overview"
    FILTER_PLACEHOLDER = "filter hosts: text in any column (w3, PREEMPTED, DEAD, down)"
    BINDINGS: ClassVar[list[BindingType]] = list(bindings("overview"))

    def __init__(self) -> None:
        super().__init__()
        self._host_cells: dict[str, tuple[HostStatus, tuple[Cell, ...]]] = {}
        # the last whole pass: (hosts, node name), unfiltered only
        self._last_pass: tuple[tuple[HostStatus, ...], str] | None = None
        # the SEEN column is live (drawn for the visible rows only, FastTable.set_live):
        # the time it is drawn at, and its whole second (a new one redraws the visible rows)
        self._now = 0.0
        self._summary = Text()
        self._warnings: tuple[str, ...] = ()

    @property
    def _hosts(self) -> bool:
        """The cluster has SSH hosts and Ray of the console's (its backend declares it)."""
        return Capability.HOSTS in self.phantom.services.capabilities

    def _cells(self, host: HostStatus, node_name: str, now: float) -> tuple[Cell, ...]:
        return host_cells(host, node_name, now) if self._hosts else node_cells(host, now)

    def compose_body(self) -> ComposeResult:
        yield Static(id="summary")
        yield Static(id="warnings")
        yield self.make_filter_input()
        # Not a DataTable: 1,024 hosts changing several times a second need per-row caching.
        table = FastTable(id="hosts", classes="main-table")
        columns = COLUMNS if self._hosts else NODE_COLUMNS
        table.set_columns(columns)
        table.set_live(len(columns) - 1, self._seen_cell)  # SEEN, the last column
        yield table

    def _seen_cell(self, key: Hashable) -> Cell:
        hit = self._host_cells.get(str(key))
        return (ago(self._now, hit[0].last_seen) if hit is not None else "-", "")

    def render_state(self, changed: Iterable[str]) -> None:
        pod = self.state.pod
        now = self.phantom.clock()
        second, self._now = int(self._now), now
        shown = self._render_hosts(pod, now)
        if int(now) != second:
            self.query_one("#hosts", FastTable).refresh_live()  # the ages on screen
        summary = summary_text(pod, now, ray=self._hosts)
        if self.filter_text and pod is not None:
            summary.append(
                f"\nfilter {self.filter_text!r}: {shown} of {len(pod.hosts)} hosts", "cyan"
            )
        if summary != self._summary:  # an unchanged Static must not cost a layout pass
            same_height = summary.plain.count("\n") == self._summary.plain.count("\n")
            self._summary = summary
            self.query_one("#summary", Static).update(summary, layout=not same_height)
        shown_warnings = pod.warnings if pod else ()
        if (
            pod is not None
            and Capability.RAY in self.phantom.services.capabilities
            and pod.hosts
            and pod.ready_hosts == len(pod.hosts)
            and pod.ray_alive == 0
        ):
            # A fresh pod (or one torn down): say what to press instead of a silent table.
            shown_warnings = (*shown_warnings, "Ray is not running: press u to bring it up")
        warnings = self.query_one("#warnings", Static)
        warnings.display = bool(shown_warnings)
        if shown_warnings and shown_warnings != self._warnings:
            self._warnings = shown_warnings
            warnings.update(warnings_text(shown_warnings))

    def _render_hosts(self, pod: PodSnapshot | None, now: float) -> int:
        if pod is None:
            self._last_pass = None
            self.table.sync_rows([])
            return 0
        if self._update_changed_hosts(pod, now):
            return len(pod.hosts)
        rows: list[tuple[Hashable, tuple[Cell, ...]]] = []
        cache = self._host_cells
        filtered = bool(self.filter_text)
        for host in pod.hosts:
            # Pollers publish the whole pod; most hosts did not change since the last one.
            hit = cache.get(host.name)
            if hit is not None and (hit[0] is host or hit[0] == host):
                cells = hit[1]
            else:
                cells = self._cells(host, pod.node_name, now)
                cache[host.name] = (host, cells)
            # (a filter reads the SEEN text of when the row was built: the live one is drawn)
            if not filtered or self.matches(cells, extra=host.name):
                rows.append((host.name, cells))
        self.table.sync_rows(rows)
        self._last_pass = None if filtered else (pod.hosts, pod.node_name)
        return len(rows)

    def _update_changed_hosts(self, pod: PodSnapshot, now: float) -> bool:
        """Redraw only the hosts this snapshot replaced, when that is all that changed.

        Pollers publish the whole pod, and at 10,000 hosts a whole pass costs 10-30 ms per
        snapshot. The same hosts in the same order and no filter as the last whole pass:
        only the replaced ``HostStatus`` objects need new cells (the SEEN ages are live).
        """
        last = self._last_pass
        if (
            last is None
            or self.filter_text
            or last[1] != pod.node_name
            or len(last[0]) != len(pod.hosts)
        ):
            return False
        replaced = [
            (old, new) for old, new in zip(last[0], pod.hosts, strict=True) if old is not new
        ]
        if any(old.name != new.name for old, new in replaced):
            return False  # hosts moved: the order changes, a whole pass
        rows: list[tuple[Hashable, tuple[Cell, ...]]] = []
        for _, host in replaced:
            cells = self._cells(host, pod.node_name, now)
            self._host_cells[host.name] = (host, cells)
            rows.append((host.name, cells))
        self.query_one("#hosts", FastTable).update_rows(rows)
        self._last_pass = (pod.hosts, pod.node_name)
        return True

    # actions -------------------------------------------------------------------------------

    def on_fast_table_row_selected(self, event: FastTable.RowSelected) -> None:
        self.phantom.open_host(str(event.key))
