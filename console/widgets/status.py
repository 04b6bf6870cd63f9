"""The top line of every screen: numbered tabs and the pod's health at a glance."""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text
from textual.widgets import Static

from console.services.model import PodSnapshot, RecoveryStatus

TABS: Sequence[tuple[str, str, str]] = (
    ("1", "Overview", "overview"),
    ("2", "Jobs", "jobs"),
    ("3", "Cadence", "cadence"),
    ("4", "Events", "events"),
    ("5", "Recovery", "recovery"),
)


def health_text(pod: PodSnapshot | None, recovery: RecoveryStatus) -> Text:
    """Compact: `3/4 ready  ray 3/4  ⚠3  ⟳` (details are on the overview)."""
    out = Text()
    if pod is None or not pod.hosts:
        out.append("waiting for first poll", "dim")
        return out
    total = len(pod.hosts)
    ready = pod.ready_hosts
    out.append(f"{ready}/{total} ready", "bold green" if ready == total else "bold red")
    alive = pod.ray_alive
    out.append(f"  ray {alive}/{total}", "green" if alive == total else "yellow")
    if pod.warnings:
        out.append(f"  ⚠{len(pod.warnings)}", "bold yellow")
    if recovery.active:
        out.append("  ⟳", "bold magenta")
    elif not recovery.auto:
        out.append("  manual", "dim")
    return out


class StatusBar(Static):
    """Tabs on the left (the current one inverted), health on the right."""

    DEFAULT_CSS = """
    StatusBar {
        height: 1;
        width: 1fr;
        background: $panel;
    }
    """

    def __init__(self, current: str, *, id: str | None = None) -> None:  # noqa: A002 (Textual API)
        super().__init__(id=id)
        self.current = current
        self._health = Text()

    def set_health(self, health: Text) -> None:
        if health != self._health:
            self._health = health
            self.update(self._compose_line(), layout=False)

    def on_mount(self) -> None:
        self.update(self._compose_line(), layout=False)

    def on_resize(self) -> None:
        self.update(self._compose_line(), layout=False)

    def _compose_line(self) -> Text:
        tabs = Text()
        for key, label, mode in TABS:
            style = "reverse bold" if mode == self.current else ""
            tabs.append(" ")
            tabs.append(f"{key} {label}", style)
        width = self.size.width or 80
        gap = max(2, width - tabs.cell_len - self._health.cell_len - 1)
        line = tabs + Text(" " * gap) + self._health
        line.truncate(width)
        return line
