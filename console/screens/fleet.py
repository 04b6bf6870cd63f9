"""Fleet: a row per cluster of the config (the home screen of a fleet of several).

Each row is what that cluster's services last published (``screens.fleet_state``): where it
runs, its accelerator, hosts or nodes ready of total, its Ray or JobSets, jobs running,
recoveries so far, open incidents, the last preemption, cadence, and the slice's spot price
per hour in its region. `enter` opens the highlighted cluster's screens (Overview first);
`C` (and the palette) switches cluster from anywhere. The header names the current one.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import BindingType
from textual.widgets import Static

from console.screens.base import FilteredScreen
from console.screens.fleet_state import COLUMNS, fleet_row, hourly
from console.screens.keys import FLEET, bindings
from console.widgets.fast_table import FastTable
from console.widgets.table import Cell


class FleetScreen(FilteredScreen):
    MODE = FLEET
    WATCHES = frozenset({"fleet", "tick"})
    CSS_PATH = "fleet.tcss"
    BINDING_GROUP_TITLE = "Fleet"
    FILTER_PLACEHOLDER = "filter clusters: name, zone, accelerator…"
    BINDINGS: ClassVar[list[BindingType]] = list(bindings(FLEET))

    def compose_body(self) -> ComposeResult:
        yield Static(id="fleet-summary")
        yield self.make_filter_input()
        # Not a DataTable: its one update counter re-renders every cell on any change, ~30 ms
        # a frame with ten clusters polling (benchmarks.tui --fleet); here a row that did not
        # change is not drawn again.
        table = FastTable(id="fleet", classes="main-table")
        table.set_columns(COLUMNS)
        yield table

    def __init__(self) -> None:
        super().__init__()
        # per cluster: the view's version and the current cluster its row was made for
        self._made: dict[str, tuple[int, str, tuple[Cell, ...]]] = {}
        self._summary_shown: Text | None = None

    def render_state(self, changed: Iterable[str]) -> None:
        """Remake only the rows of clusters that changed since they were made (a publish
        changes one); a tick remakes all, their ages having moved on."""
        app = self.phantom
        now = app.clock()
        current = app.services.settings.cluster.name
        every = "tick" in changed
        rows: list[tuple[Hashable, tuple[Cell, ...]]] = []
        for name, view in app.fleet_state.items():
            made = self._made.get(name)
            if every or made is None or made[:2] != (view.version, current):
                made = (view.version, current, fleet_row(view, now, current=name == current))
                self._made[name] = made
            cells = made[2]
            if self.matches(cells):
                rows.append((name, cells))
        self.table.sync_rows(rows)  # draws only the rows whose cells changed
        summary = self._summary(len(rows))
        if summary != self._summary_shown:
            # One line whatever it says (fleet.tcss): no layout pass, which would arrange
            # and redraw the whole screen on every publish.
            self.query_one("#fleet-summary", Static).update(summary, layout=False)
            self._summary_shown = summary

    def _summary(self, shown: int) -> Text:
        views = list(self.phantom.fleet_state.values())
        out = Text(f"{len(views)} clusters", "bold")
        if self.filter_text:
            out.append(f"  filter {self.filter_text!r}: {shown} shown", "dim")
        whole = sum(
            1 for v in views if v.pod is not None and v.pod.hosts and
            v.pod.ready_hosts == len(v.pod.hosts)
        )  # fmt: skip
        out.append(f"  {whole} whole", "green" if whole == len(views) else "yellow")
        recovering = sum(1 for v in views if v.recovery is not None and v.recovery.active)
        if recovering:
            out.append(f"  {recovering} recovering", "bold magenta")
        incidents = sum(v.journal.open_incidents for v in views)
        if incidents:
            word = "incident" if incidents == 1 else "incidents"
            out.append(f"  {incidents} open {word}", "bold yellow")
        prices = [hourly(v.pricing) for v in views]
        known = [p for p in prices if p is not None]
        if known:
            out.append(f"  spot ${sum(known):,.2f}/h", "")
            if len(known) < len(prices):
                out.append(f" ({len(prices) - len(known)} unpriced)", "dim")
        return out

    def on_fast_table_row_selected(self, event: FastTable.RowSelected) -> None:
        event.stop()
        self.phantom.open_cluster(str(event.key))
