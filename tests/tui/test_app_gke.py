"""Pilot tests of the GKE screens: workloads, their pods and logs, the actions the services
offer, and Tunix's metrics on the Cadence screen (the fake stands at the services boundary)."""

from __future__ import annotations

import threading
from pathlib import Path

from console.config import parse_config
from console.screens.confirm import ConfirmScreen
from console.screens.logview import LogViewScreen
from console.tui.app import PhantomApp
from console.widgets.table import PhantomTable
from tests.support.fake_data import GKE_POOL, tunix_metrics
from tests.support.fake_services import FakeServices
from tests.support.tui import make_app, settle, wait_for


def pods_table(app: PhantomApp) -> PhantomTable:
    return app.screen.query_one("#pods", PhantomTable)


async def test_workloads_screen_drills_to_pods_and_their_logs_on_gke() -> None:
    fake = FakeServices("gke")
    app = make_app(fake)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("6")
        await settle(pilot)
        assert app.current_mode == "workloads"
        workloads = app.screen.query_one("#workloads", PhantomTable)
        assert workloads.row_keys == ["grpo", "to-maxtext"]
        grpo_pods = [p.name for p in fake.pod.pods if p.workload == "grpo"]
        assert pods_table(app).row_keys == grpo_pods
        await pilot.press("down")  # the conversion Job has no pods left
        await settle(pilot)
        assert pods_table(app).row_keys == []
        await pilot.press("up", "enter")  # enter on a workload: focus its pods
        await settle(pilot)
        assert pods_table(app).has_focus
        await pilot.press("down", "enter")  # enter on a pod: its log
        await settle(pilot)
        assert isinstance(app.screen, LogViewScreen) and app.screen.job_id == grpo_pods[1]
        assert fake.called("follow_logs")[-1].args["job_id"] == grpo_pods[1]
        await pilot.press("escape")
        await settle(pilot)
        await pilot.press("shift+tab", "l")  # l on the workload: its coordinator's log
        await settle(pilot)
        assert fake.called("follow_logs")[-1].args["job_id"] == "grpo"


async def test_delete_workload_and_preempt_slice_confirm_first() -> None:
    fake = FakeServices("gke")
    app = make_app(fake)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("6", "x")
        await settle(pilot)
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("n")
        await settle(pilot)
        assert not fake.called("delete_workload")
        await pilot.press("x", "y")
        await settle(pilot)
        assert [c.args for c in fake.called("delete_workload")] == [
            {"workload": "grpo", "actor": "user"}
        ]
        await pilot.press("p")  # the highlighted pod's node pool is the slice
        await settle(pilot)
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("y")
        await settle(pilot)
        calls = fake.called("preempt_slice")
        assert [c.args["slice_ref"] for c in calls] == [GKE_POOL]
        assert not [n for n in app._notifications if n.severity == "error"]


async def test_workload_actions_only_where_the_services_offer_them(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\n")
    gke = {
        "kubeconfig": str(kubeconfig),
        "project": "p",
        "location": "us-east5",
        "cluster": "c",
        "base_output_directory": "gs://phantom-bucket/maxtext-runs",
    }
    real_gke = parse_config({"cluster": {"provider": "gke"}, "gke": gke})
    for fake in (FakeServices("healthy"), FakeServices("gke", config=real_gke)):
        app = make_app(fake)
        async with app.run_test(size=(80, 24)) as pilot:
            await settle(pilot)
            await pilot.press("6", "p")  # no chaos on a real cluster nor on a TPU VM pod
            await settle(pilot)
            assert not isinstance(app.screen, ConfirmScreen)
            # A TPU VM pod has no Workloads screen: 6 leaves it on the Overview.
            assert app.current_mode == ("workloads" if fake.config.is_gke else "overview")
        assert not fake.called("preempt_slice") and not fake.called("delete_workload")


async def test_tunix_metrics_from_the_bus_are_kept_and_drawn_on_cadence() -> None:
    fake = FakeServices("gke")
    app = make_app(fake)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        assert app.state.metrics["grpo"].last_step == 40  # published by start()
        await pilot.press("3")
        await settle(pilot)
        panel = str(app.screen.query_one("#run-metrics").render())
        names = ["rewards/mean", "score/mean", "rollout_time", "completions/mean_length"]
        names += ["actor_dequeue_time", "step_time_sec"]
        lines = panel.splitlines()
        assert [line.split()[0] for line in lines[1:]] == names
        assert "steps 1–40" in lines[0]
        # A newer poll from another thread: the panel shows its newest values.
        newer = tunix_metrics(steps=80)
        threading.Thread(target=fake.publish, args=(newer,)).start()
        await wait_for(pilot, lambda: app.state.metrics["grpo"].last_step == 80)
        await settle(pilot)
        panel = str(app.screen.query_one("#run-metrics").render())
        newest = newer.series["completions/mean_length"][-1][1]
        assert "steps 1–80" in panel and f"{newest:.0f}" in panel
