"""The workload spec: every field checked, each problem named, secrets never inline."""

from __future__ import annotations

import pytest

from console.config import parse_config
from console.services.jobs.spec import SpecError
from console.services.jobs.workload import EMULATOR_OUTPUT, WorkloadSpec, image_problem
from console.wiring.settings import workload_defaults

TOKEN = "hf_" + "aB3" * 11


def spec(**kw: object) -> WorkloadSpec:
    base: dict[str, object] = {
        "name": "grpo",
        "image": "gcr.io/p/maxtext:1",
        "command": "bash run_gptoss_20b_rl.sh",
        "base_output_directory": "gs://bucket/runs",
    }
    return WorkloadSpec(**{**base, **kw})  # type: ignore[arg-type]


def test_a_good_spec_has_no_problem_and_round_trips() -> None:
    s = spec(env={"STEPS": "10", "WANDB_API_KEY": "$WANDB_API_KEY"})
    assert s.validate() == {}
    assert WorkloadSpec.from_json(s.to_json()) == s
    assert s.secret_refs() == {"WANDB_API_KEY": "WANDB_API_KEY", "HF_TOKEN": "HF_TOKEN"}
    assert s.output_uri == "gs://bucket/runs/grpo"


@pytest.mark.parametrize(
    ("changes", "field", "fragment"),
    [
        ({"name": "Bad_Name"}, "name", "lower-case letters"),
        ({"name": "x" * 41}, "name", "at most 40"),
        ({"image": "gcr.io/p/Max Text:1"}, "image", "no spaces"),
        ({"image": "gcr.io//maxtext::1"}, "image", "invalid reference format"),
        ({"image": ""}, "image", "required"),
        ({"command": ""}, "command", "required"),
        ({"command": "bash 'unclosed"}, "command", "bad quoting"),
        ({"tpu_type": "v9x-1"}, "tpu_type", "use v4-N, v5p-N, v5litepod-N or v6e-N"),
        ({"slices": 0}, "slices", "between 1 and 64"),
        ({"max_restarts": -1}, "max_restarts", "between 0 and 1000"),
        ({"termination_grace_s": -5}, "termination_grace_s", "0..3600"),
        ({"env": {"BAD NAME": "1"}}, "env.BAD NAME", "not a variable name"),
        ({"env": {"RUN_NAME": "x"}}, "env.RUN_NAME", "set by the console"),
        ({"env": {"WANDB_API_KEY": "abc123456789"}}, "env.WANDB_API_KEY", "do not inline a secret"),
        ({"env": {"NOTE": TOKEN}}, "env.NOTE", "do not inline a secret"),
        ({"env": {"X": "$not a name"}}, "env.X", "a reference is $NAME"),
        ({"hf_token_env": TOKEN}, "hf_token_env", "never the token itself"),
        ({"command": f"bash run.sh hf_access_token={TOKEN}"}, "command", "Hugging Face token"),
        ({"base_output_directory": "s3://b/x"}, "base_output_directory", "gs://bucket/path"),
        ({"base_output_directory": ""}, "base_output_directory", "required"),
        ({"maxtext_ckpt_path": "/local/path"}, "maxtext_ckpt_path", "gs://bucket/path/0/items"),
        ({"template": "kubeflow"}, "template", "standard, pathways, convert"),
        (
            {"template": "convert", "convert_direction": "to_huggingface"},
            "convert_src",
            "required for to_huggingface",
        ),
    ],
)
def test_each_problem_names_its_field(
    changes: dict[str, object], field: str, fragment: str
) -> None:
    problems = spec(**changes).validate()
    assert field in problems and fragment in problems[field], problems
    with pytest.raises(SpecError) as err:
        spec(**changes).checked()
    assert TOKEN not in str(err.value), "a refused token must not be echoed"


def test_image_references_follow_the_registry_grammar() -> None:
    for good in (
        "python:3.11-slim",
        "gcr.io/p/x:tag",
        "us-docker.pkg.dev/a/b/c@sha256:" + "a" * 64,
    ):
        assert image_problem(good) == "", good
    for bad in ("UPPER:tag", "x::y", "gcr.io/p/x:", "-x"):
        assert image_problem(bad), bad


def test_defaults_come_from_the_config() -> None:
    cfg = parse_config({"cluster": {"provider": "gke"}, "gke": {"slices": 2, "max_restarts": 5}})
    s = workload_defaults(cfg).but("w", env={"STEPS": "3"})
    assert (s.slices, s.max_restarts, s.tpu_type, s.hf_token_env) == (2, 5, "v5p-64", "HF_TOKEN")
    assert s.base_output_directory == EMULATOR_OUTPUT  # the emulator's bucket by default
    conv = workload_defaults(cfg).but("c", template="convert")
    assert conv.command == "bash convert_checkpoint.sh"
