"""Metric cadence: is every run still logging at its usual pace, and what does it log?

One row per run (time since its last metric, median interval, steps/min, a text sparkline of
recent intervals); stalled runs are red and sort first. The highlighted run gets a full-width
``Sparkline`` of its intervals below the table and, when its backend publishes the values
(``RunMetrics``: a GKE run's six Tunix metrics), one sparkline line per metric.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import BindingType
from textual.containers import Vertical
from textual.widgets import DataTable, Sparkline, Static

from console.screens.base import FilteredScreen
from console.screens.keys import bindings
from console.screens.state import duration, spark
from console.services.model import RunCadence, RunMetrics
from console.widgets.table import Cell

SPARK_WIDTH = 12
COLUMNS: list[tuple[str, str, int | None]] = [
    ("run", "RUN", 18),
    ("since", "LAST", 6),
    ("median", "MEDIAN", 6),
    ("spm", "STEPS/M", 7),
    ("step", "STEP", 7),
    ("spark", "INTERVALS", SPARK_WIDTH),
    ("state", "STATE", 8),
]


def _num(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def run_cells(run: RunCadence) -> tuple[Cell, ...]:
    base = "bold red" if run.stalled else ""
    state = "STALLED" if run.stalled else (run.state or "-")
    if run.stale and not run.stalled:
        state = "STALE"  # its source is slow or down: the numbers are its last ones
    name = run.name if len(run.name) <= 18 else run.name[:17] + "…"
    return (
        (name, base or "bold"),
        (duration(run.seconds_since, compact=True), base),
        (duration(run.median_interval_s), base),
        (_num(run.steps_per_min, ".0f"), base),
        ("-" if run.last_step is None else str(run.last_step), base),
        (spark(run.recent_intervals, SPARK_WIDTH), "red" if run.stalled else "cyan"),
        (state, _state_style(run, state)),
    )


def _state_style(run: RunCadence, state: str) -> str:
    if run.stalled:
        return "bold red reverse"
    if state == "STALE":
        return "yellow"
    return "green" if state == "running" else "dim"


# The seed's Tunix metrics, in the order its tutorial lists them; others follow by name.
METRIC_ORDER = (
    "rewards/mean",
    "score/mean",
    "rollout_time",
    "completions/mean_length",
    "actor_dequeue_time",
    "step_time_sec",
)
_METRIC_NAME_W = 24
_METRIC_VALUE_W = 10


def metric_value(name: str, value: float) -> str:
    if name.endswith(("_time", "_sec")):
        return f"{value:.2f}s"
    return f"{value:.0f}" if abs(value) >= 100 else f"{value:.3f}"


def metrics_text(metrics: RunMetrics | None, width: int) -> Text:
    """One line per metric: name, newest value, a sparkline of its recent steps."""
    out = Text()
    if metrics is None or not metrics.series:
        return out
    steps = [s for series in metrics.series.values() for s, _ in series]
    out.append("metrics", "bold")
    if steps:
        out.append(f"  steps {min(steps)}–{max(steps)}", "dim")
    names = [n for n in METRIC_ORDER if n in metrics.series]
    names += sorted(n for n in metrics.series if n not in METRIC_ORDER)
    spark_w = max(8, width - _METRIC_NAME_W - _METRIC_VALUE_W - 2)
    for name in names:
        values = [v for _, v in metrics.series[name]]
        out.append("\n")
        out.append(f"{name[: _METRIC_NAME_W - 1]:<{_METRIC_NAME_W}}")
        last = metric_value(name, values[-1]) if values else "-"
        out.append(f"{last:>{_METRIC_VALUE_W}}  ", "bold")
        out.append(spark(values, spark_w), "cyan")
    return out


def sorted_runs(runs: Iterable[RunCadence]) -> list[RunCadence]:
    return sorted(runs, key=lambda r: (not r.stalled, r.name, r.run_id))


def run_detail(run: RunCadence | None) -> Text:
    if run is None:
        return Text("No W&B runs yet: metrics appear here once a job logs its first step.", "dim")
    out = Text()
    out.append(run.name, "bold")
    out.append(f" ({run.source}, {run.run_id})", "dim")
    out.append(f"  last metric {duration(run.seconds_since)} ago")
    out.append(f"  median every {duration(run.median_interval_s)}")
    if run.stalled and run.seconds_since and run.median_interval_s:
        ratio = run.seconds_since / run.median_interval_s
        out.append(f"\nSTALLED: nothing for {ratio:.0f}× its median interval", "bold red")
    if run.stale:
        out.append(f"\nSTALE: {run.stale}", "yellow")
    return out


class CadenceScreen(FilteredScreen):
    MODE = "cadence"
    WATCHES = frozenset({"cadence", "metrics"})
    CSS_PATH = "cadence.tcss"
    BINDING_GROUP_TITLE = "Metric cadence"
    FILTER_PLACEHOLDER = "filter runs: name or state (e.g. STALLED)"
    BINDINGS: ClassVar[list[BindingType]] = list(bindings("cadence"))

    def compose_body(self) -> ComposeResult:
        yield Static(id="cadence-summary")
        yield self.make_filter_input()
        table = self.make_table("runs")
        table.set_columns(COLUMNS)
        yield table
        with Vertical(id="detail"):
            yield Static(id="run-detail")
            yield Sparkline([], id="run-spark")
            yield Static(id="run-metrics")

    def render_state(self, changed: Iterable[str]) -> None:
        runs = sorted_runs(self.state.runs.values())
        rows: list[tuple[Hashable, tuple[Cell, ...]]] = []
        for run in runs:
            cells = run_cells(run)
            if self.matches(cells):
                rows.append((run.run_id, cells))
        self.table.sync_rows(rows)
        stalled = sum(1 for r in runs if r.stalled)
        summary = Text()
        summary.append(f"{len(runs)} runs", "bold")
        if stalled:
            summary.append(f"  {stalled} stalled", "bold red")
        else:
            summary.append("  all on cadence" if runs else "", "green")
        self.query_one("#cadence-summary", Static).update(summary)
        self._render_detail()

    def _render_detail(self) -> None:
        key = self.table.highlighted_key()
        run = self.state.runs.get(str(key)) if key is not None else None
        self.query_one("#run-detail", Static).update(run_detail(run))
        sparkline = self.query_one("#run-spark", Sparkline)
        sparkline.data = list(run.recent_intervals) if run else []
        sparkline.set_class(bool(run and run.stalled), "-stalled")
        metrics = self.state.metrics.get(str(key)) if key is not None else None
        panel = self.query_one("#run-metrics", Static)
        panel.display = bool(metrics and metrics.series)
        panel.update(metrics_text(metrics, (self.size.width or 80) - 2))

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        self._render_detail()

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        self._render_detail()
