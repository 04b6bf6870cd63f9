"""Events: the journal as a timeline, newest first, one row per incident.

A preemption and its recovery are one incident (``services.record.incidents``): its row says
what was lost, how it ended, the MTTR and the jobs resubmitted; `enter` opens it into its
rows (the loss, the steps, the Ray nodes that went down with the head). `a` shows every raw
row instead. Rows are in the order things happened (an action is dated at its start), not
in the order they were journaled.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping
from typing import Any, ClassVar

from rich.text import Text
from textual import events as tevents
from textual.app import ComposeResult
from textual.binding import BindingType
from textual.widgets import DataTable, Static

from console.screens.base import FilteredScreen
from console.screens.keys import bindings
from console.screens.state import clock_time, duration, middle_ellipsis, short_host
from console.services.model import Event, EventKind, IncidentOutcome
from console.services.record.incidents import Incident, group, in_time_order, incident_of
from console.widgets.table import Cell

KIND_STYLE: dict[str, str] = {
    EventKind.PREEMPTED: "bold red",
    EventKind.RECOVERED: "bold green",
    EventKind.RECOVERY_FAILED: "bold red",
    EventKind.STALLED: "yellow",
    EventKind.DUPLICATE_RAY_NODE: "yellow",
    EventKind.ACTION: "cyan",
    EventKind.JOB_STATE: "blue",
    EventKind.STATE_CHANGE: "",
    EventKind.INCIDENT: "bold",
}
KIND_LABEL: dict[str, str] = {
    EventKind.DUPLICATE_RAY_NODE: "dup ray node",
    EventKind.RECOVERY_FAILED: "recov failed",
    EventKind.PREEMPTION_NOTICE: "notice",
    EventKind.RECOVERY_STARTED: "recovering",
    EventKind.JOB_RESUBMITTED: "resubmitted",
    EventKind.STATE_CHANGE: "tpu state",
    EventKind.HOST_UNREACHABLE: "unreachable",
    EventKind.RAY_NODE_DOWN: "ray down",
}


def kind_label(event: Event) -> str:
    """A recovery step's row is labelled with the step it records (``recovery.head``: head)."""
    action = str(event.data.get("action", "")) if event.kind == EventKind.ACTION else ""
    if action.startswith("recovery."):
        return action.removeprefix("recovery.")
    return KIND_LABEL.get(event.kind, event.kind)


_FIXED = 10 + 15 + 8 + 10 + 4


def event_message(event: Event) -> str:
    text = event.message
    mttr = event.data.get("mttr_s")
    if isinstance(mttr, int | float) and "MTTR" not in text:
        text += f" (MTTR {duration(float(mttr))})"
    return text


HOST_WIDTH = 6  # the HOST column: a TPU VM pod's "w3" whole


def host_text(host: str, node_name: str, width: int = HOST_WIDTH) -> str:
    """The HOST cell: a pod's host without the pod's name, whole when it fits; a longer one
    (a GKE node or slice, ``phantom-gke-np-0``) ellipsised in the middle, so its start and
    the end that tells slices and nodes apart both show (not cut to ``phanto``)."""
    return middle_ellipsis(short_host(host, node_name) or "-", width)


def event_cells(event: Event, node_name: str, message_width: int) -> tuple[Cell, ...]:
    message = event_message(event)
    if len(message) > message_width:
        message = message[: message_width - 1] + "…"
    return (
        (clock_time(event.at), "dim"),
        (kind_label(event)[:13], KIND_STYLE.get(event.kind, "")),
        (host_text(event.host, node_name), ""),
        (event.actor or "-", "magenta" if event.actor == "user" else ""),
        (message, ""),
    )


def event_key(index: int, event: Event) -> Hashable:
    return f"e{event.id}" if event.id is not None else f"i{index}:{event.at}:{event.kind}"


def incident_message(data: Mapping[str, Any]) -> str:
    """The incident row's message: how it ended first (the kind and host have columns)."""
    result = str(data.get("result") or "open")
    mttr = data.get("mttr_s")
    if data.get("outcome") == IncidentOutcome.RECOVERED and isinstance(mttr, int | float):
        result = f"MTTR {duration(float(mttr))}"  # only a recovery has one: it came back
    parts = [("head: " if data.get("head") else "") + result]
    resub = data.get("resubmitted") or {}
    if resub:
        parts.append(f"{len(resub)} job{'s' if len(resub) > 1 else ''} resubmitted")
    lost = data.get("steps_lost")
    if isinstance(lost, int):
        parts.append(f"{lost} steps lost")
    parts.append(f"{data.get('rows', 0)} rows")
    return ", ".join(parts)


def incident_cells(
    incident: Incident, node_name: str, message_width: int, expanded: bool
) -> tuple[Cell, ...]:
    data = incident.summary.data
    outcome = data.get("outcome")
    style = "bold green" if outcome == IncidentOutcome.RECOVERED else "bold yellow"
    if outcome == IncidentOutcome.FAILED:
        style = "bold red"
    kind = str(data.get("trigger_kind") or EventKind.INCIDENT)
    label = ("▾ " if expanded else "▸ ") + KIND_LABEL.get(kind, kind)
    message = incident_message(data)
    if len(message) > message_width:
        message = message[: message_width - 1] + "…"
    return (
        (clock_time(incident.at), "dim"),
        (
            label[:13],
            "bold red"
            if kind in (EventKind.PREEMPTED, EventKind.HOST_LOST, EventKind.HEAD_LOST)
            else style,
        ),
        (host_text(incident.summary.host, node_name), ""),
        (incident.summary.actor or "-", ""),
        (message, style),
    )


class EventsScreen(FilteredScreen):
    MODE = "events"
    WATCHES = frozenset({"events"})
    CSS_PATH = "events.tcss"
    BINDING_GROUP_TITLE = "Events"
    FILTER_PLACEHOLDER = "filter events: kind, host, actor or text (e.g. preempted)"
    BINDINGS: ClassVar[list[BindingType]] = list(bindings("events"))

    def __init__(self) -> None:
        super().__init__()
        self._message_width = 0
        self.raw = False  # every journal row, instead of one row per incident
        self.expanded: set[str] = set()  # incident ids opened with `enter`

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
                ("host", "HOST", HOST_WIDTH),
                ("actor", "ACTOR", 8),
                ("message", "MESSAGE", message_width),
            ]
        )
        return True

    # -- actions ---------------------------------------------------------------------------------
    def action_toggle_raw(self) -> None:
        self.raw = not self.raw
        self.render_state(self.WATCHES)

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        key = str(event.row_key.value or "")
        if not key.startswith("inc:"):
            return
        iid = key.removeprefix("inc:")
        self.expanded.symmetric_difference_update({iid})
        self.render_state(self.WATCHES)

    # -- rendering -------------------------------------------------------------------------------
    def render_state(self, changed: Iterable[str]) -> None:
        node_name = self.state.pod.node_name if self.state.pod else ""
        width = self._message_width or 40
        events = list(self.state.events)
        rows: list[tuple[Hashable, tuple[Cell, ...]]] = []

        def add(index: int, event: Event, indent: bool = False) -> None:
            cells = event_cells(event, node_name, width - (2 if indent else 0))
            if indent:
                cells = (cells[0], ("  " + cells[1][0][:11], cells[1][1]), *cells[2:])
            extra = f"{event.message} {event.kind} {incident_of(event)}"
            if self.matches(cells, extra=extra):
                rows.append((event_key(index, event), cells))

        index_of = {id(e): i for i, e in enumerate(events)}
        if self.raw:
            for event in reversed(in_time_order(events)):
                add(index_of[id(event)], event)
        incidents = 0
        for entry in reversed(group(events)):
            if isinstance(entry, Event):
                if not self.raw:
                    add(index_of[id(entry)], entry)
                continue
            incidents += 1
            if self.raw:
                continue
            open_ = entry.id in self.expanded
            cells = incident_cells(entry, node_name, width, open_)
            inside = " ".join(e.message for e in entry.rows)
            if self.matches(cells, extra=f"{entry.summary.message} {entry.id} {inside}"):
                rows.append((f"inc:{entry.id}", cells))
            if open_:
                for event in entry.rows:
                    add(index_of[id(event)], event, indent=True)
        self.table.sync_rows(rows)
        self._summarize(events, incidents, len(rows))

    def _summarize(self, events: list[Event], incidents: int, shown: int) -> None:
        summary = Text()
        summary.append(f"{len(events)} events", "bold")
        if incidents:
            summary.append(f"  {incidents} incident{'s' if incidents > 1 else ''}", "bold")
        preempted = sum(1 for e in events if e.kind == EventKind.PREEMPTED)
        recovered = [e for e in events if e.kind == EventKind.RECOVERED]
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
        if self.raw:
            summary.append("  all rows", "dim")
        if self.filter_text:
            summary.append(f"  filter {self.filter_text!r}: {shown} shown", "dim")
        self.query_one("#events-summary", Static).update(summary)
