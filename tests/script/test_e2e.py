"""`phantom --script` against the real emulator (and real Ray), in a subprocess.

The CI "must show": the shipped example (examples/preemption_drill.phantom) brings a pod
up, bootstraps, starts Ray, opens the tunnel, submits a short PPO job, preempts a worker,
recovers, waits for the job to succeed, tears down and stops the pod. Every stdout line is
parsed; the event sequence is checked. Also: Ctrl-C after `pod up` brings that pod down.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from benchmarks.pods import free_ray_ports
from console.config import load_config
from console.script.parse import parse_script
from console.wiring import unbuilt_services
from emulators.tpu_pod.client import leftover_pids, pod_status, stop_pod
from tests.support import REPO
from tests.support.waiting import wait_until

ROOT = REPO
EXAMPLE = ROOT / "examples" / "preemption_drill.phantom"
FAKE_KEY = "phantom-test-wandb-key-0123456789abcdef"  # must never appear in any output


def write_config(tmp_path: Path, hosts: int = 4) -> Path:
    ports = free_ray_ports("127.0.0.10")
    run_dir = tmp_path / "pod"
    cfg = tmp_path / "phantom.toml"
    cfg.write_text(
        f"""
[cluster]
provider = "local"
hosts = {hosts}
run_dir = "{run_dir}"

[ray]
gcs_port = {ports["gcs_port"]}
dashboard_port = {ports["dashboard_port"]}
client_port = {ports["client_port"]}
local_dashboard_port = {ports["local_dashboard_port"]}
local_client_port = {ports["local_client_port"]}
num_cpus = 2
object_store_mb = 128

[wandb]
mode = "offline"
dir = "{tmp_path / "wandb"}"

[recovery]
poll_interval_s = 1.0
ready_timeout_s = 180.0
"""
    )
    load_config(cfg)  # the test's own config must be valid
    return cfg


def child_env(tmp_path: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            "RAY_USAGE_STATS_ENABLED": "0",
            "WANDB_MODE": "offline",
            "WANDB_SILENT": "true",
            "WANDB_DIR": str(tmp_path / "wandb"),
            "WANDB_API_KEY": FAKE_KEY,
            "PHANTOM_NO_CONFIG_DISCOVERY": "1",
            "XDG_STATE_HOME": str(tmp_path / "state"),
            "XDG_CONFIG_HOME": str(tmp_path / "config"),
            "PYTHONUNBUFFERED": "1",
        }
    )
    return env


def phantom_argv(*args: str) -> list[str]:
    exe = Path(sys.executable).parent / "phantom"
    base = [str(exe)] if exe.exists() else [sys.executable, "-m", "console.cli"]
    return [*base, *args]


def assert_pod_gone(run_dir: Path) -> None:
    stop_pod(run_dir)  # no-op when the script already did it; a safety net when it did not
    assert pod_status(run_dir) is None
    assert leftover_pids(run_dir) == [], "processes of the emulated pod survived"


@pytest.mark.slow
@pytest.mark.e2e
@pytest.mark.timeout(1800)
def test_shipped_preemption_drill_runs_against_the_emulator(tmp_path: Path) -> None:
    cfg = write_config(tmp_path)
    run_dir = tmp_path / "pod"
    try:
        proc = subprocess.run(
            phantom_argv("--config", str(cfg), "--script", str(EXAMPLE)),
            cwd=ROOT,
            env=child_env(tmp_path),
            capture_output=True,
            text=True,
            timeout=1700,
        )
    finally:
        assert_pod_gone(run_dir)
    (tmp_path / "stdout.jsonl").write_text(proc.stdout)
    (tmp_path / "stderr.txt").write_text(proc.stderr)
    assert FAKE_KEY not in proc.stdout and FAKE_KEY not in proc.stderr
    lines = [json.loads(line) for line in proc.stdout.splitlines()]  # every line is JSON
    assert proc.returncode == 0, (
        f"exit {proc.returncode}\nstderr tail:\n{proc.stderr[-4000:]}\n"
        f"failed: {lines[-1] if lines else None}"
    )
    check_drill_output(lines)


def check_drill_output(lines: list[dict[str, Any]]) -> None:
    expected = [
        s.action
        for s in parse_script(
            EXAMPLE.read_text(), unbuilt_services(load_config(None, discover=False))
        ).lines
    ]
    steps = [x for x in lines if x["type"] == "step"]
    assert [s["action"] for s in steps] == expected
    assert all(s["ok"] for s in steps), [s for s in steps if not s["ok"]]
    by_action = {s["action"]: s for s in steps}
    job_id = by_action["submit"]["result"]["job_id"]
    assert by_action["ray-up"]["ok"] and by_action["bootstrap"]["ok"]
    final = [s for s in steps if s["action"] == "wait-job"][-1]["result"]
    assert final["status"] == "SUCCEEDED"
    job_id = final["job_id"]  # the same job, or the one the watchdog resubmitted it as
    status = by_action["status"]["result"]
    assert status["ray"]["alive_nodes"] == 4 and status["pod"]["ready_hosts"] == 4

    events = [x for x in lines if x["type"] == "event"]
    kinds = [e["kind"] for e in events]
    pre = [i for i, e in enumerate(events) if e["kind"] == "preempted"]
    assert pre, f"no preempted event; saw {kinds}"
    assert events[pre[0]]["host"].endswith("-w2")
    rec = [i for i, e in enumerate(events) if e["kind"] == "recovered" and i > pre[0]]
    assert rec, f"no recovered event after the preemption; saw {kinds}"
    mttr = events[rec[0]]["mttr_s"]
    assert isinstance(mttr, int | float) and mttr > 0
    job_states = [e["status"] for e in events if e["kind"] == "job_state" and e["job_id"] == job_id]
    assert job_states[-1] == "SUCCEEDED", job_states
    assert "RUNNING" in job_states or "PENDING" in job_states
    # Event lines come in time order and nothing is reported twice.
    keys = [json.dumps(e, sort_keys=True) for e in events]
    assert len(keys) == len(set(keys))
    summary = lines[-1]
    assert summary["type"] == "summary" and summary["ok"] and summary["exit_code"] == 0


@pytest.mark.timeout(300)
def test_interrupt_after_pod_up_brings_that_pod_down(tmp_path: Path) -> None:
    """Real emulator, real SIGINT: exit 130 and no process of the pod left."""
    cfg = write_config(tmp_path, hosts=2)
    run_dir = tmp_path / "pod"
    script = tmp_path / "s.phantom"
    script.write_text("pod up --hosts 2 --ready-delay 0.2\nsleep 1h\npod down\n")
    proc = subprocess.Popen(
        phantom_argv("--config", str(cfg), "--script", str(script)),
        cwd=ROOT,
        env=child_env(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        first = json.loads(proc.stdout.readline())
        assert first["action"] == "pod up" and first["ok"], first
        assert [h["ip"] for h in first["result"]["hosts"]] == ["127.0.0.10", "127.0.0.11"]
        assert pod_status(run_dir) is not None
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        with contextlib.suppress(AssertionError):  # asserted just below, with details
            wait_until(lambda: pod_status(run_dir) is None, 30, "the pod to go down", step=0.1)
        alive_after_script = pod_status(run_dir) is not None
        assert_pod_gone(run_dir)
    assert proc.returncode == 130, err
    assert not alive_after_script, "the script left its pod running after Ctrl-C"
    rest = [json.loads(line) for line in out.splitlines()]
    assert rest[0]["action"] == "sleep" and rest[0]["result"] == {"error": "interrupted"}
    assert rest[-1]["cleanup"]["pod_down"] is True and rest[-1]["interrupted"] == "SIGINT"
