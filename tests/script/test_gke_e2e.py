"""`phantom --script` on the GKE emulator, in a subprocess: seed 004's drill (gke up ->
workload create -> Running -> preempt-slice -> JobSet restart -> Completed -> logs -> gke
down) with its JSON lines and exit code 0; and bad input only the cluster can judge (an
unset secret variable) exits 2 with nothing created."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from emulators.gke import client as gke_client
from tests.support import REPO
from tests.support.gke_services import FAKE_TOKEN

DRILL = """\
# Seed 004 on the local GKE emulator
gke up
workload create grpo --env STEPS=60 --env STEP_TIME=0.25 --env CHECKPOINT_PERIOD=10 \\
    --checkpoint gs://phantom-bucket/gpt-oss-20b/0/items
wait-workload grpo RUNNING --timeout 60
sleep 5  # past the first checkpoint (step 10 at 4 steps/s)
preempt-slice 0 --grace 0
wait-event jobset_restarted --timeout 60
wait-workload grpo COMPLETED --timeout 120
logs grpo --tail 400
status
finally
gke down
"""


def write_config(tmp_path: Path) -> Path:
    cfg = tmp_path / "phantom.toml"
    cfg.write_text(
        f"""
[cluster]
provider = "gke"

[gke]
run_dir = "{tmp_path / "gke"}"

[recovery]
poll_interval_s = 0.5
ready_timeout_s = 60.0
"""
    )
    return cfg


def run_script(
    tmp_path: Path, text: str, env: dict[str, str]
) -> tuple[int, list[dict[str, Any]], str]:
    script = tmp_path / "drill.phantom"
    script.write_text(text)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "console.cli",
            "--config",
            str(write_config(tmp_path)),
            "--script",
            str(script),
        ],
        cwd=REPO,
        env={**os.environ, "XDG_STATE_HOME": str(tmp_path / "state"), **env},
        capture_output=True,
        text=True,
        timeout=400,
    )
    lines = [json.loads(ln) for ln in proc.stdout.splitlines() if ln.strip()]
    return proc.returncode, lines, proc.stderr


@pytest.mark.slow
def test_seed_004_drill_from_a_script(tmp_path: Path) -> None:
    (tmp_path / "gke" / "bucket" / "phantom-bucket" / "gpt-oss-20b" / "0" / "items").mkdir(
        parents=True
    )
    try:
        code, lines, err = run_script(tmp_path, DRILL, {"HF_TOKEN": FAKE_TOKEN})
        steps = [ln for ln in lines if ln["type"] == "step"]
        assert code == 0, err[-3000:]
        assert [s["action"] for s in steps] == [
            "gke up",
            "workload create",
            "wait-workload",
            "sleep",
            "preempt-slice",
            "wait-event",
            "wait-workload",
            "logs",
            "status",
            "gke down",
        ]
        assert all(s["ok"] for s in steps)
        created = steps[1]["result"]
        assert created["job_id"] == "grpo" and created["env_delivery"]["variables"] == ["HF_TOKEN"]
        assert created["command_line"].startswith("xpk workload create")
        assert created["console_url"].endswith("/grpo/details?project=phantom-local")
        assert steps[5]["result"]["kind"] == "jobset_restarted"
        assert steps[6]["result"]["status"] == "SUCCEEDED"
        log = "\n".join(steps[7]["result"]["lines"])
        assert "Restoring checkpoint from" in log and "Training completed: 60 steps" in log
        status = steps[8]["result"]
        assert status["pod"]["workloads"][0]["terminal_state"] == "Completed"
        assert status["pod"]["workloads"][0]["restarts"] == 1
        kinds = [ln["kind"] for ln in lines if ln["type"] == "event"]
        assert "preempted" in kinds and "jobset_restarted" in kinds
        assert lines[-1]["type"] == "summary" and lines[-1]["exit_code"] == 0
        everything = json.dumps(lines) + err
        assert FAKE_TOKEN not in everything
    finally:
        gke_client.stop(tmp_path / "gke")
    assert gke_client.leftover_pids(tmp_path / "gke") == []


@pytest.mark.slow
def test_input_only_the_cluster_can_judge_exits_2_and_creates_nothing(tmp_path: Path) -> None:
    text = (
        "gke up\n"
        "workload create needs-key --env 'WANDB_API_KEY=$PHANTOM_TEST_UNSET_KEY'\n"
        "status\n"
        "finally\n"
        "gke down\n"
    )
    try:
        code, lines, err = run_script(tmp_path, text, {})
        assert code == 2, err[-3000:]
        steps = [ln for ln in lines if ln["type"] == "step"]
        assert [s["action"] for s in steps] == ["gke up", "workload create", "gke down"]
        failed = steps[1]["result"]
        assert failed["problems"] == {
            "env.WANDB_API_KEY": "$PHANTOM_TEST_UNSET_KEY is not set in this console's "
            "environment; export it (its value goes to the cluster as Secret "
            "needs-key-phantom-env, never shown)",
            "hf_token_env": "$HF_TOKEN is not set in this console's environment; export it "
            "(its value goes to the cluster as Secret needs-key-phantom-env, never shown) or "
            'set hf_token_env to ""',
        }
        journal = [ln for ln in lines if ln["type"] == "event"]
        assert not any(e["kind"] == "job_state" for e in journal)
    finally:
        gke_client.stop(tmp_path / "gke")
