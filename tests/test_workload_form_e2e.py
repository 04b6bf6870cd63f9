"""The new-workload form on the real services and the GKE emulator: `s`, a name and a few
values typed, ctrl+s, and a JobSet exists on the cluster (listed by the API server, run by
the emulator's kubelet), journaled as the user's; the HF token travels as a Secret and shows
nowhere on screen. A create the backend refuses (a secret variable this console does not
have) is reported by name and creates nothing."""

from __future__ import annotations

import time
from pathlib import Path

from textual.widgets import Input

from console.screens.workload_form import WorkloadFormScreen
from console.tui.app import PhantomApp, TuiSettings
from emulators.gke import client as gke_client
from tests.support.fixtures_gke import gke_module
from tests.support.gke_services import FAKE_TOKEN, gke_config, gke_services
from tests.support.tui import settle
from tests.support.waiting import until

__all__ = ["gke_module"]


def screen_text(app: PhantomApp) -> str:
    return "".join(str(w.render()) for w in app.screen.query("Input, Static, Label"))


async def test_the_form_creates_a_jobset_on_the_cluster(
    gke_module: gke_client.GkeInfo, tmp_path: Path
) -> None:
    config = gke_config(gke_module.run_dir)
    async with gke_services(config, tmp_path / "state") as (svc, _):
        settings = TuiSettings(cursor_blink=False, tick_s=None, manage_services=False)
        app = PhantomApp(svc, clock=time.time, settings=settings)
        async with app.run_test(size=(120, 40)) as pilot:
            await settle(pilot)
            await pilot.press("s")
            await settle(pilot)
            form = app.screen
            assert isinstance(form, WorkloadFormScreen)
            await pilot.press(*"tui-grpo")
            form.query_one("#env", Input).value = "STEPS=4 STEP_TIME=0.25 CHECKPOINT_PERIOD=10"
            await settle(pilot)
            assert form.problems == {}
            preview = str(form.query_one("#preview").render())
            # The backend's own preview: the xpk line a user could run instead.
            assert "xpk workload create" in preview and "--workload tui-grpo" in preview
            assert "HF_TOKEN" in preview and FAKE_TOKEN not in screen_text(app)
            await pilot.press("ctrl+s")
            await until(lambda: "tui-grpo" in app.state.jobs, 30, "the workload in the TUI")
            jobs = {j.job_id: j for j in await svc.list_jobs()}
            assert "tui-grpo" in jobs  # listed by the cluster's API server
            await until(
                lambda: any(w.name == "tui-grpo" for w in svc.snapshot().workloads),
                30,
                "the JobSet observed",
            )
            created = [
                e for e in await svc.events(limit=100) if e.data.get("action") == "workload_create"
            ]
            assert created and created[-1].actor == "user", created

            # A secret variable this console does not have: refused by name, nothing made.
            await pilot.press("s")
            await settle(pilot)
            form = app.screen
            assert isinstance(form, WorkloadFormScreen)
            form.query_one("#name", Input).value = "tui-unset"
            form.query_one("#env", Input).value = "WANDB_API_KEY=$PHANTOM_TEST_UNSET"
            await settle(pilot)
            await pilot.press("ctrl+s")

            def refusals() -> list[str]:
                return [n.message for n in app._notifications if n.severity == "error"]

            await until(refusals, 30, "the refusal")
            (message,) = refusals()
            assert message.startswith("New workload failed:"), message
            assert "$PHANTOM_TEST_UNSET is not set" in message
            assert "tui-unset" not in {j.job_id for j in await svc.list_jobs()}
            assert FAKE_TOKEN not in screen_text(app)
