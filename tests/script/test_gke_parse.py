"""The GKE verbs of the script language: each bad line exits 2 naming the field, before
anything runs (no services built, no emulator touched, nothing on stdout); emulator verbs
are refused on a real cluster, and each provider's verbs on the others."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from console import exit_codes
from console.commands.kit.workload_args import build_workload_spec
from console.config import Config, parse_config
from console.script.language import ACTIONS, usage_text
from console.script.main import script_main
from console.script.parse import parse_script
from console.wiring import unbuilt_services
from console.wiring.settings import workload_defaults
from tests.support.gke_services import FAKE_TOKEN, gke_config
from tests.support.script_harness import Harness


class FakeGke:
    def __init__(self, record: Any) -> None:
        self.record = record

    async def is_up(self) -> bool:
        self.record(("gke.is_up",))
        return False

    async def up(self, slices: int | None, quota_stall: bool = False) -> dict[str, Any]:
        self.record(("gke.up", slices, quota_stall))
        return {}

    async def down(self) -> bool:
        self.record(("gke.down",))
        return True


def run(tmp_path: Path, text: str, config: Config) -> tuple[int, str, str, Harness]:
    path = tmp_path / "drill.phantom"
    path.write_text(text)
    h = Harness()
    out, err = io.StringIO(), io.StringIO()
    code = script_main(
        str(path),
        config,
        services_factory=h.factory,
        pod_control=h.pod(),
        gke_control=FakeGke(h.record),
        stdout=out,
        stderr=err,
    )
    return code, out.getvalue(), err.getvalue(), h


def invalid(tmp_path: Path, text: str, config: Config) -> str:
    code, out, err, h = run(tmp_path, text, config)
    assert code == exit_codes.USAGE, err
    assert h.built == 0 and h.calls == [] and out == "", "an invalid script runs nothing"
    assert "nothing was run" in err
    return err


@pytest.fixture
def gke_cfg(tmp_path: Path) -> Config:
    return gke_config(tmp_path / "gke")


@pytest.mark.parametrize(
    ("line", "fragment"),
    [
        (
            'workload create grpo --image "gcr.io/p/Max Text"',
            "--image (image): 'gcr.io/p/Max Text': no spaces",
        ),
        ("workload create grpo --image gcr.io//x::1", "invalid reference format"),
        ("workload create Grpo", "a workload name: lower-case letters"),
        ("workload create grpo --slices 0", "--slices 0: must be at least 1"),
        ("workload create grpo --tpu-type v9-1", "use one of v4-8, v4-16"),
        ("workload create grpo --env NOEQUALS", "use NAME=VALUE"),
        ("workload create grpo --env 'BAD NAME=1'", "use NAME=VALUE"),
        (
            "workload create grpo --env WANDB_API_KEY=abc123456789",
            "--env WANDB_API_KEY (env.WANDB_API_KEY): do not inline a secret",
        ),
        (
            f"workload create grpo --env NOTE={FAKE_TOKEN}",
            "--env NOTE (env.NOTE): do not inline a secret",
        ),
        (f"workload create grpo --hf-token-env {FAKE_TOKEN}", "never the token itself"),
        (
            "workload create grpo --checkpoint gs://phantom-bucket/absent/0/items",
            "--checkpoint (maxtext_ckpt_path): gs://phantom-bucket/absent/0/items does not exist",
        ),
        (
            "workload create grpo --base-output-dir s3://x/y",
            "--base-output-dir (base_output_directory)",
        ),
        (
            "workload create c --template convert --direction to_huggingface",
            "--src (convert_src): required",
        ),
        ("wait-workload last RUNNING", "`last` refers to the job of an earlier"),
        ("wait-workload grpo DONE", "use one of PENDING, RUNNING"),
        ("preempt-slice 0 --grace -1", "must be 0 or more seconds"),
    ],
)
def test_bad_workload_lines_exit_2_naming_the_field(
    tmp_path: Path, gke_cfg: Config, line: str, fragment: str
) -> None:
    err = invalid(tmp_path, f"gke up\n{line}\n", gke_cfg)
    assert ":2: " in err and fragment in err, err
    assert FAKE_TOKEN not in err, "a refused token is never echoed"


def test_a_broken_manifest_value_in_a_spec_file(tmp_path: Path, gke_cfg: Config) -> None:
    (tmp_path / "grpo.json").write_text(json.dumps({"termination_grace_s": -5, "slices": 2}))
    err = invalid(tmp_path, "workload create grpo --spec grpo.json\n", gke_cfg)
    assert "--grace (termination_grace_s): must be 0..3600 seconds, got -5" in err
    (tmp_path / "typo.toml").write_text("slicez = 2\n")
    err = invalid(tmp_path, "workload create grpo --spec typo.toml\n", gke_cfg)
    assert "unknown field(s) ['slicez']" in err
    (tmp_path / "types.yaml").write_text("slices: two\n")
    err = invalid(tmp_path, "workload create grpo --spec types.yaml\n", gke_cfg)
    assert "slices = 'two': must be int" in err


def test_a_checkpoint_that_exists_passes(tmp_path: Path, gke_cfg: Config) -> None:
    (tmp_path / "gke" / "bucket" / "phantom-bucket" / "ckpt" / "0" / "items").mkdir(parents=True)
    script = parse_script(
        "workload create grpo --checkpoint gs://phantom-bucket/ckpt/0/items --env STEPS=3 "
        "--env WANDB_API_KEY=$WANDB_API_KEY\nlogs last\nwait-workload last COMPLETED\n",
        unbuilt_services(gke_cfg),
        path_exists=lambda uri: (tmp_path / "gke" / "bucket" / uri[5:]).exists(),
    )
    spec = build_workload_spec(script.lines[0].args, workload_defaults(gke_cfg))
    assert spec.env == {"STEPS": "3", "WANDB_API_KEY": "$WANDB_API_KEY"}
    assert spec.maxtext_ckpt_path == "gs://phantom-bucket/ckpt/0/items"
    assert spec.validate() == {}


def test_emulator_verbs_are_refused_on_a_real_cluster(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\n")
    real = parse_config(
        {
            "cluster": {"provider": "gke"},
            "gke": {
                "kubeconfig": str(kubeconfig),
                "project": "p",
                "location": "us-central1",
                "cluster": "c",
                "base_output_directory": "gs://bucket/runs",
            },
        },
        source="real.toml",
    )
    for line in ("gke up", "gke down", "preempt-slice 0"):
        err = invalid(tmp_path, f"status\n{line}\n", real)
        assert "only for the local GKE emulator" in err and f"kubeconfig {kubeconfig}" in err, err
    # the workload verbs themselves are for real clusters too
    parse_script(
        "workload create grpo\nwait-workload grpo RUNNING\nworkload delete grpo\n",
        unbuilt_services(real),
    )


def test_a_refused_verb_names_the_kubeconfig_in_use(tmp_path: Path, gke_cfg: Config) -> None:
    """`teardown` on GKE is refused naming the kubeconfig the console would use: the local
    emulator's (in its run dir), or the configured one; never the config file's path as if
    it were a kubeconfig (it said "with a kubeconfig (gke-test.toml)" on the emulator)."""
    err = invalid(tmp_path, "teardown\n", gke_cfg)
    emulator_kubeconfig = tmp_path / "gke" / "kubeconfig"
    assert "teardown: only for a TPU VM pod with Ray" in err, err
    assert f"the local GKE emulator, kubeconfig {emulator_kubeconfig}" in err, err
    assert "with a kubeconfig" not in err, err
    kubeconfig = tmp_path / "creds" / "kubeconfig"
    kubeconfig.parent.mkdir()
    kubeconfig.write_text("apiVersion: v1\n")
    real = parse_config(
        {
            "cluster": {"provider": "gke"},
            "gke": {
                "kubeconfig": str(kubeconfig),
                "context": "gke_p_us-central1_c",
                "project": "p",
                "location": "us-central1",
                "cluster": "c",
                "base_output_directory": "gs://bucket/runs",
            },
        },
        source=str(tmp_path / "real.toml"),
    )
    err = invalid(tmp_path, "teardown\n", real)
    assert f"kubeconfig {kubeconfig} (context gke_p_us-central1_c)" in err, err
    assert f"cluster 'c' of {tmp_path / 'real.toml'} is provider 'gke'" in err, err


def test_each_providers_verbs_stay_with_it(tmp_path: Path, gke_cfg: Config) -> None:
    local = "cluster 'phantom-pod' of <defaults> is provider 'local'"
    err = invalid(tmp_path, "workload create grpo\n", Config())
    assert f"only for cluster.provider = 'gke'; {local}" in err
    err = invalid(tmp_path, "pod up\n", gke_cfg)
    assert "pod up: only for the local emulator" in err
    err = invalid(tmp_path, "gke up\n", Config())
    assert f"gke up: only for the local GKE emulator; {local}" in err


def test_the_reference_lists_the_gke_verbs() -> None:
    text = usage_text()
    for verb in (
        "gke up",
        "gke down",
        "workload create",
        "workload delete",
        "wait-workload",
        "preempt-slice",
    ):
        assert verb in ACTIONS and f"  {verb}" in text
    assert max(len(line) for line in text.splitlines()) <= 80


def test_the_shipped_gke_drill_parses_its_checkpoint_made_by_an_earlier_line(
    tmp_path: Path, gke_cfg: Config
) -> None:
    """The drill converts a checkpoint and then trains from it: at parse time the checkpoint
    does not exist yet, and the earlier convert line is what will make it."""
    example = Path(__file__).resolve().parents[2] / "examples" / "gke_preemption_drill.phantom"
    script = parse_script(
        example.read_text(), unbuilt_services(gke_cfg), path_exists=lambda uri: False
    )
    assert [s.action for s in script.lines][:4] == [
        "gke up",
        "workload create",
        "wait-workload",
        "workload create",
    ]
    # Without the convert line the same checkpoint is refused.
    text = "workload create grpo --checkpoint gs://phantom-bucket/gpt-oss-20b/0/items\n"
    err = invalid(tmp_path, text, gke_cfg)
    assert "gs://phantom-bucket/gpt-oss-20b/0/items does not exist" in err


@pytest.mark.parametrize("line", ["ray-up", "teardown", "tunnel", "bootstrap 0", "relaunch-sweep"])
def test_ray_verbs_are_refused_on_gke_before_anything_runs(
    tmp_path: Path, gke_cfg: Config, line: str
) -> None:
    """GKE declares no Ray cluster of the console's: the script says so before it runs."""
    err = invalid(tmp_path, f"status\n{line}\n", gke_cfg)
    assert "only for a TPU VM pod" in err and "provider 'gke'" in err, err
