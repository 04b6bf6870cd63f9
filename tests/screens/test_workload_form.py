"""The new-workload form (key `s` on GKE) over the fake services: what is typed is what the
services get, bad fields are marked and nothing is created, a refused create reopens the
form with what was typed. The same form against the real GKE emulator is in
tests/test_workload_form_e2e.py."""

from __future__ import annotations

from dataclasses import replace

from textual.pilot import Pilot
from textual.widgets import Input, Select

from console.screens.submit import SubmitScreen
from console.screens.workload_form import WorkloadFormScreen
from console.services.jobs.spec import SpecError
from console.tui.app import PhantomApp
from tests.support.fake_services import FakeServices
from tests.support.gke_services import FAKE_TOKEN
from tests.support.tui import make_app, settle, wait_for

ABSENT = "gs://phantom-bucket/absent/0/items"


async def open_form(app: PhantomApp, pilot: Pilot[int]) -> WorkloadFormScreen:
    await settle(pilot)
    await pilot.press("s")
    await settle(pilot)
    form = app.screen
    assert isinstance(form, WorkloadFormScreen)
    return form


def set_value(form: WorkloadFormScreen, field: str, value: str) -> None:
    widget = form.query_one(f"#{field}")
    assert isinstance(widget, Input | Select)
    widget.value = value


async def test_typed_values_create_the_workload() -> None:
    fake = FakeServices("gke")
    app = make_app(fake)
    async with app.run_test(size=(100, 40)) as pilot:
        form = await open_form(app, pilot)
        assert form.focused is form.query_one("#name", Input)  # the one field with no default
        await pilot.press(*"grpo-b")
        set_value(form, "command", "bash run_gptoss_20b_rl.sh --steps 200")
        set_value(form, "tpu_type", "v5p-16")
        set_value(form, "slices", "2")
        set_value(form, "spot", "no")
        set_value(form, "env", "STEPS=200 WANDB_API_KEY=$WANDB_API_KEY")
        await settle(pilot)
        assert form.problems == {}
        assert "xpk workload create --workload grpo-b" in str(form.query_one("#preview").render())
        await pilot.press("ctrl+s")
        await settle(pilot)
        assert not isinstance(app.screen, WorkloadFormScreen)
        (call,) = fake.called("create_workload")
        spec = call.args["spec"]
        assert (spec.name, spec.template, spec.tpu_type, spec.slices, spec.spot) == (
            "grpo-b",
            "standard",
            "v5p-16",
            2,
            False,
        )
        assert spec.command == "bash run_gptoss_20b_rl.sh --steps 200"
        assert dict(spec.env) == {"STEPS": "200", "WANDB_API_KEY": "$WANDB_API_KEY"}
        assert spec.image == fake.config.gke.image  # untouched fields keep the config's
        assert call.args["actor"] == "user"
        assert not fake.called("submit")  # never a Ray job on GKE
        await wait_for(pilot, lambda: "grpo-b" in app.state.jobs)


async def test_bad_fields_are_marked_and_nothing_is_created() -> None:
    fake = FakeServices("gke")
    app = make_app(fake)
    async with app.run_test(size=(100, 40)) as pilot:
        form = await open_form(app, pilot)
        set_value(form, "name", "Grpo_B")
        set_value(form, "image", "gcr.io/p/Max Text")
        set_value(form, "slices", "0")
        set_value(form, "env", f"HF_READ={FAKE_TOKEN}")
        await settle(pilot)
        assert set(form.problems) == {"name", "image", "slices", "env"}, form.problems
        assert "do not inline a secret" in form.problems["env"]
        shown = "".join(str(w.render()) for w in form.query("Input, Static"))
        assert FAKE_TOKEN not in shown  # dotted in the field, never echoed in a problem
        assert "fix the marked fields" in str(form.query_one("#preview").render())
        await pilot.press("ctrl+s")
        await settle(pilot)
        assert app.screen is form  # stays open, focus on the first bad field
        assert form.focused is form.query_one("#name", Input)
        assert not fake.called("create_workload")


async def test_convert_template_swaps_the_fields_that_apply() -> None:
    fake = FakeServices("gke")
    app = make_app(fake)
    async with app.run_test(size=(100, 40)) as pilot:
        form = await open_form(app, pilot)
        set_value(form, "name", "to-maxtext")
        for field in ("convert_direction", "convert_src"):
            assert form.query_one(f"#{field}").disabled
        set_value(form, "template", "convert")
        set_value(form, "command", "")  # would be a problem for standard: not for convert
        set_value(form, "convert_direction", "to_huggingface")
        await settle(pilot)
        for field in ("command", "tpu_type", "slices", "max_restarts", "spot"):
            assert form.query_one(f"#{field}").disabled, field
        assert form.problems == {
            "convert_src": "required for to_huggingface: the MaxText checkpoint"
        }
        set_value(form, "convert_src", "gs://phantom-bucket/ckpt/0/items")
        await settle(pilot)
        await pilot.press("ctrl+s")
        await settle(pilot)
        (call,) = fake.called("create_workload")
        spec = call.args["spec"]
        assert (spec.template, spec.convert_direction, spec.command) == (
            "convert",
            "to_huggingface",
            "bash convert_checkpoint.sh",
        )


async def test_a_refused_create_reopens_with_what_was_typed() -> None:
    fake = FakeServices("gke")
    fake.b.raise_in["create_workload"] = SpecError(
        {"maxtext_ckpt_path": f"{ABSENT} does not exist"}
    )
    app = make_app(fake)
    async with app.run_test(size=(100, 40)) as pilot:
        form = await open_form(app, pilot)
        set_value(form, "name", "grpo-c")
        set_value(form, "maxtext_ckpt_path", ABSENT)
        await settle(pilot)
        await pilot.press("ctrl+s")
        await settle(pilot)
        assert not isinstance(app.screen, WorkloadFormScreen)
        (toast,) = [n for n in app._notifications if n.title == "New workload"]
        assert toast.severity == "error" and f"{ABSENT} does not exist" in toast.message
        assert "grpo-c" not in app.state.jobs
        again = await open_form(app, pilot)
        assert again.query_one("#name", Input).value == "grpo-c"
        assert again.query_one("#maxtext_ckpt_path", Input).value == ABSENT


async def test_on_a_tpu_vm_pod_s_still_opens_the_job_form() -> None:
    app = make_app(FakeServices("healthy"))
    async with app.run_test(size=(100, 40)) as pilot:
        await settle(pilot)
        await pilot.press("s")
        await settle(pilot)
        assert isinstance(app.screen, SubmitScreen)


async def test_an_unknown_tpu_type_from_the_config_is_shown_not_swapped() -> None:
    fake = FakeServices("gke")
    fake.config = replace(fake.config, gke=replace(fake.config.gke, tpu_type="v2-8"))
    app = make_app(fake)
    async with app.run_test(size=(100, 40)) as pilot:
        form = await open_form(app, pilot)
        set_value(form, "name", "grpo-d")
        await settle(pilot)
        assert form.query_one("#tpu_type", Select).value == "v2-8"
        assert set(form.problems) == {"tpu_type"} and "v5p-64" in form.problems["tpu_type"]
        set_value(form, "tpu_type", "v5p-64")
        await settle(pilot)
        assert form.problems == {}
