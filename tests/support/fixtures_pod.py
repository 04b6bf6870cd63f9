"""Pytest plugin: an emulated 4-host spot pod (``pod``; ``quiet_pod``, one a module shares)
and one running Ray (``ray_pod``; ``quiet_ray_pod``, one a module shares).

Enabled by ``pytest_plugins = ["tests.support.fixtures_pod"]`` in tests/conftest.py. Every
fixture uses free ports and its own run dir, so concurrent test runs on one
machine never collide, and tears everything down also when the test fails,
then checks that no process of the pod survived.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from console.services.backends.tpu_vm import raycmd
from console.wiring.pod import LOCAL_RAY_SIZING
from emulators.tpu_pod.client import PodInfo, leftover_pids, pod_status, start_pod, stop_pod
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


@pytest.fixture(scope="module")
def _module_ray_pod(quiet_pod: PodInfo) -> Iterator[RayPod]:
    try:
        yield start_ray(quiet_pod)
    finally:
        stop_ray(quiet_pod)


@pytest.fixture
def quiet_ray_pod(_module_ray_pod: RayPod) -> RayPod:
    """One ``ray_pod`` for a module's tests that only run jobs to their end: none preempts,
    stops or adds a host or a Ray node (a test that does takes ``ray_pod``). Each test finds
    it as a fresh one would be: every host READY, every Ray node alive, no job unfinished."""
    wait_until(
        lambda: ray_pod_is_clean(_module_ray_pod),
        60,
        "the shared Ray pod: 4 hosts READY, 4 Ray nodes alive, no job left running",
    )
    return _module_ray_pod


def ray_pod_is_clean(ray_pod: RayPod) -> bool:
    """Every host READY, every host's Ray node alive, and no job PENDING or RUNNING."""
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
    alive = {n["raylet"]["nodeManagerAddress"] for n in nodes if n["raylet"]["state"] == "ALIVE"}
    unfinished = [j for j in jobs if j.get("status") in ("PENDING", "RUNNING")]
    return alive == {h.ip for h in ray_pod.pod.hosts} and not unfinished


__all__ = [
    "FAST_FAILURE_DETECTION",
    "POD_HOSTS",
    "RayPod",
    "free_port",
    "pod",
    "quiet_pod",
    "quiet_ray_pod",
    "ray_pod",
    "ray_pod_is_clean",
    "ssh_run",
    "start_ray",
    "start_test_pod",
    "start_worker",
    "stop_ray",
    "stop_test_pod",
]
