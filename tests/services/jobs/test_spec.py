"""The submit spec's entrypoints are parsed by the engine's own CLIs (no drift between what
the console sends and what the engine accepts), and secrets/storage are handled on the way."""

from __future__ import annotations

import shlex

import pytest

from console.services.jobs.spec import (
    META_MODE,
    META_SPEC,
    META_SWEEP_ID,
    SubmitSpec,
    spec_from_metadata,
    spec_metadata,
)
from engine import distributed, sweep, train


def _argv(spec: SubmitSpec, prefix: list[str]) -> list[str]:
    argv = shlex.split(spec.entrypoint())
    assert argv[: len(prefix)] == prefix, argv
    return argv[len(prefix) :]


def test_single_entrypoint_is_engine_train() -> None:
    spec = SubmitSpec(mode="single", train_args="--algo a2c --total-timesteps 2048 --alpha 0.2")
    args = train.build_parser(raise_errors=True).parse_args(
        _argv(spec, ["python", "-m", "engine.train"])
    )
    assert (args.algo, args.total_timesteps) == ("a2c", 2048)


def test_distributed_entrypoint_is_the_launcher() -> None:
    spec = SubmitSpec(
        mode="distributed", train_args="--algo ppo --alpha 0.4", num_nodes=3, tpu_per_task=8
    )
    args = distributed.build_launcher_parser().parse_args(
        _argv(spec, ["python", "scripts/ray_distributed_train.py"])
    )
    assert (args.num_nodes, args.tpu_per_task, args.base_seed) == (3, 8, 42)
    assert args.train_args == "--algo ppo --alpha 0.4"


@pytest.mark.parametrize("method", ["random", "grid"])
def test_sweep_entrypoint_is_engine_sweep(method: str) -> None:
    spec = SubmitSpec(
        mode="sweep",
        sweep_method=method,
        run_cap=6,
        num_nodes=4,
        agents_per_node=2,
        sweep_id="sw-1",
    )
    args = sweep.build_parser().parse_args(_argv(spec, ["python", "-m", "engine.sweep"]))
    assert (args.kind, args.method, args.run_cap) == ("ppo_rl_study", method, 6)
    assert (args.num_nodes, args.agents_per_node, args.sweep_id) == (4, 2, "sw-1")


def test_sweep_args_reach_engine_sweep_and_survive_a_resubmission() -> None:
    spec = SubmitSpec(
        mode="sweep",
        sweep_args="--trial-timesteps 3000 --checkpoint-every 500 --max-failures 10",
    )
    args = sweep.build_parser().parse_args(_argv(spec, ["python", "-m", "engine.sweep"]))
    assert (args.trial_timesteps, args.checkpoint_every, args.max_failures) == (3000, 500, 10)
    again = spec_from_metadata(spec_metadata(spec))
    assert again is not None and again.entrypoint() == spec.entrypoint()
    assert SubmitSpec(mode="sweep", sweep_args="--x 'y").validate() == {
        "sweep_args": "bad quoting: No closing quotation"
    }


def test_storage_and_secrets_in_the_runtime_env() -> None:
    spec = SubmitSpec(
        runtime_env={"env_vars": {"WANDB_API_KEY": "$WANDB_API_KEY", "X": "1"}},
        storage="file:///bucket",
    )
    sent = spec.resolved_runtime_env({"WANDB_API_KEY": "k-123"})
    assert sent["env_vars"] == {
        "WANDB_API_KEY": "k-123",
        "X": "1",
        "PHANTOM_STORAGE": "file:///bucket",
    }
    assert ".venv" in sent["excludes"]
    preview = spec.command_preview("http://127.0.0.1:18265")
    assert "k-123" not in preview and "$WANDB_API_KEY" in preview


def test_invalid_fields_are_each_named() -> None:
    problems = SubmitSpec(
        mode="sweep",
        sweep_method="bayes",
        run_cap=0,
        num_nodes=0,
        tpu_per_task=-1,
        train_args="--alpha 'x",
    ).validate()
    assert set(problems) == {"sweep_method", "run_cap", "num_nodes", "tpu_per_task", "train_args"}


def test_spec_round_trips_through_job_metadata() -> None:
    original = SubmitSpec(
        mode="sweep",
        train_args="--algo ppo --alpha auto",
        runtime_env={"env_vars": {"WANDB_API_KEY": "$WANDB_API_KEY"}},
        sweep_id="ent/proj/abc123",
        run_cap=9,
        submission_id="phantom-sweep-1",
    )
    meta = spec_metadata(original, submitted_at=5.0)
    assert meta[META_MODE] == "sweep" and meta[META_SWEEP_ID] == "ent/proj/abc123"
    assert all(isinstance(v, str) for v in meta.values())
    again = spec_from_metadata(meta)
    assert again is not None
    assert again.entrypoint() == original.entrypoint()
    assert again.runtime_env == original.runtime_env and again.submission_id == ""
    assert spec_from_metadata({}) is None
    assert spec_from_metadata({META_SPEC: "not json"}) is None
