"""The top line of every screen: the cluster and its world, the numbered tabs of the screens
it has, and its health at a glance."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from rich.text import Text
from textual.widgets import Static

from console.services.model import PodSnapshot, RecoveryStatus

# Every main screen's tab, in the tab line's order. A cluster shows those it has (its
# capabilities: ``screens.keys.screens_of``), the fleet's only with a fleet of several.
TABS: Sequence[tuple[str, str, str]] = (
    ("0", "Fleet", "fleet"),
    ("1", "Overview", "overview"),
    ("2", "Jobs", "jobs"),
    ("3", "Cadence", "cadence"),
    ("4", "Events", "events"),
    ("5", "Recovery", "recovery"),
    ("6", "Workloads", "workloads"),
    ("7", "Ledger", "ledger"),
)
# Shown on its own screen only, so the other screens' tab line (and 80 columns) stay as
# they were; key 7, the footer and the palette lead to it.
OWN_SCREEN_ONLY = frozenset({"ledger"})


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
    """The cluster and its tabs on the left (the current one inverted), health on the right."""

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
        screens: Iterable[str] = (),
        cluster: str = "",
        world: str = "",
        id: str | None = None,  # noqa: A002 (Textual API)
    ) -> None:
        """``screens``: the modes the cluster has (a tab each, in ``TABS``' order; the
        current one always); ``cluster`` and ``world``: its name and kind, on the left."""
        super().__init__(id=id)
        self.current = current
        has = set(screens) - OWN_SCREEN_ONLY | {current}
        self.tabs = tuple(t for t in TABS if t[2] in has)
        self.cluster = cluster
        self.world = world
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

    def _where(self, *, world: bool, width: int) -> Text:
        """The cluster's name (bold) and, where it fits, its world (dim)."""
        out = Text()
        if not self.cluster:
            return out
        out.append(" ")
        name = Text(self.cluster, "bold")
        name.truncate(max(4, width), overflow="ellipsis")
        out.append_text(name)
        if world and self.world:
            out.append(f" · {self.world}", "dim")
        out.append(" │")
        return out

    def _compose_line(self) -> Text:
        width = self.size.width or 80
        room = width - self._health.cell_len - 3
        # Narrower and narrower until it fits: tabs by key only, then the world left out,
        # then the name cut short with … (the tab line keeps at least the current tab).
        for compact, world in ((False, True), (True, True), (True, False)):
            tabs = self._tabs(compact=compact)
            where = self._where(world=world, width=width)
            if where.cell_len + tabs.cell_len <= room:
                break
        else:
            where = self._where(world=False, width=room - tabs.cell_len - 3)
        left = where + tabs
        gap = max(2, width - left.cell_len - self._health.cell_len - 1)
        line = left + Text(" " * gap) + self._health
        line.truncate(width)
        return line
