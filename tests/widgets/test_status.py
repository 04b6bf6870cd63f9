"""The header: the cluster's name and world, the tabs of the screens it has, its health;
narrower terminals drop the tabs' labels, then the world, then cut the name."""

from __future__ import annotations

from rich.text import Text
from textual.app import App, ComposeResult

from console.widgets.status import StatusBar

HEALTH = Text("3/4 ready  ray 3/4  ⚠3  ⟳")
TPU_VM = ("overview", "jobs", "cadence", "events", "recovery", "ledger")


class _One(App[None]):
    def __init__(self, bar: StatusBar) -> None:
        super().__init__()
        self.bar = bar

    def compose(self) -> ComposeResult:
        yield self.bar

    def on_mount(self) -> None:
        self.bar.set_health(HEALTH)


async def _line(bar: StatusBar, width: int) -> str:
    async with _One(bar).run_test(size=(width, 3)) as pilot:
        await pilot.pause()
        return bar._compose_line().plain.rstrip()


async def test_wide_the_header_names_cluster_world_and_every_tab() -> None:
    bar = StatusBar("jobs", screens=TPU_VM, cluster="pod-a", world="TPU VM pod + Ray")
    line = await _line(bar, 160)
    assert line.startswith(" pod-a · TPU VM pod + Ray │ 1 Overview 2 Jobs 3 Cadence 4 Events")
    assert "6 Workloads" not in line and "Ledger" not in line  # the ledger: on its own only
    assert line.endswith(HEALTH.plain)


async def test_at_80_columns_tabs_go_by_key_and_the_world_stays() -> None:
    bar = StatusBar("overview", screens=TPU_VM, cluster="pod-a", world="TPU VM pod + Ray")
    line = await _line(bar, 80)
    assert line.startswith(" pod-a · TPU VM pod + Ray │ 1 Overview 2 3 4 5  ")
    assert line.endswith(HEALTH.plain) and len(line) <= 80


async def test_a_long_name_loses_the_world_then_is_cut() -> None:
    name = "grpo-us-east5-v5p-64-run"
    bar = StatusBar("overview", screens=TPU_VM, cluster=name, world="GKE + JobSets")
    line = await _line(bar, 80)
    assert "GKE" not in line and line.startswith(f" {name} │ 1 Overview 2 3 4 5")
    longest = "a-cluster-with-a-rather-long-name-of-40c"
    bar = StatusBar("overview", screens=TPU_VM, cluster=longest, world="GKE + JobSets")
    line = await _line(bar, 80)
    assert line.startswith(" a-cluster-with-a-rather-long-… │ 1 Overview 2 3 4 5")
    assert line.endswith(HEALTH.plain) and len(line) <= 80


async def test_a_screen_the_cluster_lacks_is_tabbed_only_while_shown() -> None:
    bar = StatusBar("ledger", screens=TPU_VM, cluster="pod-a")
    assert [t[2] for t in bar.tabs][-1] == "ledger"
    gke = StatusBar("overview", screens=(*TPU_VM, "workloads", "fleet"), cluster="grpo")
    assert [t[0] for t in gke.tabs] == ["0", "1", "2", "3", "4", "5", "6"]
