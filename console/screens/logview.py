"""One job's log: follows live, pauses, searches, jumps to the end, says when the stream died.

Lines come from the app's per-job ring buffer, so the view is bounded (the ring's size)
however long the job prints. While paused the view is frozen and counts what it missed;
resuming appends the missed lines (or reloads the ring if they fell off it).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import ClassVar

from rich.highlighter import Highlighter
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import BindingType
from textual.widgets import Input, Log, Static

from console.screens.base import PhantomScreen
from console.screens.jobs import STATUS_STYLE
from console.screens.keys import bindings
from console.screens.state import clock_time
from console.widgets.job_log import JobLog


class SearchHighlighter(Highlighter):
    """Marks every occurrence of the search term (case-insensitive)."""

    def __init__(self) -> None:
        self.needle = ""

    def highlight(self, text: Text) -> None:
        if self.needle:
            text.highlight_words([self.needle], "bold black on yellow", case_sensitive=False)


class LogViewScreen(PhantomScreen):
    MODE = "jobs"
    WATCHES = frozenset({"logs", "jobs"})
    CSS_PATH = "logview.tcss"
    BINDING_GROUP_TITLE = "Job log"
    BINDINGS: ClassVar[list[BindingType]] = list(bindings("log"))

    def __init__(self, job_id: str) -> None:
        super().__init__()
        self.job_id = job_id
        self.following = True
        self._shown = 0  # ring sequence number the Log widget has caught up to
        self._matches: list[int] = []
        self._match_index = -1
        self._highlighter = SearchHighlighter()

    def compose_body(self) -> ComposeResult:
        yield Static(id="log-title")
        yield Static(id="banner")
        log = JobLog(max_lines=self.state.log_ring, highlight=True, id="log")
        log.highlighter = self._highlighter
        yield log
        box = Input(placeholder="search (enter: find, esc: close)", id="search", compact=True)
        box.display = False
        yield box

    def on_mount(self) -> None:
        self.query_one(Input).cursor_blink = self.phantom.settings.cursor_blink
        super().on_mount()
        self.log_widget.focus()

    @property
    def log_widget(self) -> Log:
        return self.query_one("#log", Log)

    # rendering -----------------------------------------------------------------------------

    def render_state(self, changed: Iterable[str]) -> None:
        changed = set(changed)
        if "logs" in changed and self.following:
            self._catch_up()
        self._render_title()
        self._render_banner()

    def _catch_up(self) -> None:
        ring = self.state.logs.get(self.job_id)
        if ring is None:
            return
        lines, truncated = ring.since(self._shown)
        log = self.log_widget
        if truncated:
            log.clear()
        if lines:
            log.write_lines(lines, scroll_end=self.following)
        self._shown = ring.total

    def _render_title(self) -> None:
        job = self.state.jobs.get(self.job_id)
        ring = self.state.logs.get(self.job_id)
        title = Text()
        title.append("log ", "dim")
        title.append(self.job_id, "bold")
        if job is not None:
            title.append("  ")
            title.append(job.status, STATUS_STYLE.get(job.status, ""))
        total = ring.total if ring else 0
        title.append(f"  {total:,} lines", "dim")
        if self.following:
            title.append("  following", "green")
        else:
            missed = total - self._shown
            title.append("  paused", "bold yellow")
            if missed:
                title.append(f" (+{missed:,} new)", "yellow")
        if self._highlighter.needle:
            where = f"{self._match_index + 1}/{len(self._matches)}" if self._matches else "0"
            title.append(f"  /{self._highlighter.needle} {where} (n/N)", "cyan")
        self.query_one("#log-title", Static).update(title, layout=False)  # always one line

    def _render_banner(self) -> None:
        banner = self.query_one("#banner", Static)
        closed = self.state.closed.get(self.job_id)
        job = self.state.jobs.get(self.job_id)
        status = job.status if job is not None else (closed.job_status if closed else None)
        if closed is None:
            banner.display = False
            return
        banner.display = True
        if closed.early and status is not None and status.active:
            banner.set_class(True, "-early")
            banner.update(
                Text.assemble(
                    ("⚠ Log stream closed early ", "bold"),
                    f"at {clock_time(closed.at)} but the job is still {status}. ",
                    "Lines after that are not shown; ctrl+r reconnects.",
                )
            )
        else:
            banner.set_class(False, "-early")
            banner.update(f"Log stream ended at {clock_time(closed.at)}: job {status}.")

    # actions -------------------------------------------------------------------------------

    def action_back(self) -> None:
        box = self.query_one("#search", Input)
        if box.display:
            box.display = False
            self.log_widget.focus()
            return
        self.phantom.stop_follow(self.job_id)
        self.dismiss()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        # One key, two meanings: the footer shows whichever applies now.
        if action == "pause":
            return self.following
        if action == "follow":
            return not self.following
        return True

    def _set_following(self, following: bool) -> None:
        if following != self.following:
            self.following = following
            self.refresh_bindings()

    def action_pause(self) -> None:
        self._set_following(False)
        self._render_title()

    def action_follow(self) -> None:
        self.action_jump_end()

    def action_jump_end(self) -> None:
        self._set_following(True)
        self._catch_up()
        self.log_widget.scroll_end(animate=False)
        self._render_title()

    def action_reconnect(self) -> None:
        self.log_widget.clear()
        self._shown = 0
        self.phantom.open_log_stream(self.job_id)

    def action_search(self) -> None:
        box = self.query_one("#search", Input)
        box.display = True
        box.focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id != "search":
            return
        needle = event.value.strip()
        event.input.display = False
        self.log_widget.focus()
        self.search(needle)

    def search(self, needle: str) -> None:
        """Pause, mark every match, and jump to the first one at/after the top of the view."""
        self._highlighter.needle = needle
        log = self.log_widget
        log.notify_style_update()  # drops cached lines so the new marks show
        log.refresh()
        if not needle:
            self._matches = []
            self._render_title()
            return
        self._set_following(False)
        lower = needle.lower()
        self._matches = [i for i, line in enumerate(log.lines) if lower in line.lower()]
        top = int(log.scroll_y)
        after = [k for k, y in enumerate(self._matches) if y >= top]
        self._match_index = after[0] if after else (0 if self._matches else -1)
        self._show_match()

    def action_next_match(self) -> None:
        if self._matches:
            self._match_index = (self._match_index + 1) % len(self._matches)
            self._show_match()

    def action_prev_match(self) -> None:
        if self._matches:
            self._match_index = (self._match_index - 1) % len(self._matches)
            self._show_match()

    def _show_match(self) -> None:
        if self._matches and self._match_index >= 0:
            self._set_following(False)
            y = self._matches[self._match_index]
            log = self.log_widget
            log.scroll_to(y=max(0, y - log.size.height // 2), animate=False)
        elif self._highlighter.needle:
            self.notify(f"No match for {self._highlighter.needle!r}.", severity="warning")
        self._render_title()
