"""Jobs: every Ray job with status, entrypoint and start time; `enter` opens its log.

The ENV column answers the seed's checklist question "did the job start with the expected
env vars?": ``!`` when the job's runtime env lacks what the console gives its jobs
(``phantom status`` names what is missing). ERR/PRE: how the job and the jobs it replaced
ended, errors in a row / preemptions: recovery stops resubmitting a job whose errors reach
``recovery.max_error_retries``; preemptions never count. Under the summary, the sweep of the
highlighted job (else of the newest sweep job): its id, the one a recovered cluster relaunches
the agents with, and on the W&B backend its page on the W&B server; no line without one."""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from typing import ClassVar

from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.binding import BindingType
from textual.widgets import DataTable, Static

from console.commands.kit.params import Kind
from console.screens.base import FilteredScreen
from console.screens.keys import bindings
from console.screens.state import ago
from console.services.model import JobInfo, JobStatus
from console.widgets.table import Cell

STATUS_STYLE = {
    JobStatus.PENDING: "yellow",
    JobStatus.RUNNING: "bold green",
    JobStatus.SUCCEEDED: "green",
    JobStatus.STOPPED: "dim",
    JobStatus.FAILED: "bold red",
    JobStatus.PREEMPTED: "yellow",  # checkpointed on the notice: recovery resumes it
    JobStatus.LOST: "yellow",
}
_FIXED = 28 + 11 + 9 + 5 + 9 + 4  # id, status, err/pre, env, started, padding/scrollbar


def job_cells(job: JobInfo, now: float, entry_width: int) -> tuple[Cell, ...]:
    entry = (
        job.entrypoint
        if len(job.entrypoint) <= entry_width
        else job.entrypoint[: entry_width - 1] + "…"
    )
    env: Cell = ("!", "bold yellow") if job.env_problems else ("ok" if job.env else "", "dim")
    return (
        (job.job_id, "bold"),
        (job.status, STATUS_STYLE.get(job.status, "")),
        retries_cell(job),
        env,
        (ago(now, job.start_time), ""),
        (entry, ""),
    )


def retries_cell(job: JobInfo) -> Cell:
    """ERR/PRE: errors in a row (red: the retry budget is being spent) / preemptions."""
    text = f"{job.errors_in_row}/{job.preemptions}"
    return (text, "bold red" if job.errors_in_row else ("yellow" if job.preemptions else "dim"))


def sorted_jobs(jobs: Iterable[JobInfo]) -> list[JobInfo]:
    """Newest first; jobs that have not started yet on top."""
    return sorted(jobs, key=lambda j: (j.start_time is not None, -(j.start_time or 0.0), j.job_id))


class JobsScreen(FilteredScreen):
    MODE = "jobs"
    WATCHES = frozenset({"jobs", "tick"})
    CSS_PATH = "jobs.tcss"
    BINDING_GROUP_TITLE = "Jobs"
    FILTER_PLACEHOLDER = "filter jobs: id, status or entrypoint"
    BINDINGS: ClassVar[list[BindingType]] = list(bindings("jobs"))

    def __init__(self) -> None:
        super().__init__()
        self._entry_width = 0

    def compose_body(self) -> ComposeResult:
        yield Static(id="jobs-summary")
        yield Static(id="jobs-sweep")
        yield self.make_filter_input()
        yield self.make_table("jobs")

    def on_mount(self) -> None:
        self._set_columns(self.size.width or 80)
        super().on_mount()

    def on_screen_resume(self) -> None:
        super().on_screen_resume()
        self.phantom.refresh_jobs()

    def on_resize(self, event: events.Resize) -> None:
        if self._set_columns(event.size.width):
            self.render_state({"jobs"})

    def _set_columns(self, width: int) -> bool:
        entry_width = max(20, width - _FIXED)
        if entry_width == self._entry_width:
            return False
        self._entry_width = entry_width
        self.table.set_columns(
            [
                ("id", "JOB", 26),
                ("status", "STATUS", 9),
                ("retries", "ERR/PRE", 7),
                ("env", "ENV", 3),
                ("start", "STARTED", 7),
                ("entry", "ENTRYPOINT", entry_width),
            ]
        )
        return True

    def render_state(self, changed: Iterable[str]) -> None:
        now = self.phantom.clock()
        jobs = sorted_jobs(self.state.jobs.values())
        rows: list[tuple[Hashable, tuple[Cell, ...]]] = []
        for job in jobs:
            cells = job_cells(job, now, self._entry_width or 40)
            if self.matches(cells, extra=job.entrypoint):
                rows.append((job.job_id, cells))
        self.table.sync_rows(rows)
        running = sum(1 for j in jobs if j.status is JobStatus.RUNNING)
        summary = Text()
        summary.append(f"{len(jobs)} jobs", "bold")
        summary.append(f"  {running} running", "green" if running else "dim")
        failed = sum(1 for j in jobs if j.status is JobStatus.FAILED)
        if failed:
            summary.append(f"  {failed} failed", "red")
        preempted = sum(1 for j in jobs if j.status is JobStatus.PREEMPTED)
        if preempted:
            summary.append(f"  {preempted} preempted (resumable)", "yellow")
        odd_env = sum(1 for j in jobs if j.env_problems)
        if odd_env:
            summary.append(f"  {odd_env} without the expected env (ENV !)", "yellow")
        if self.filter_text:
            summary.append(f"  filter {self.filter_text!r}: {len(rows)} shown", "dim")
        if self.state.jobs_note:
            summary.append(f"  {self.state.jobs_note}", "yellow")
        elif not jobs:
            summary.append("  — press s to submit one", "dim")
        self.query_one("#jobs-summary", Static).update(summary)
        self._render_sweep()

    def _render_sweep(self) -> None:
        line = self.query_one("#jobs-sweep", Static)
        key = self.table.highlighted_key()
        job = self.state.jobs.get(str(key)) if key is not None else None
        if job is None or not job.sweep_id:
            sweeps = [j for j in sorted_jobs(self.state.jobs.values()) if j.sweep_id]
            job = sweeps[0] if sweeps else None
        line.display = job is not None
        if job is None:
            return
        text = Text()
        text.append("sweep ", "dim")
        text.append(job.sweep_id, "bold")
        if job.sweep_url:
            text.append("  W&B ", "dim")
            text.append(job.sweep_url, "underline")
        line.update(text)

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        self._render_sweep()

    # actions -------------------------------------------------------------------------------

    def selection(self) -> dict[Kind, str]:
        """What a command run here acts on: the highlighted job."""
        key = self.table.highlighted_key()
        return {} if key is None else {Kind.JOB: str(key)}

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        if event.row_key.value is not None:
            self.phantom.open_log(str(event.row_key.value))
