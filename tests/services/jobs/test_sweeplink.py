"""A W&B sweep's page: on the server the jobs log to, with the job's own entity/project."""

from __future__ import annotations

from console.config import WandbConfig
from console.services.jobs.spec import SubmitSpec
from console.services.jobs.sweeplink import ID_PLACEHOLDER, wandb_sweep_url

EMU = "http://127.0.0.1:8765"
W = WandbConfig(entity="lab", project="seed000", mode="online", base_url=EMU + "/")
SWEEP = SubmitSpec(mode="sweep", sweep_backend="wandb")


def test_the_emulators_url_with_the_learned_or_pinned_id() -> None:
    assert wandb_sweep_url(W, SWEEP, "k3v9x2ab") == f"{EMU}/lab/seed000/sweeps/k3v9x2ab"
    pinned = SWEEP.with_sweep_id("pinned01")
    assert wandb_sweep_url(W, pinned, "other") == f"{EMU}/lab/seed000/sweeps/pinned01"
    assert wandb_sweep_url(W, SWEEP).endswith(f"/sweeps/{ID_PLACEHOLDER}")  # the form's


def test_server_from_env_then_wandb_ai() -> None:
    plain = WandbConfig(entity="lab", project="p")
    env = {"WANDB_BASE_URL": "http://127.0.0.2:9000"}
    assert wandb_sweep_url(plain, SWEEP, "s", env) == "http://127.0.0.2:9000/lab/p/sweeps/s"
    assert wandb_sweep_url(plain, SWEEP, "s", {}) == "https://wandb.ai/lab/p/sweeps/s"


def test_the_jobs_own_env_wins_but_not_a_reference() -> None:
    spec = SubmitSpec(
        mode="sweep",
        sweep_backend="wandb",
        runtime_env={"env_vars": {"WANDB_PROJECT": "mine", "WANDB_ENTITY": "$TEAM"}},
    )
    assert wandb_sweep_url(W, spec, "s") == f"{EMU}/lab/mine/sweeps/s"


def test_no_url_for_tune_other_modes_or_without_an_entity() -> None:
    assert wandb_sweep_url(W, SubmitSpec(mode="sweep", sweep_backend="tune"), "s") == ""
    assert wandb_sweep_url(W, SubmitSpec(mode="single"), "s") == ""
    assert wandb_sweep_url(WandbConfig(base_url=EMU), SWEEP, "s") == ""
