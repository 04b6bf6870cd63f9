"""`phantom status` in a subprocess against the real services and the emulator (no Ray)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from emulators.tpu_pod.client import pod_status, start_pod
from tests.script.test_e2e import ROOT, assert_pod_gone, child_env, phantom_argv, write_config


def status(cfg: Path, tmp_path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        phantom_argv("--config", str(cfg), "status", *extra),
        cwd=ROOT,
        env=child_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=240,
    )


@pytest.mark.timeout(300)
def test_status_without_a_pod_fails_clearly_and_starts_nothing(tmp_path: Path) -> None:
    cfg = write_config(tmp_path, hosts=2)
    proc = status(cfg, tmp_path, "--json")
    assert proc.returncode == 1
    problem = json.loads(proc.stdout)  # a monitor parsing stdout still gets one object
    assert problem["ok"] is False and "no pod emulator is running" in problem["error"]
    assert proc.stderr.startswith("phantom status: cannot reach the local cluster 'phantom-pod'")
    assert "phantom pod up" in proc.stderr and "Traceback" not in proc.stderr
    assert pod_status(tmp_path / "pod") is None, "a status query must never start a pod"


@pytest.mark.timeout(300)
def test_status_json_and_table_against_a_running_pod(tmp_path: Path) -> None:
    cfg = write_config(tmp_path, hosts=2)
    run_dir = tmp_path / "pod"
    try:
        start_pod(run_dir, hosts=2, ssh_port=0, api_port=0, ready_delay=0.2, timeout=120)
        proc = status(cfg, tmp_path, "--json")
        table = status(cfg, tmp_path)
    finally:
        assert_pod_gone(run_dir)
    assert proc.returncode == 0, proc.stderr
    (line,) = proc.stdout.splitlines()
    snap = json.loads(line)
    assert snap["type"] == "status" and snap["reachable"] is True
    pod = snap["pod"]
    assert pod["provider"] == "local" and pod["tpu_state"] == "READY"
    assert [(h["name"], h["ip"], h["tpu_state"]) for h in pod["hosts"]] == [
        ("phantom-pod-w0", "127.0.0.10", "READY"),
        ("phantom-pod-w1", "127.0.0.11", "READY"),
    ]
    assert snap["ray"]["alive_nodes"] == 0  # no Ray started
    assert isinstance(snap["jobs"], list) and isinstance(snap["cadence"], list)
    assert snap["recovery"]["active"] is False
    assert table.returncode == 0, table.stderr
    assert "phantom-pod-w1" in table.stdout and "127.0.0.11" in table.stdout
