"""Pytest plugin: an emulated 4-host spot pod (``pod``; ``quiet_pod``, one a module shares)
and one running Ray (``ray_pod``; ``shared_ray_pod``, one a module shares, healed between
tests).

Enabled by ``pytest_plugins = ["tests.support.fixtures_pod"]`` in tests/conftest.py. Every
fixture uses free ports and its own run dir, so concurrent test runs on one
machine never collide, and tears everything down also when the test fails,
then checks that no process of the pod survived.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from console.services.backends.tpu_vm import raycmd
from console.wiring.pod import LOCAL_RAY_SIZING
from emulators.tpu_pod.client import (
    PodInfo,
    leftover_pids,
    pod_status,
    recreate,
    start_pod,
    stop_pod,
    wait_for,
)
from emulators.tpu_pod.procs import find_marked, marker_value
from tests.support.waiting import wait_until

POD_HOSTS = 4
POD_READY_DELAY = 0.2  # seconds; small so recreate-heavy tests stay fast


def start_test_pod(run_dir: Path, hosts: int = POD_HOSTS, **kwargs: object) -> PodInfo:
    """start_pod with free ports; on failure nothing is left running."""
    try:
        return start_pod(
            run_dir,
            hosts=hosts,
            ssh_port=0,
            api_port=0,
            ready_delay=float(kwargs.pop("ready_delay", POD_READY_DELAY)),  # type: ignore[arg-type]
            timeout=120.0,
            **kwargs,  # type: ignore[arg-type]
        )
    except BaseException:
        stop_pod(run_dir)
        raise


def stop_test_pod(run_dir: Path) -> None:
    """stop_pod, then fail loudly if any process of the pod survived."""
    stop_pod(run_dir)
    left = leftover_pids(run_dir)
    assert not left, f"processes of the emulated pod survived `down`: {left}"


@pytest.fixture
def pod(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PodInfo]:
    """A READY 4-host emulated pod in a tmp run dir; stopped afterwards."""
    yield from _test_pod(tmp_path_factory, "pod")


@pytest.fixture(scope="module")
def quiet_pod(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PodInfo]:
    """One READY 4-host pod for a module's tests that only run commands on it: none of them
    preempts, recreates or faults a host, changes its keys, or leaves a process running
    (a test that does takes ``pod``). A bring-up is most of such a test's time."""
    yield from _test_pod(tmp_path_factory, "quiet-pod")


def _test_pod(factory: pytest.TempPathFactory, name: str) -> Iterator[PodInfo]:
    run_dir = factory.mktemp(name)
    info = start_test_pod(run_dir)
    try:
        yield info
    finally:
        stop_test_pod(run_dir)


def ssh_run(
    info: PodInfo,
    host: int | str,
    command: str,
    timeout: float = 60.0,
    input_text: str | None = None,
    check: bool = False,
) -> subprocess.CompletedProcess[str]:
    """Run ``command`` on ``host`` with the OpenSSH client (strict host keys)."""
    return subprocess.run(
        info.ssh_argv(host, command),
        capture_output=True,
        text=True,
        timeout=timeout,
        input=input_text,
        check=check,
        env={**os.environ, "SSH_AUTH_SOCK": ""},
    )


# GCS notices a dead raylet after period x threshold instead of Ray's ~15 s default,
# so "Ray marks the preempted node dead" is observable quickly in tests.
FAST_FAILURE_DETECTION = {
    "RAY_health_check_initial_delay_ms": "0",
    "RAY_health_check_period_ms": "500",
    "RAY_health_check_timeout_ms": "1000",
    "RAY_health_check_failure_threshold": "3",
}


def free_port(ip: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((ip, 0))
        port: int = s.getsockname()[1]
        return port


@dataclass(frozen=True)
class RayPod:
    """A pod with Ray running: head on host 0, workers on the other hosts."""

    pod: PodInfo
    gcs: str  # "127.0.0.10:PORT"
    dashboard_url: str  # "http://127.0.0.1:PORT"
    client_address: str  # "ray://127.0.0.10:PORT"
    head: raycmd.RayHeadOptions

    @property
    def run_dir(self) -> Path:
        return self.pod.run_dir

    def ssh(
        self, host: int | str, command: str, **kwargs: object
    ) -> subprocess.CompletedProcess[str]:
        return ssh_run(self.pod, host, command, **kwargs)  # type: ignore[arg-type]

    def driver(self, code: str, timeout: float = 180.0) -> object:
        """Run ``code`` with Python on host 0 after ``ray.init(address="auto")``.

        The code sets ``result``; it comes back JSON-decoded. Raises with the
        remote stderr if the driver fails.
        """
        script = (
            "import json, ray\n"
            'ray.init(address="auto", logging_level="ERROR", log_to_driver=False)\n'
            "result = None\n" + code + "\nprint('RESULT ' + json.dumps(result))\n"
        )
        proc = ssh_run(self.pod, 0, "python -", timeout=timeout, input_text=script)
        for line in proc.stdout.splitlines():
            if line.startswith("RESULT "):
                return json.loads(line[len("RESULT ") :])
        raise AssertionError(f"driver failed (rc {proc.returncode}):\n{proc.stderr[-3000:]}")


def node_options(
    info: PodInfo, index: int, env: Mapping[str, str] | None = None
) -> raycmd.RayNodeOptions:
    host = info.hosts[index]
    size = LOCAL_RAY_SIZING  # the emulated hosts share this machine: small nodes
    return raycmd.RayNodeOptions(
        node_ip=host.ip,
        node_name=host.name,
        env=dict(env or {}),
        num_cpus=size.num_cpus,
        object_store_memory=size.object_store_memory,
        memory=size.memory,
    )


def _ray_start(info: PodInfo, index: int, command: str, attempts: int = 3) -> None:
    """Run a ``ray start`` over SSH, retrying after ``ray stop -f`` on that host.

    Ray gives a raylet a hard-coded 30 s to register with the GCS; on a
    2-core machine shared with other test runs that is sometimes too short.
    """
    for attempt in range(1, attempts + 1):
        result = ssh_run(info, index, command, 300)
        if result.returncode == 0:
            return
        if attempt == attempts:
            raise AssertionError(
                f"`ray start` on host {index} failed {attempts} times:\n{result.stderr[-3000:]}"
            )
        ssh_run(info, index, raycmd.stop_command(), 120)


def start_worker(info: PodInfo, index: int, gcs: str) -> None:
    """``ray start --address`` on host ``index`` over SSH; raises with its stderr."""
    _ray_start(info, index, raycmd.worker_start_command(node_options(info, index), gcs))


def start_ray(info: PodInfo, workers: Sequence[int] | None = None) -> RayPod:
    """Head on host 0 and workers (default: all other hosts) over real SSH."""
    head = raycmd.RayHeadOptions(
        gcs_port=free_port(info.hosts[0].ip),
        dashboard_port=free_port(),
        client_server_port=free_port(info.hosts[0].ip),
    )
    cmd = raycmd.head_start_command(node_options(info, 0, FAST_FAILURE_DETECTION), head)
    _ray_start(info, 0, cmd)
    gcs = raycmd.gcs_address(info.hosts[0].ip, head.gcs_port)
    # One after the other: in parallel they starve each other on 2 cores.
    for i in list(workers) if workers is not None else range(1, len(info.hosts)):
        start_worker(info, i, gcs)
    ray_pod = RayPod(
        pod=info,
        gcs=gcs,
        dashboard_url=f"http://127.0.0.1:{head.dashboard_port}",
        client_address=f"ray://{info.hosts[0].ip}:{head.client_server_port}",
        head=head,
    )
    _wait_dashboard(ray_pod.dashboard_url)
    return ray_pod


def _wait_dashboard(url: str, timeout: float = 60.0) -> None:
    def answers() -> bool:
        try:
            with urllib.request.urlopen(f"{url}/api/version", timeout=5) as resp:
                return bool(resp.status == 200)
        except OSError:
            return False

    wait_until(answers, timeout, f"the Ray dashboard at {url} to answer")


def stop_ray(info: PodInfo) -> None:
    """``ray stop -f`` on every host (host-scoped on the emulator); ignores dead hosts."""
    with ThreadPoolExecutor(max_workers=len(info.hosts)) as pool:
        list(
            pool.map(lambda i: ssh_run(info, i, raycmd.stop_command(), 120), range(len(info.hosts)))
        )


@pytest.fixture
def ray_pod(pod: PodInfo) -> Iterator[RayPod]:
    """``pod`` plus a 4-node Ray cluster started over SSH with raycmd."""
    try:
        yield start_ray(pod)
    finally:
        stop_ray(pod)


class SharedRayPod:
    """A module's pod and its Ray cluster, made whole again before each test that borrows it
    (``shared_ray_pod``): a test may preempt, recreate or stop a host, stop a Ray node or the
    head, and the next one still finds the cluster a fresh ``ray_pod`` would be."""

    def __init__(self, info: PodInfo) -> None:
        self.run_dir = info.run_dir
        self.ray = start_ray(info)

    def heal(self) -> RayPod:
        """Every host READY (a host not READY is recreated), a raylet of this cluster on
        each (a lost one started again; a lost head, or a cluster a test replaced, means Ray
        restarted on every host), one ALIVE Ray node per host and no job unfinished."""
        info = _pod_status(self.run_dir)
        down = [h.index for h in info.hosts if h.state != "READY"]
        for index in down:
            if info.hosts[index].state != "CREATING":
                recreate(self.run_dir, index)
        if down:
            info = wait_for(
                self.run_dir,
                lambda p: all(h.state == "READY" for h in p.hosts),
                120,
                "every host READY again",
            )
        if _head_answers(self.ray) and _raylet_running(info, 0):
            lost = [h.index for h in info.hosts[1:] if not _raylet_running(info, h.index)]
            for index in lost:
                ssh_run(info, index, raycmd.stop_command(), 120)  # what is left of it
                start_worker(info, index, self.ray.gcs)
        else:
            stop_ray(info)
            self.ray = start_ray(info)
        self.ray = replace(self.ray, pod=info)  # the hosts as they are now (keys, generations)
        _stop_unfinished_jobs(self.ray)
        wait_until(
            lambda: ray_pod_is_clean(self.ray),
            60,
            "the shared Ray pod: every host READY, one Ray node alive on each, no job running",
        )
        return self.ray


def _pod_status(run_dir: Path) -> PodInfo:
    info = pod_status(run_dir)
    assert info is not None, f"the shared pod's emulator is gone ({run_dir})"
    return info


def _head_answers(ray_pod: RayPod) -> bool:
    try:
        with urllib.request.urlopen(f"{ray_pod.dashboard_url}/api/version", timeout=5) as resp:
            return bool(resp.status == 200)
    except OSError:
        return False


def _raylet_running(info: PodInfo, index: int) -> bool:
    """A raylet among the processes of host ``index`` (a preempted host's processes are all
    gone: a recreated one has none until Ray is started on it again)."""
    for pid in find_marked(marker_value(info.run_id, info.hosts[index].name)):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                if b"raylet" in fh.read():
                    return True
        except OSError:
            continue
    return False


def _stop_unfinished_jobs(ray_pod: RayPod) -> None:
    """Stop the jobs an earlier test left PENDING or RUNNING (one that failed midway)."""
    try:
        with urllib.request.urlopen(f"{ray_pod.dashboard_url}/api/jobs/", timeout=10) as r:
            jobs = json.loads(r.read().decode())
    except (OSError, ValueError):
        return
    for job in jobs:
        if job.get("status") in ("PENDING", "RUNNING") and job.get("submission_id"):
            stop = urllib.request.Request(
                f"{ray_pod.dashboard_url}/api/jobs/{job['submission_id']}/stop", method="POST"
            )
            with contextlib.suppress(OSError), urllib.request.urlopen(stop, timeout=30):
                pass


@pytest.fixture(scope="module")
def _module_ray_pod(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SharedRayPod]:
    run_dir = tmp_path_factory.mktemp("shared-ray-pod")
    shared = SharedRayPod(start_test_pod(run_dir))
    try:
        yield shared
    finally:
        try:
            stop_ray(_pod_status(run_dir))
        finally:
            stop_test_pod(run_dir)


@pytest.fixture
def shared_ray_pod(_module_ray_pod: SharedRayPod) -> RayPod:
    """One ``ray_pod`` for a module's tests, brought up once (a pod and Ray cost ~35 s in
    CI). A test may preempt, recreate or stop hosts and Ray nodes, or replace the cluster:
    the next finds it healed (``SharedRayPod.heal``), as a fresh one would be: every host
    READY, one Ray node alive on each, no job unfinished. What it cannot give back is a
    history: Ray still lists the nodes an earlier test lost, as dead (a test that needs a
    cluster with no past takes ``ray_pod``)."""
    return _module_ray_pod.heal()


def ray_pod_is_clean(ray_pod: RayPod) -> bool:
    """Every host READY, one Ray node alive on each host, and no job PENDING or RUNNING."""
    status = pod_status(ray_pod.run_dir)
    if status is None or any(h.state != "READY" for h in status.hosts):
        return False
    try:
        with urllib.request.urlopen(f"{ray_pod.dashboard_url}/nodes?view=summary", timeout=5) as r:
            nodes = json.loads(r.read().decode())["data"]["summary"]
        with urllib.request.urlopen(f"{ray_pod.dashboard_url}/api/jobs/", timeout=5) as r:
            jobs = json.loads(r.read().decode())
    except (OSError, ValueError, KeyError):
        return False
    alive = sorted(
        n["raylet"]["nodeManagerAddress"] for n in nodes if n["raylet"]["state"] == "ALIVE"
    )
    unfinished = [j for j in jobs if j.get("status") in ("PENDING", "RUNNING")]
    return alive == sorted(h.ip for h in ray_pod.pod.hosts) and not unfinished


__all__ = [
    "FAST_FAILURE_DETECTION",
    "POD_HOSTS",
    "RayPod",
    "free_port",
    "pod",
    "quiet_pod",
    "ray_pod",
    "ray_pod_is_clean",
    "shared_ray_pod",
    "ssh_run",
    "start_ray",
    "start_test_pod",
    "start_worker",
    "stop_ray",
    "stop_test_pod",
]
