"""Recovery: the watchdog's loop, step by step, with per-host progress and results.

detect -> recreate -> wait READY -> bootstrap -> Ray head -> tunnel -> relaunch -> workers
-> verify metrics. `r` runs it now (after a confirmation: it restarts Ray), `a` toggles
whether the watchdog runs it on its own.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import BindingType
from textual.containers import Horizontal, VerticalScroll
from textual.widgets import ProgressBar, Static

from console.screens.base import PhantomScreen
from console.screens.keys import bindings
from console.screens.state import clock_time, duration, short_host
from console.services.model import RecoveryStatus, RecoveryStep, StepState

STEP_GLYPH = {
    StepState.PENDING: ("○", "dim"),
    StepState.RUNNING: ("◐", "bold yellow"),
    StepState.OK: ("✓", "bold green"),
    StepState.FAILED: ("✗", "bold red"),
    StepState.SKIPPED: ("–", "dim"),
}
HOST_GLYPH = {
    "ok": ("✓", "green"),
    "failed": ("✗", "bold red"),
    "running": ("…", "yellow"),
    "pending": ("·", "dim"),
    "skipped": ("–", "dim"),
}
MAX_HOST_GLYPHS = 8
DONE = ("ok", "failed", "skipped")


def host_progress(step: RecoveryStep) -> tuple[int, int]:
    """(finished, total) units for the step's bar: hosts, or the step itself."""
    if step.hosts:
        return sum(1 for s in step.hosts.values() if s in DONE), len(step.hosts)
    return (1 if step.state in DONE else 0), 1


def hosts_text(hosts: Mapping[str, str], node_name: str) -> Text:
    out = Text()
    if not hosts:
        return out
    if len(hosts) <= MAX_HOST_GLYPHS:
        for name, state in hosts.items():
            glyph, style = HOST_GLYPH.get(state, ("?", ""))
            out.append(f"{short_host(name, node_name)}{glyph} ", style)
        return out
    counts: dict[str, int] = {}
    for state in hosts.values():
        counts[state] = counts.get(state, 0) + 1
    for state in ("ok", "running", "pending", "failed", "skipped"):
        if counts.get(state):
            out.append(f"{state} {counts[state]}  ", HOST_GLYPH[state][1])
    failed = [short_host(n, node_name) for n, s in hosts.items() if s == "failed"]
    if failed:
        more = f" +{len(failed) - 4}" if len(failed) > 4 else ""
        out.append("failed: " + " ".join(failed[:4]) + more, "red")
    return out


def step_detail(step: RecoveryStep, now: float, node_name: str) -> Text:
    done, total = host_progress(step)
    out = Text()
    if step.hosts:
        out.append(f"{done}/{total} ", "bold")
    elapsed = (
        now - step.started_at
        if step.state == StepState.RUNNING and step.started_at
        else step.elapsed_s
    )
    if step.state != StepState.PENDING:
        out.append(f"{duration(elapsed):>6} ")
    if step.attempts > 1:
        out.append(f"try {step.attempts} ", "yellow")
    out.append_text(hosts_text(step.hosts, node_name))
    if step.message:
        out.append(step.message, "red" if step.state == StepState.FAILED else "dim")
    return out


def recovery_summary(status: RecoveryStatus, now: float) -> Text:
    out = Text()
    out.append("Watchdog ")
    out.append("auto" if status.auto else "manual", "bold green" if status.auto else "bold yellow")
    out.append("  ")
    if status.active:
        out.append("RECOVERING", "bold magenta")
        if status.started_at is not None:
            out.append(f" for {duration(now - status.started_at)}")
    elif status.outcome is not None:
        out.append("last run: ")
        out.append(status.result_text, "bold green" if status.ok else "bold red")
        if status.started_at is not None:
            out.append(f" at {clock_time(status.started_at)}", "dim")
    else:
        out.append("idle, never ran", "dim")
    if status.mttr_s is not None:
        out.append(f"  MTTR {duration(status.mttr_s)}", "bold")
    if status.detect_s is not None:
        out.append(f" (detect {duration(status.detect_s)})", "dim")
    if status.trigger:
        out.append(f"\ntrigger: {status.trigger}", "dim")
    return out


class StepRow(Horizontal):
    """One step: glyph and name, a progress bar over its hosts, and the details."""

    def __init__(self, step_name: str) -> None:
        super().__init__(classes="step")
        self.step_name = step_name

    def compose(self) -> ComposeResult:
        yield Static(classes="step-name")
        yield ProgressBar(total=1, show_eta=False, show_percentage=False, classes="step-bar")
        yield Static(classes="step-detail")

    def show(self, step: RecoveryStep, now: float, node_name: str) -> None:
        glyph, style = STEP_GLYPH.get(step.state, ("?", ""))  # type: ignore[call-overload]
        name = Text.assemble(
            (glyph + " ", style), (step.name, style if step.state != StepState.PENDING else "dim")
        )
        self.query_one(".step-name", Static).update(name)
        done, total = host_progress(step)
        self.query_one(ProgressBar).update(total=total, progress=done)
        self.query_one(".step-detail", Static).update(step_detail(step, now, node_name))
        self.set_class(step.state == StepState.FAILED, "-failed")
        self.set_class(step.state == StepState.RUNNING, "-running")


class RecoveryScreen(PhantomScreen):
    MODE = "recovery"
    WATCHES = frozenset({"recovery", "tick"})
    CSS_PATH = "recovery.tcss"
    BINDING_GROUP_TITLE = "Recovery"
    BINDINGS: ClassVar[list[BindingType]] = list(bindings("recovery"))

    def __init__(self) -> None:
        super().__init__()
        self._step_names: list[str] | None = None

    def compose_body(self) -> ComposeResult:
        yield Static(id="recovery-summary")
        yield VerticalScroll(id="steps", can_focus=True)

    def render_state(self, changed: Iterable[str]) -> None:
        status = self.state.recovery
        now = self.phantom.clock()
        self.query_one("#recovery-summary", Static).update(recovery_summary(status, now))
        container = self.query_one("#steps", VerticalScroll)
        names = [step.name for step in status.steps]
        if names != self._step_names:
            self._step_names = names
            container.remove_children()
            rows = [StepRow(name) for name in names]
            if rows:
                container.mount_all(rows)
            else:
                container.mount(
                    Static("No recovery has run yet. Press r to run one now.", classes="empty")
                )
            self.call_after_refresh(self._fill_rows)
            return
        self._fill_rows()

    def _fill_rows(self) -> None:
        status = self.state.recovery
        now = self.phantom.clock()
        node_name = self.state.pod.node_name if self.state.pod else ""
        rows = {row.step_name: row for row in self.query(StepRow)}
        for step in status.steps:
            row = rows.get(step.name)
            if row is not None and row.is_mounted:
                row.show(step, now, node_name)
