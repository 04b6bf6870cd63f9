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
GKE_TAB = ("6", "Workloads", "workloads")  # shown on GKE (and on the screen itself)
# Shown on its own screen only, so the other screens' tab line (and 80 columns) stay as
# they were; key 7, the footer and the palette lead to it.
LEDGER_TAB = ("7", "Ledger", "ledger")


def health_text(pod: PodSnapshot | None, recovery: RecoveryStatus, *, ray: bool = True) -> Text:
    """Compact: `3/4 ready  ray 3/4  ⚠3  ⟳` (details are on the overview). ``ray``: the
    cluster runs the console's own Ray (its backend declares ``Capability.RAY``); without
    it the pods are what runs, and are counted instead."""
    out = Text()
    if pod is None or not pod.hosts:
        out.append("waiting for first poll", "dim")
        return out
    total = len(pod.hosts)
    ready = pod.ready_hosts
    out.append(f"{ready}/{total} ready", "bold green" if ready == total else "bold red")
    if not ray:
        running = sum(1 for p in pod.pods if p.phase == "Running")
        pods = len(pod.pods)
        out.append(f"  pods {running}/{pods}", "green" if running == pods else "yellow")
    else:
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

    def __init__(
        self,
        current: str,
        *,
        gke: bool = False,
        id: str | None = None,  # noqa: A002 (Textual API)
    ) -> None:
        super().__init__(id=id)
        self.current = current
        self.tabs = (*TABS, GKE_TAB) if gke or current == GKE_TAB[2] else tuple(TABS)
        if current == LEDGER_TAB[2]:
            self.tabs = (*self.tabs, LEDGER_TAB)
        self._health = Text()

    def set_health(self, health: Text) -> None:
        if health != self._health:
            self._health = health
            self.update(self._compose_line(), layout=False)

    def on_mount(self) -> None:
        self.update(self._compose_line(), layout=False)

    def on_resize(self) -> None:
        self.update(self._compose_line(), layout=False)

    def _tabs(self, *, compact: bool) -> Text:
        tabs = Text()
        for key, label, mode in self.tabs:
            current = mode == self.current
            tabs.append(" ")
            # Compact (too narrow for every label): keys only, the current tab named.
            tabs.append(
                f"{key} {label}" if current or not compact else key,
                "reverse bold" if current else "",
            )
        return tabs

    def _compose_line(self) -> Text:
        width = self.size.width or 80
        tabs = self._tabs(compact=False)
        if tabs.cell_len + 2 + self._health.cell_len + 1 > width:
            tabs = self._tabs(compact=True)
        gap = max(2, width - tabs.cell_len - self._health.cell_len - 1)
        line = tabs + Text(" " * gap) + self._health
        line.truncate(width)
        return line
