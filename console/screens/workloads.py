"""Workloads (GKE): the JobSets as `kubectl get jobset` lists them, and the pods of the
highlighted one as `kubectl get pods` does.

The upper table is one row per workload (NAME TERMINALSTATE RESTARTS COMPLETED SUSPENDED
AGE, plus PODS running/total and REASON: what keeps it from running); below 110 columns
the three JobSet status columns fold into one STATE. The lower table lists the highlighted
workload's pods (NAME READY STATUS RESTARTS AGE NODE); pods whose node is being reclaimed
(DisruptionTarget) are red, and the highlighted pod's message is the line under the table.
`enter` drills from a workload to its pods and from a pod to its log; `l` follows the log
of whichever row has the focus (a workload's is its coordinator's, across restarts). A TPU VM
pod has no workloads: the screen says so in one line, naming the cluster shown.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from typing import ClassVar

from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.binding import BindingType
from textual.widgets import DataTable, Static

from console.commands.kit.params import Kind
from console.screens.base import FilteredScreen
from console.screens.jobs import STATUS_STYLE
from console.screens.keys import bindings
from console.screens.state import ago
from console.services.capabilities import Capability
from console.services.model import JobStatus, PodSnapshot, PodStatus, WorkloadStatus
from console.widgets.table import Cell, PhantomTable

WIDE = 110  # from this many columns on, every `kubectl get jobset` column has room
_NAME_W = (16, 28)  # narrow, wide: xpk's pod names are the workload's plus ~15 characters
_POD_W = (26, 42)
# DataTable pads every cell by one on each side; plus the vertical scrollbar.
_PAD = 2
_SCROLLBAR = 2

POD_STYLE = {
    "Running": "green",
    "Pending": "yellow",
    "ContainerCreating": "yellow",
    "PodInitializing": "yellow",
    "Completed": "dim",
    "Terminating": "magenta",
}


def fit(text: str, width: int, *, keep_end: bool = False) -> str:
    """``text`` cut to ``width`` cells with an ellipsis (at the start when the end tells
    rows apart, as a GKE node name's does)."""
    if len(text) <= width:
        return text
    if width <= 1:
        return text[:width]
    return "…" + text[-(width - 1) :] if keep_end else text[: width - 1] + "…"


def reason(w: WorkloadStatus) -> str:
    """Why a workload is not simply running, most pressing first ("" when nothing is amiss)."""
    parts = []
    if w.failed_reason:
        parts.append(w.failed_reason)
    if w.head_failed:
        parts.append(f"head failed: {w.head_failed}")
    if w.disrupted:
        parts.append(f"{w.disrupted} disrupted")
    if w.unschedulable:
        why = f": {w.scheduler_message}" if w.scheduler_message else ""
        parts.append(f"{w.unschedulable} unschedulable{why}")
    if w.worker_replacements:
        parts.append(f"{w.worker_replacements} workers replaced")
    if not parts and w.message:
        parts.append(w.message)
    return "; ".join(parts)


def workload_cells(
    w: WorkloadStatus, now: float, *, wide: bool, reason_width: int
) -> tuple[Cell, ...]:
    style = STATUS_STYLE.get(w.status, "")
    name: Cell = (fit(w.name, _NAME_W[wide]), f"bold {style}".strip())
    why = reason(w)
    pods_ok = w.pods_total > 0 and w.pods_running == w.pods_total
    pods: Cell = (f"{w.pods_running}/{w.pods_total}", "green" if pods_ok else "yellow")
    tail = (
        pods,
        (ago(now, w.created_at), ""),
        (fit(why, reason_width), "bold red" if w.disrupted or w.failed_reason else "yellow"),
    )
    restarts: Cell = (str(w.restarts), "yellow" if w.restarts else "")
    if not wide:
        state = w.terminal_state or ("Suspended" if w.suspended else w.status)
        return (name, (state, style), restarts, *tail)
    terminal_style = "bold red" if w.terminal_state == "Failed" else "green"
    return (
        name,
        (w.terminal_state, terminal_style),
        restarts,
        (w.completed, ""),
        ("true" if w.suspended else "false" if w.kind == "JobSet" else "", ""),
        *tail,
    )


def pod_cells(p: PodStatus, now: float, node_width: int, *, wide: bool) -> tuple[Cell, ...]:
    failed = p.phase == "Failed" or p.status.startswith(("Error", "ExitCode", "CrashLoop"))
    status_style = "bold red" if failed else POD_STYLE.get(p.status, "yellow")
    row = "bold red" if p.disrupted else ""  # the node under it is going away
    return (
        (fit(p.name, _POD_W[wide]), row or "bold"),
        (p.ready, row),
        (p.status, row or status_style),
        (str(p.restarts), row or ("yellow" if p.restarts else "")),
        (ago(now, p.created_at), row),
        (fit(p.node or "<none>", node_width, keep_end=True), row or "dim"),
    )


def pods_of(pod: PodSnapshot | None, workload: str) -> list[PodStatus]:
    """The workload's pods in slice/worker order (the coordinator first), newest attempt
    first within a slot."""
    if pod is None or not workload:
        return []
    mine = [p for p in pod.pods if p.workload == workload]
    return sorted(
        mine,
        key=lambda p: (p.replicated_job, p.job_index, p.completion_index, -p.restart_attempt),
    )


def slice_of(pod: PodSnapshot | None, p: PodStatus) -> str:
    """The node pool (one TPU slice) a pod runs on ("" when not scheduled or unknown)."""
    if pod is None or not p.node:
        return ""
    return next((h.pool for h in pod.hosts if h.name == p.node and h.pool), "")


class WorkloadsScreen(FilteredScreen):
    MODE = "workloads"
    WATCHES = frozenset({"pod", "tick"})
    CSS_PATH = "workloads.tcss"
    BINDING_GROUP_TITLE = "Workloads (GKE)"
    FILTER_PLACEHOLDER = "filter workloads: text in any column (grpo, Failed, disrupted)"
    BINDINGS: ClassVar[list[BindingType]] = list(bindings("workloads"))

    def __init__(self) -> None:
        super().__init__()
        self._width = 0
        self._wide = False
        self._reason_width = 20
        self._node_width = 20

    def compose_body(self) -> ComposeResult:
        yield Static(id="workloads-summary")
        yield self.make_filter_input()
        yield self.make_table("workloads")
        yield Static(id="pods-title")
        yield PhantomTable(id="pods")
        yield Static(id="pod-detail")

    @property
    def pods_table(self) -> PhantomTable:
        return self.query_one("#pods", PhantomTable)

    @property
    def gke(self) -> bool:
        """This cluster runs workloads (what its backend declares)."""
        return Capability.WORKLOADS in self.phantom.services.capabilities

    def on_mount(self) -> None:
        self._set_columns(self.size.width or 80)
        super().on_mount()

    def on_resize(self, event: events.Resize) -> None:
        if self._set_columns(event.size.width):
            self.render_state(self.WATCHES)

    def _set_columns(self, width: int) -> bool:
        if width == self._width:
            return False
        self._width = width
        self._wide = width >= WIDE
        if self._wide:
            fixed = [
                ("name", "NAME", _NAME_W[True]),
                ("terminal", "TERMINALSTATE", 13),
                ("restarts", "RESTARTS", 8),
                ("completed", "COMPLETED", 9),
                ("suspended", "SUSPENDED", 9),
            ]
        else:
            fixed = [
                ("name", "NAME", _NAME_W[False]),
                ("state", "STATE", 9),
                ("restarts", "RESTARTS", 8),
            ]
        fixed += [("pods", "PODS", 5), ("age", "AGE", 5)]
        used = sum(w + _PAD for _, _, w in fixed) + _PAD + _SCROLLBAR
        self._reason_width = max(12, width - used)
        self.table.set_columns([*fixed, ("reason", "REASON", self._reason_width)])
        pod_fixed = [
            ("name", "NAME", _POD_W[self._wide]),
            ("ready", "READY", 5),
            ("status", "STATUS", 12),
            ("restarts", "RESTARTS", 8),
            ("age", "AGE", 5),
        ]
        used = sum(w + _PAD for _, _, w in pod_fixed) + _PAD + _SCROLLBAR
        self._node_width = max(12, width - used)
        self.pods_table.set_columns([*pod_fixed, ("node", "NODE", self._node_width)])
        return True

    # rendering -----------------------------------------------------------------------------

    def render_state(self, changed: Iterable[str]) -> None:
        pod = self.state.pod
        now = self.phantom.clock()
        workloads = sorted(pod.workloads, key=lambda w: w.name) if pod else []
        rows: list[tuple[Hashable, tuple[Cell, ...]]] = []
        for w in workloads:
            cells = workload_cells(w, now, wide=self._wide, reason_width=self._reason_width)
            if self.matches(cells, extra=reason(w)):
                rows.append((w.name, cells))
        self.table.sync_rows(rows)
        self.query_one("#workloads-summary", Static).update(self._summary(workloads, len(rows)))
        self._render_pods()

    def _summary(self, workloads: Sequence[WorkloadStatus], shown: int) -> Text:
        out = Text()
        if not self.gke:
            # This cluster's kind, not the console's: a fleet drives GKE clusters beside it.
            cluster = self.phantom.services.settings.cluster
            kind = f"a {cluster.world}" if cluster.world else "not a GKE cluster"
            out.append(
                f"Workloads are GKE JobSets; {cluster.name} is {kind} ({cluster.provider!r}).",
                "dim",
            )
            return out
        out.append(f"{len(workloads)} workloads", "bold")
        running = sum(1 for w in workloads if w.status is JobStatus.RUNNING)
        out.append(f"  {running} running", "green" if running else "dim")
        for label, count, style in (
            ("failed", sum(1 for w in workloads if w.status is JobStatus.FAILED), "bold red"),
            ("disrupted pods", sum(w.disrupted for w in workloads), "bold red"),
            ("unschedulable pods", sum(w.unschedulable for w in workloads), "yellow"),
        ):
            if count:
                out.append(f"  {count} {label}", style)
        if self.filter_text:
            out.append(f"  filter {self.filter_text!r}: {shown} shown", "cyan")
        elif not workloads:
            out.append("  — s creates one (or `workload create NAME` in a script)", "dim")
        return out

    def _highlighted_workload(self) -> str:
        key = self.table.highlighted_key()
        return str(key) if key is not None else ""

    def _render_pods(self) -> None:
        pod = self.state.pod
        name = self._highlighted_workload()
        pods = pods_of(pod, name)
        now = self.phantom.clock()
        self.pods_table.sync_rows(
            [(p.name, pod_cells(p, now, self._node_width, wide=self._wide)) for p in pods]
        )
        title = Text()
        if name:
            running = sum(1 for p in pods if p.phase == "Running")
            title.append(f"pods of {name}", "bold")
            title.append(f"  {running}/{len(pods)} running", "green" if running else "dim")
            disrupted = sum(1 for p in pods if p.disrupted)
            if disrupted:
                title.append(f"  {disrupted} disrupted (node shutting down)", "bold red")
        self.query_one("#pods-title", Static).update(title)
        self._render_pod_detail()

    def _highlighted_pod(self) -> PodStatus | None:
        key = self.pods_table.highlighted_key()
        pod = self.state.pod
        if key is None or pod is None:
            return None
        return next((p for p in pod.pods if p.name == key), None)

    def _render_pod_detail(self) -> None:
        p = self._highlighted_pod()
        detail = self.query_one("#pod-detail", Static)
        if p is None or not p.message:
            detail.update("")
            detail.display = False
            return
        detail.display = True
        detail.update(
            Text.assemble((f"{p.name}: ", "bold"), (p.message, "red" if p.disrupted else "yellow"))
        )

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        if event.data_table is self.pods_table:
            self._render_pod_detail()
        else:
            self._render_pods()

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        key = event.row_key.value
        if key is None:
            return
        if event.data_table is self.pods_table:
            self.phantom.open_log(str(key))
        elif self.pods_table.row_count:
            self.pods_table.focus()  # drill down: the workload's pods

    # actions -------------------------------------------------------------------------------

    def action_logs(self) -> None:
        if self.pods_table.has_focus:
            key = self.pods_table.highlighted_key()
        else:
            key = self.table.highlighted_key()
        if key is None:
            self.notify("Nothing highlighted.", severity="warning")
            return
        self.phantom.open_log(str(key))

    def selection(self) -> dict[Kind, str]:
        """What a command run here acts on: the highlighted workload, and the slice of the
        highlighted pod (its node pool)."""
        out: dict[Kind, str] = {}
        name = self._highlighted_workload()
        if name:
            out[Kind.NAME] = name
        p = self._highlighted_pod()
        pool = slice_of(self.state.pod, p) if p is not None else ""
        if pool:
            out[Kind.SLICE] = pool
        return out
