"""Ray really runs on the emulated pod: started over SSH, killed by preemption.

The tests share one pod and its Ray cluster (``shared_ray_pod``, healed before each): Ray
still lists, as dead, the nodes an earlier test lost, so they read its alive nodes only, in
any order."""

from __future__ import annotations

import asyncio
import json
import os
import time
import urllib.request

import grpc
import pytest
from google.auth.credentials import AnonymousCredentials
from google.cloud import tpu_v2
from google.cloud.tpu_v2.services.tpu.transports import TpuGrpcAsyncIOTransport

from console.services.backends.tpu_vm import raycmd
from emulators.tpu_pod import client
from emulators.tpu_pod.procs import find_marked, marker_value
from tests.support.fixtures_pod import RayPod, ssh_run, start_worker
from tests.support.waiting import wait_until

pytestmark = pytest.mark.slow

NODES = """
result = sorted(
    [n["NodeManagerAddress"], n["NodeName"], n["Alive"], n["Resources"].get("TPU", 0)]
    for n in ray.nodes()
    if n["Alive"]
)
"""

TPU_TASKS = """
import os, time

@ray.remote(resources={"TPU": 8}, num_cpus=0)
def on_tpu_host():
    time.sleep(1.0)  # sleep-noqa: hold the host's 8 TPUs so the 4 tasks spread over 4 nodes
    return os.environ["PHANTOM_HOST"], ray.util.get_node_ip_address()

result = ray.get([on_tpu_host.remote() for _ in range(4)])
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _all_pids() -> list[int]:
    return [int(e) for e in os.listdir("/proc") if e.isdigit()]


def _ppid(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return int(fh.read().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return -1


def _pids_named(ray_pod: RayPod, host: int, name: str) -> list[int]:
    """Pids of ``host``'s processes whose command line mentions ``name``."""
    run_id = client.read_run_id(ray_pod.run_dir)
    out = []
    for pid in find_marked(marker_value(run_id, ray_pod.pod.hosts[host].name)):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                if name.encode() in fh.read():
                    out.append(pid)
        except OSError:
            continue
    return out


def test_raycmd_over_ssh_forms_four_node_cluster_and_runs_tpu_tasks(shared_ray_pod: RayPod) -> None:
    nodes = shared_ray_pod.driver(NODES)
    assert nodes == [
        [h.ip, h.name, True, 8.0] for h in sorted(shared_ray_pod.pod.hosts, key=lambda h: h.ip)
    ]
    placements = shared_ray_pod.driver(TPU_TASKS)
    assert isinstance(placements, list)
    hosts = {host for host, _ in placements}
    assert hosts == {h.name for h in shared_ray_pod.pod.hosts}  # incl. workers 1..3
    assert all(ip == shared_ray_pod.pod.host(host).ip for host, ip in placements)

    # The dashboard (and so the job API) listens on loopback at the advertised URL.
    with urllib.request.urlopen(f"{shared_ray_pod.dashboard_url}/api/version", timeout=10) as resp:
        assert "ray_version" in json.loads(resp.read())

    # A job submitted from here through the dashboard URL runs on the head host.
    from ray.job_submission import JobStatus, JobSubmissionClient

    jobs = JobSubmissionClient(shared_ray_pod.dashboard_url)
    job_id = jobs.submit_job(
        entrypoint="python -c \"import os; print('on', os.environ['PHANTOM_HOST'])\""
    )
    ended = {JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.STOPPED}
    wait_until(lambda: jobs.get_job_status(job_id) in ended, 180, f"job {job_id} to end", 0.5)
    status = jobs.get_job_status(job_id)
    assert status == JobStatus.SUCCEEDED, jobs.get_job_logs(job_id)
    assert "on phantom-pod-w0" in jobs.get_job_logs(job_id)


def test_ray_stop_on_one_emulated_host_leaves_the_others_running(shared_ray_pod: RayPod) -> None:
    assert _pids_named(shared_ray_pod, 3, "raylet")
    stopped = ssh_run(shared_ray_pod.pod, 3, raycmd.stop_command())
    assert stopped.returncode == 0, stopped.stderr
    assert not _pids_named(shared_ray_pod, 3, "raylet")
    for host in (0, 1, 2):
        assert _pids_named(shared_ray_pod, host, "raylet"), f"host {host} lost its raylet"


def test_preempting_host_2_kills_its_ray_node_and_recreate_rejoins(shared_ray_pod: RayPod) -> None:
    pod = shared_ray_pod.pod
    started = ssh_run(pod, 2, "setsid nohup sleep 1000 </dev/null >/dev/null 2>&1 & echo $!")
    sleeper = int(started.stdout.strip())
    raylets = _pids_named(shared_ray_pod, 2, "raylet")
    assert raylets and _alive(sleeper)
    # Found independently of the emulator's tracking: the raylet's children
    # (ray::DashboardAgent, ray::IDLE workers...) hide the marker via setproctitle.
    raylet_children = [p for p in _all_pids() if _ppid(p) in raylets]
    assert raylet_children

    t0 = time.monotonic()
    after = client.preempt(shared_ray_pod.run_dir, 2)
    gone_after = time.monotonic() - t0
    assert not _alive(sleeper) and not any(_alive(p) for p in raylets + raylet_children)
    assert client.leftover_pids(shared_ray_pod.run_dir)  # the other hosts still run
    assert not find_marked(marker_value(after.run_id, pod.hosts[2].name))
    print(f"preempt -> raylet and sleep gone: {gone_after:.3f}s (client round trip)")

    async def node_state() -> tpu_v2.Node:
        channel = grpc.aio.insecure_channel(pod.tpu_api)
        transport = TpuGrpcAsyncIOTransport(channel=channel, credentials=AnonymousCredentials())
        async with channel:
            return await tpu_v2.TpuAsyncClient(transport=transport).get_node(name=pod.node_path)

    node = asyncio.run(node_state())
    assert node.state == tpu_v2.Node.State.PREEMPTED
    assert [s.worker_id for s in node.symptoms] == ["2"]

    dead = shared_ray_pod.driver(
        """
import time
deadline = time.monotonic() + 120
while time.monotonic() < deadline:
    alive = {}
    for n in ray.nodes():  # an address's nodes: alive if any is (earlier tests' dead too)
        alive[n["NodeManagerAddress"]] = alive.get(n["NodeManagerAddress"], False) or n["Alive"]
    if alive.get("127.0.0.12") is False:
        break
    time.sleep(0.2)  # sleep-noqa: the driver's own poll, on the host
result = alive
"""
    )
    assert dead == {"127.0.0.10": True, "127.0.0.11": True, "127.0.0.12": False, "127.0.0.13": True}

    client.recreate(shared_ray_pod.run_dir, 2)
    ready = client.wait_for(shared_ray_pod.run_dir, lambda p: p.state == "READY", 60, "READY")
    assert ready.hosts[2].host_key != pod.hosts[2].host_key
    listing = ssh_run(ready, 2, "ls -A ~; ls -A $TMPDIR")
    assert listing.returncode == 0 and listing.stdout.split() == [".local", "tmp"]

    start_worker(ready, 2, shared_ray_pod.gcs)  # the recovery loop's "join workers" step
    alive = shared_ray_pod.driver(
        'result = sorted(n["NodeManagerAddress"] for n in ray.nodes() if n["Alive"])'
    )
    assert alive == ["127.0.0.10", "127.0.0.11", "127.0.0.12", "127.0.0.13"]
