"""Terminal means terminal (issue 25, item 2), with real Ray on the local pod emulator.

A job SUCCEEDED; then the head is preempted and the recovery replaces it. The new head knows
nothing of the job, yet the console saw it finish: ``wait-job last SUCCEEDED`` after the
recovery returns at once with SUCCEEDED (before: "LOST ... and nothing resubmits it"), and
so does a second script run (another process, the same journal), which also exits: its
jobs poller once lost its cancel to 3.11's ``wait_for`` and the process never ended.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.script.test_e2e import ROOT, assert_pod_gone, child_env, phantom_argv, write_config

SCRIPT = """
pod up --hosts 2
wait-ready --timeout 2m
bootstrap
ray-up
tunnel
submit single --train-args "--algo ppo --total-timesteps 2048 --device cpu --eval-episodes 1"
wait-job last SUCCEEDED --timeout 10m
preempt 0
wait-event preempted --host 0 --timeout 2m
recover --timeout 10m
wait-job last SUCCEEDED --timeout 20s
status
"""


def run(cfg: Path, tmp_path: Path, script: Path) -> tuple[int, list[dict[str, Any]], str]:
    proc = subprocess.run(
        phantom_argv("--config", str(cfg), "--script", str(script)),
        cwd=ROOT,
        env=child_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=600,
    )
    return proc.returncode, [json.loads(x) for x in proc.stdout.splitlines()], proc.stderr


@pytest.mark.slow
@pytest.mark.e2e
@pytest.mark.timeout(1800)
def test_a_job_that_succeeded_before_a_head_loss_stays_succeeded(tmp_path: Path) -> None:
    cfg = write_config(tmp_path, hosts=2)
    first, second = tmp_path / "first.phantom", tmp_path / "second.phantom"
    first.write_text(SCRIPT)
    try:
        rc, lines, err = run(cfg, tmp_path, first)
        steps = [x for x in lines if x["type"] == "step"]
        assert rc == 0, f"{err[-3000:]}\n{[s for s in steps if not s['ok']]}"
        waits = [s for s in steps if s["action"] == "wait-job"]
        job_id = waits[0]["result"]["job_id"]
        assert [w["result"]["status"] for w in waits] == ["SUCCEEDED", "SUCCEEDED"]
        assert waits[1]["result"]["job_id"] == job_id  # finished: nothing resubmitted it
        kinds = [x["kind"] for x in lines if x["type"] == "event"]
        assert "recovered" in kinds[kinds.index("preempted") :], kinds  # a new head
        # Another process on the same journal, after the head was replaced.
        second.write_text(f"wait-job {job_id} SUCCEEDED --timeout 20s\n")
        rc, lines, err = run(cfg, tmp_path, second)
        (wait,) = [x for x in lines if x["type"] == "step" and x["action"] == "wait-job"]
        assert wait["ok"] and wait["result"]["status"] == "SUCCEEDED", (wait, err[-2000:])
        assert rc == 0, err[-3000:]
    finally:
        assert_pod_gone(tmp_path / "pod")
