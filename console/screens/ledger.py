"""Ledger (key 7): where the pod's time and money went, from the journal.

On top the headline (goodput, the largest badput causes, what spot saved or lost against
on-demand for the same productive work) and the money behind it; then one timeline bar per
job on one time axis, the pod's own bar first: each cell is coloured by the cause that
filled most of it, and an incident's causes (detect, recover, capacity, redone) win any cell
they touch, so a short preemption in a long run still shows. Below, the totals by cause,
recovery time per step and the checkpoint-interval advice. The numbers are
``services.ledger.book``'s, the same as `status --json` and `phantom report`.

In a fleet of several clusters a table comes first: a row per cluster (``▸`` the one shown
below) and the fleet's total, summed from those rows (``services.ledger.fleet``), then
badput by cause per cluster; the cluster shown is named above its own ledger.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import ClassVar

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import BindingType
from textual.containers import VerticalScroll
from textual.widgets import Static

from console.screens.base import PhantomScreen
from console.screens.keys import bindings
from console.screens.state import duration
from console.services.ledger.book import Book
from console.services.ledger.fleet import FleetBook
from console.services.ledger.goodput import Unit
from console.services.ledger.timeline import BADPUT, Cause, Segment

STYLE: dict[Cause, tuple[str, str]] = {
    Cause.PRODUCTIVE: ("█", "green"),
    Cause.DETECT: ("█", "red"),
    Cause.RECOVER: ("█", "yellow"),
    Cause.CAPACITY: ("█", "magenta"),
    Cause.WARMUP: ("█", "cyan"),
    Cause.REDONE: ("█", "bright_red"),
    Cause.QUEUED: ("░", "blue"),
    Cause.IDLE: ("·", "dim"),
}
# An incident's causes win any cell they touch (a 5 s recovery in a day still shows).
_LOUD = (Cause.DETECT, Cause.CAPACITY, Cause.RECOVER, Cause.REDONE)
NAME_W = 14
PCT_W = 7


def bar_causes(
    segments: Sequence[Segment], start: float, end: float, width: int
) -> list[Cause | None]:
    """``width`` cells over ``[start, end]``: each the cause that filled most of it (None:
    the unit did not exist then), an incident's cause wherever one touches the cell."""
    if width <= 0 or end <= start:
        return []
    step = (end - start) / width
    out: list[Cause | None] = []
    for i in range(width):
        a, b = start + i * step, start + (i + 1) * step
        share: dict[Cause, float] = {}
        for s in segments:
            overlap = min(b, s.end) - max(a, s.start)
            if overlap > 0:
                share[s.cause] = share.get(s.cause, 0.0) + overlap
        loud = [c for c in _LOUD if c in share]
        if loud:
            out.append(max(loud, key=lambda c: share[c]))
        else:
            out.append(max(share, key=lambda c: share[c]) if share else None)
    return out


def bar_text(unit: Unit, start: float, end: float, width: int) -> Text:
    out = Text()
    for cause in bar_causes(unit.segments, start, end, width):
        if cause is None:
            out.append(" ")
        else:
            char, style = STYLE[cause]
            out.append(char, style)
    return out


def unit_line(unit: Unit, start: float, end: float, width: int) -> Text:
    name = unit.name if unit.kind != "cluster" else "pod"
    if len(name) > NAME_W - 1:
        name = name[: NAME_W - 2] + "…"
    out = Text(f"{name:<{NAME_W}}", "bold" if unit.kind == "cluster" else "")
    out.append_text(bar_text(unit, start, end, max(8, width - NAME_W - PCT_W)))
    pct = "-" if unit.goodput is None else f"{unit.goodput:.0%}"
    out.append(f"{pct:>{PCT_W}}")
    return out


def legend(shown: Iterable[Cause]) -> Text:
    """The key to the bars: the causes they show (so it fits one line at 80 columns)."""
    out = Text()
    for cause in shown:
        char, style = STYLE[cause]
        out.append(char, style)
        out.append(f" {cause}  ", "dim")
    return out


def summary_text(book: Book) -> Text:
    ledger = book.ledger
    c = ledger.cluster
    out = Text()
    if c.goodput is None:
        out.append("No time recorded yet: the ledger fills in as the journal does.", "dim")
        return out
    out.append(f"goodput {c.goodput:.1%}", "bold green" if c.goodput >= 0.9 else "bold yellow")
    out.append(f" of {duration(c.wall_s)}", "bold")
    out.append(f"  {len(c.incidents)} incident{'s' if len(c.incidents) != 1 else ''}")
    out.append(f"  {len(ledger.units)} job{'s' if len(ledger.units) != 1 else ''}\n")
    money = ledger.money
    p = ledger.pricing
    out.append(f"{p.chips} chips {p.accelerator_type}  {money['chip_hours']:.2f} chip-h  ")
    saved = money["spot_saved_usd"]
    if saved is None:
        out.append(f"no price: {p.why}", "yellow")
    else:
        spot, on_demand = money["spot_usd"], money["on_demand_same_work_usd"]
        out.append(f"spot ${spot:,.2f} vs on-demand ${on_demand:,.2f}: ")
        word = "saved" if saved >= 0 else "lost"
        out.append(f"{word} ${abs(saved):,.2f}", "bold green" if saved >= 0 else "bold red")
    return out


def _usd(value: float | None) -> str:
    return "-" if value is None else f"${value:,.2f}"


def fleet_table(fleet: FleetBook, shown: str) -> Table:
    """A row per cluster (``▸`` the one shown below) and the fleet's total: goodput, wall,
    badput, chip-hours, spot against on-demand for the same productive work."""
    table = Table(box=None, padding=(0, 1), pad_edge=False, header_style="bold")
    table.add_column("CLUSTER", no_wrap=True, max_width=NAME_W)
    for head in ("GOODPUT", "WALL", "BADPUT", "CHIP-H", "SPOT", "ON-DEM", "SAVED"):
        table.add_column(head, justify="right", no_wrap=True)
    rows = [(name, f, False) for name, f in fleet.rows.items()]
    for name, f, total in [*rows, ("total", fleet.total, True)]:
        mark = "▸" if name == shown and not total else " "
        saved = f.spot_saved_usd
        table.add_row(
            Text(f"{mark}{name}", "bold" if total or name == shown else ""),
            "-" if f.goodput is None else f"{f.goodput:.1%}",
            duration(f.wall_s),
            duration(f.badput_total_s),
            f"{f.chip_hours:.2f}",
            _usd(f.spot_usd),
            _usd(f.on_demand_same_work_usd),
            Text(_usd(saved), "" if saved is None else ("green" if saved >= 0 else "red")),
            style="bold" if total else None,
            end_section=total,
        )
    return table


def fleet_badput(fleet: FleetBook) -> Table | Text:
    """Badput by cause: a column per cause any cluster lost time to, a row per cluster and
    the total."""
    total = fleet.total
    causes = [c for c in BADPUT if total.badput_s.get(c, 0.0) > 0]
    if not causes:
        return Text("no badput", "dim")
    table = Table(box=None, padding=(0, 1), pad_edge=False, header_style="bold")
    table.add_column("BADPUT", no_wrap=True, max_width=NAME_W)
    for cause in causes:
        char, style = STYLE[cause]
        table.add_column(Text.assemble((char, style), f" {cause}"), justify="right", no_wrap=True)
    rows = list(fleet.rows.items())
    for i, (name, f) in enumerate([*rows, ("total", total)]):
        table.add_row(
            f" {name}",
            *(duration(f.badput_s.get(c, 0.0)) for c in causes),
            style="bold" if i == len(rows) else None,
        )
    return table


def totals_text(book: Book) -> Text:
    c = book.ledger.cluster
    out = Text()
    if c.wall_s <= 0:
        return out
    seconds = c.seconds
    parts = [(k, v) for k, v in seconds.items() if v > 0 or k is Cause.PRODUCTIVE]
    for i, (cause, value) in enumerate(parts):
        char, style = STYLE[cause]
        out.append(("  " if i else "") + char, style)
        out.append(f" {cause} {duration(value)} ({value / c.wall_s:.0%})")
    steps = sorted(c.recover_steps.items(), key=lambda kv: -kv[1])
    if steps:
        out.append("\nrecovery: ", "bold")
        out.append(", ".join(f"{k} {duration(v)}" for k, v in steps))
    if c.steps_known:
        out.append(f"\nredone: {c.redone_steps} steps")
    for note in book.ledger.notes:
        out.append(f"\n{note}", "dim")
    return out


class LedgerScreen(PhantomScreen):
    MODE = "ledger"
    WATCHES = frozenset({"ledger"})
    CSS_PATH = "ledger.tcss"
    BINDING_GROUP_TITLE = "Ledger"
    BINDINGS: ClassVar[list[BindingType]] = list(bindings("ledger"))

    def compose_body(self) -> ComposeResult:
        with VerticalScroll(id="ledger-body"):
            yield Static(id="ledger-fleet")
            yield Static(id="ledger-summary")
            yield Static(id="ledger-bars")
            yield Static(id="ledger-totals")
            yield Static(id="ledger-advice")

    def on_mount(self) -> None:
        super().on_mount()
        self.phantom.refresh_ledger()

    def on_screen_resume(self) -> None:
        super().on_screen_resume()
        self.phantom.refresh_ledger()

    def on_resize(self) -> None:
        self.render_state(self.WATCHES)

    def render_state(self, changed: Iterable[str]) -> None:
        book = self.state.ledger
        summary = self.query_one("#ledger-summary", Static)
        if book is None:
            summary.update(Text("Reading the journal…", "dim"))
            return
        ledger = book.ledger
        fleet = self.state.fleet_ledger
        panel = self.query_one("#ledger-fleet", Static)
        panel.display = fleet is not None
        name = self.phantom.services.settings.cluster.name
        if fleet is not None:
            head = Text.assemble(("Fleet", "bold underline"), f"  {len(fleet.books)} clusters")
            notes = [Text(n, "dim") for n in fleet.notes]
            panel.update(Group(head, fleet_table(fleet, name), fleet_badput(fleet), *notes))
            summary.update(Text.assemble((f"{name}\n", "bold underline"), summary_text(book)))
        else:
            summary.update(summary_text(book))
        # A fleet's table makes the body scroll: its scrollbar's gutter is kept (``.fleet``)
        # and the bars drawn beside it, so a row never wraps its goodput onto a line of its own.
        body = self.query_one("#ledger-body", VerticalScroll)
        body.set_class(fleet is not None, "fleet")
        gutter = body.styles.scrollbar_size_vertical if fleet is not None else 0
        width = (self.size.width or 80) - 2 - gutter
        bars = Text()
        seconds = ledger.cluster.seconds
        bars.append_text(legend(c for c in STYLE if seconds[c] > 0 or c is Cause.PRODUCTIVE))
        for unit in (ledger.cluster, *ledger.units):
            bars.append("\n")
            bars.append_text(unit_line(unit, ledger.start, ledger.end, width))
        self.query_one("#ledger-bars", Static).update(bars)
        self.query_one("#ledger-totals", Static).update(totals_text(book))
        self.query_one("#ledger-advice", Static).update(Text(book.advice.render(), "italic"))
