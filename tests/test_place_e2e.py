"""A zone move is remembered (issue 25, item 1), on the GCP-faithful emulator, no Ray.

The slice is preempted while its zone has no capacity; the recovery's own recreate and
wait-ready steps fail it over to the next zone (eager failover). Then the process that did
it goes away, and the front ends that come after must find the node where it is: a fresh
``phantom status --json`` (same state dir: by the place record) and a fresh ``--script``
run (a state dir of its own, no record: by listing every configured zone).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from benchmarks.pods import free_ray_ports, gcp_user_key
from console.config import load_config
from console.wiring import make_services
from emulators.tpu_pod import client as pod_client
from emulators.tpu_pod.client import PodInfo
from tests.script.test_e2e import ROOT, child_env, phantom_argv
from tests.support.emulator_helpers import running_pod
from tests.support.waiting import until

ZONES = ["local-a", "local-b", "local-c"]


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return json.dumps(value)


def write_gcp_config(pod: PodInfo, tmp_path: Path) -> Path:
    """A config file for the gcp path on ``pod``, failing over eagerly across ZONES."""
    sections: dict[str, dict[str, Any]] = {
        "cluster": {
            "provider": "gcp",
            "project": pod.project,
            "zone": pod.zone,
            "node_name": pod.node_name,
            "accelerator_type": pod.accelerator_type,
            "api_endpoint": f"http://{pod.tpu_api}",
        },
        "ssh": {
            "user": pod.ssh_user,
            "key": str(pod.client_key),
            "port": pod.ssh_port,
            "connect_timeout_s": 5.0,
            "retries": 1,
        },
        "ray": free_ray_ports(pod.hosts[0].ip),
        "wandb": {"mode": "offline", "dir": str(tmp_path / "wandb")},
        "recovery": {"poll_interval_s": 1.0, "ready_timeout_s": 60.0, "auto": False},
        "capacity": {"zones": ZONES, "failover": "eager-failover", "backoff_s": 1.0},
    }
    text = "\n".join(
        f"[{name}]\n" + "".join(f"{k} = {_toml(v)}\n" for k, v in body.items())
        for name, body in sections.items()
    )
    path = tmp_path / "phantom.toml"
    path.write_text(text)
    load_config(path)  # the test's own config must be valid
    return path


def run_phantom(tmp_path: Path, state: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = child_env(tmp_path)
    env["XDG_STATE_HOME"] = str(state)
    return subprocess.run(
        phantom_argv(*args),
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.e2e
@pytest.mark.timeout(300)
async def test_after_a_zone_failover_fresh_front_ends_find_the_node(tmp_path: Path) -> None:
    key = gcp_user_key(tmp_path / "google_compute_engine")
    with running_pod(
        tmp_path / "pod", hosts=2, faithful=True, zones=ZONES, ssh_user="alice", ssh_key=key
    ) as pod:
        assert pod.zone == "local-a"
        cfg_path = write_gcp_config(pod, tmp_path)
        state = tmp_path / "state"
        svc = make_services(load_config(cfg_path), state_dir=state / "phantom")
        try:
            assert (await svc.refresh()).zone == "local-a"
            # The slice is reclaimed and its zone has no capacity for ten minutes.
            await asyncio.to_thread(pod_client.set_zone, pod.run_dir, "local-a", None, 600.0)
            await asyncio.to_thread(pod_client.preempt, pod.run_dir, "all")

            async def preempted() -> bool:
                return (await svc.refresh()).tpu_state == "PREEMPTED"

            await until(preempted, 30, "the slice PREEMPTED")
            # The recovery's own steps: recreate (by the capacity strategy), wait READY.
            hosts = [h.name for h in svc.snapshot().hosts]
            res = await svc.backend.recreate(hosts)  # type: ignore[attr-defined]
            assert res.ok, res.message
            ready = await svc.wait_ready(60.0)
            assert ready.ok, ready.message
            assert (await svc.refresh()).zone == "local-b"
        finally:
            await svc.stop()
            svc.close_journal()
        moved = await asyncio.to_thread(pod_client.pod_status, pod.run_dir)
        assert moved is not None and moved.zone == "local-b"

        # A fresh one-shot status, with the journal the recovery wrote: READY in local-b.
        proc = await asyncio.to_thread(
            run_phantom, tmp_path, state, "--config", str(cfg_path), "status", "--json"
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr
        snap = json.loads(proc.stdout)
        assert snap["pod"]["tpu_state"] == "READY" and snap["pod"]["zone"] == "local-b"
        assert [h["ip"] for h in snap["pod"]["hosts"]] == [h.ip for h in moved.hosts]

        # A fresh script on another machine's state (no record): found by listing the zones.
        script = tmp_path / "check.phantom"
        script.write_text("wait-ready --timeout 30\nstatus\n")
        proc = await asyncio.to_thread(
            run_phantom,
            tmp_path,
            tmp_path / "elsewhere",
            "--config",
            str(cfg_path),
            "--script",
            str(script),
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr
        steps = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
        (status,) = [s for s in steps if s.get("type") == "step" and s["action"] == "status"]
        assert status["ok"] and status["result"]["pod"]["zone"] == "local-b"
        assert status["result"]["pod"]["tpu_state"] == "READY"
        # ... and adopted: still one node for the pod, the one in local-b.
        after = await asyncio.to_thread(pod_client.pod_status, pod.run_dir)
        assert after is not None and after.zone == "local-b" and after.state == "READY"
