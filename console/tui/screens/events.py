"""Events: the journal as a timeline, newest first (preemptions, recoveries with their MTTR,
stalls, job transitions, actions and who started them)."""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from typing import ClassVar

from rich.text import Text
from textual import events as tevents
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.widgets import Static

from console.services.model import Event
from console.tui.screens.base import FilteredScreen
from console.tui.state import clock_time, duration, short_host
from console.tui.widgets.table import Cell

KIND_STYLE = {
    "preempted": "bold red",
    "recovered": "bold green",
    "recovery_failed": "bold red",
    "stalled": "yellow",
    "duplicate_ray_node": "yellow",
    "action": "cyan",
    "job_state": "blue",
    "state_change": "",
}
KIND_LABEL = {"duplicate_ray_node": "dup ray node", "recovery_failed": "recov failed"}
_FIXED = 10 + 15 + 8 + 10 + 4


def event_message(event: Event) -> str:
    text = event.message
    mttr = event.data.get("mttr_s")
    if isinstance(mttr, int | float) and "MTTR" not in text:
        text += f" (MTTR {duration(float(mttr))})"
    return text


def event_cells(event: Event, node_name: str, message_width: int) -> tuple[Cell, ...]:
    message = event_message(event)
    if len(message) > message_width:
        message = message[: message_width - 1] + "…"
    return (
        (clock_time(event.at), "dim"),
        (KIND_LABEL.get(event.kind, event.kind)[:13], KIND_STYLE.get(event.kind, "")),
        (short_host(event.host, node_name) or "-", ""),
        (event.actor or "-", "magenta" if event.actor == "user" else ""),
        (message, ""),
    )


def event_key(index: int, event: Event) -> Hashable:
    return f"e{event.id}" if event.id is not None else f"i{index}:{event.at}:{event.kind}"


class EventsScreen(FilteredScreen):
    MODE = "events"
    WATCHES = frozenset({"events"})
    CSS_PATH = "events.tcss"
    BINDING_GROUP_TITLE = "Events"
    FILTER_PLACEHOLDER = "filter events: kind, host, actor or text (e.g. preempted)"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding(
            "slash",
            "filter",
            "Filter",
            id="events.filter",
            tooltip="Show only events whose kind, host, actor or message contains the text",
        ),
        Binding(
            "ctrl+r",
            "app.refresh_events",
            "Reload",
            show=False,
            id="events.reload",
            tooltip="Reload the journal from the services",
        ),
        Binding(
            "escape",
            "clear_filter",
            "Clear filter",
            id="events.clear_filter",
            tooltip="Clear the filter",
        ),
    ]

    def __init__(self) -> None:
        super().__init__()
        self._message_width = 0

    def compose_body(self) -> ComposeResult:
        yield Static(id="events-summary")
        yield self.make_filter_input()
        yield self.make_table("events")

    def on_mount(self) -> None:
        self._set_columns(self.size.width or 80)
        super().on_mount()

    def on_resize(self, event: tevents.Resize) -> None:
        if self._set_columns(event.size.width):
            self.render_state(self.WATCHES)

    def _set_columns(self, width: int) -> bool:
        message_width = max(20, width - _FIXED)
        if message_width == self._message_width:
            return False
        self._message_width = message_width
        self.table.set_columns(
            [
                ("at", "TIME", 8),
                ("kind", "KIND", 13),
                ("host", "HOST", 6),
                ("actor", "ACTOR", 8),
                ("message", "MESSAGE", message_width),
            ]
        )
        return True

    def render_state(self, changed: Iterable[str]) -> None:
        node_name = self.state.pod.node_name if self.state.pod else ""
        rows: list[tuple[Hashable, tuple[Cell, ...]]] = []
        events = list(self.state.events)
        for index in range(len(events) - 1, -1, -1):
            event = events[index]
            cells = event_cells(event, node_name, self._message_width or 40)
            if self.matches(cells, extra=event.message):
                rows.append((event_key(index, event), cells))
        self.table.sync_rows(rows)
        summary = Text()
        summary.append(f"{len(events)} events", "bold")
        preempted = sum(1 for e in events if e.kind == "preempted")
        recovered = [e for e in events if e.kind == "recovered"]
        if preempted:
            summary.append(f"  {preempted} preemptions", "red")
        if recovered:
            mttrs = [
                float(e.data["mttr_s"])
                for e in recovered
                if isinstance(e.data.get("mttr_s"), int | float)
            ]
            summary.append(f"  {len(recovered)} recoveries", "green")
            if mttrs:
                summary.append(f", last MTTR {duration(mttrs[-1])}", "green")
        if self.filter_text:
            summary.append(f"  filter {self.filter_text!r}: {len(rows)} shown", "dim")
        self.query_one("#events-summary", Static).update(summary)
