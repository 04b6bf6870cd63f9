"""Emulated pods for tests and benchmarks: start one, a Config driving it, stop it.

Tests and benchmarks run several pods and Ray clusters side by side on one machine, so
they cannot use Ray's fixed default ports; this is the one place that picks them. It lives
beside the benchmarks, outside the product: the console reaches the emulator only through
its composition root (``console.wiring``), never through this.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from console.config import Config, parse_config
from emulators.tpu_pod import client as pod_client
from emulators.tpu_pod.client import PodInfo, leftover_pids
from emulators.tpu_pod.layout import MAX_HOSTS, RunLayout
from emulators.tpu_pod.zones import seeded_windows


def free_port(ip: str = "127.0.0.1", used: set[int] | None = None) -> int:
    """A TCP port free on ``ip`` now, distinct from the ones already in ``used``."""
    while True:
        with socket.socket() as s:
            s.bind((ip, 0))
            port = int(s.getsockname()[1])
        if used is None:
            return port
        if port not in used:
            used.add(port)
            return port


def free_ray_ports(head_ip: str) -> dict[str, int]:
    used: set[int] = set()
    return {
        "gcs_port": free_port(head_ip, used),
        "dashboard_port": free_port("127.0.0.1", used),
        "client_port": free_port(head_ip, used),
        "local_dashboard_port": free_port("127.0.0.1", used),
        "local_client_port": free_port("127.0.0.1", used),
    }


def pod_config(
    pod: PodInfo,
    work_dir: Path,
    *,
    recovery: Mapping[str, Any] | None = None,
    ray: Mapping[str, Any] | None = None,
    wandb: Mapping[str, Any] | None = None,
    source: str = "<emulator test config>",
) -> Config:
    """Config driving ``pod``: free Ray ports, small nodes, offline W&B under ``work_dir``
    (``wandb`` overrides, e.g. online against the W&B emulator)."""
    return parse_config(
        {
            "cluster": {"provider": "local", "hosts": len(pod.hosts), "run_dir": str(pod.run_dir)},
            "ssh": {"connect_timeout_s": 5.0, "retries": 1, "command_timeout_s": 240.0},
            "ray": {
                **free_ray_ports(pod.hosts[0].ip),
                "num_cpus": 1,
                "object_store_mb": 100,
                **(ray or {}),
            },
            "wandb": {"mode": "offline", "dir": str(work_dir / "wandb"), **(wandb or {})},
            "recovery": {"ready_timeout_s": 120.0, **(recovery or {})},
        },
        source=source,
    )


def pod_toml(
    pod: PodInfo,
    work_dir: Path,
    poll_s: float = 0.5,
    extra: str = "",
    wandb: Mapping[str, str] | None = None,
) -> str:
    """``pod_config`` as a config file's text, for a `phantom` child process (`watch`)
    (``wandb`` overrides, e.g. online against the W&B emulator)."""
    ray = pod_config(pod, work_dir).ray
    w = {"mode": "offline", "dir": str(work_dir / "wandb"), **(wandb or {})}
    wandb_table = "\n".join(f"{k} = {json.dumps(v)}" for k, v in w.items())
    return f"""
[cluster]
provider = "local"
hosts = {len(pod.hosts)}
run_dir = "{pod.run_dir}"

[ssh]
connect_timeout_s = 5.0
retries = 1
command_timeout_s = 240.0

[ray]
gcs_port = {ray.gcs_port}
dashboard_port = {ray.dashboard_port}
client_port = {ray.client_port}
local_dashboard_port = {ray.local_dashboard_port}
local_client_port = {ray.local_client_port}
num_cpus = 1
object_store_mb = 100

[wandb]
{wandb_table}

[recovery]
poll_interval_s = {poll_s}
ready_timeout_s = 120.0
step_retries = 2
{extra}"""


def gcp_user_key(path: Path) -> Path:
    """A GCP user's SSH key (their ~/.ssh/google_compute_engine), for a GCP-faithful pod
    started with ``ssh_user`` / ``ssh_key``."""
    import asyncssh

    key = asyncssh.generate_private_key("ssh-ed25519")
    key.write_private_key(str(path))
    key.write_public_key(f"{path}.pub")
    path.chmod(0o600)
    return path


def gcp_config(
    pod: PodInfo,
    work_dir: Path,
    *,
    ssh: Mapping[str, Any] | None = None,
    recovery: Mapping[str, Any] | None = None,
    ray: Mapping[str, Any] | None = None,
    wandb: Mapping[str, Any] | None = None,
    extra: Mapping[str, Any] | None = None,
    source: str = "<gcp path on the emulator>",
) -> Config:
    """Config driving ``pod`` (GCP-faithful, started with the GCP user's ``ssh_user`` and
    ``ssh_key``) through the gcp code path: Google's TPU client on the emulator's loopback
    endpoint, the GCP user's SSH identity, the host's own Ray sizing unless ``ray`` says
    otherwise. Only the ports are the emulator's: they must not collide on one machine."""
    return parse_config(
        {
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
                "command_timeout_s": 240.0,
                **(ssh or {}),
            },
            "ray": {**free_ray_ports(pod.hosts[0].ip), **(ray or {})},
            "wandb": {"mode": "offline", "dir": str(work_dir / "wandb"), **(wandb or {})},
            "recovery": {"ready_timeout_s": 180.0, **(recovery or {})},
            **(extra or {}),
        },
        source=source,
    )


async def start_pod(run_dir: Path, hosts: int, **kwargs: Any) -> PodInfo:
    """A READY emulated pod in ``run_dir`` on free ports (ssh_port/api_port 0 unless given)."""
    kwargs.setdefault("ssh_port", 0)
    kwargs.setdefault("api_port", 0)
    return await pod_client.async_start_pod(run_dir, hosts=hosts, **kwargs)


async def preempt(run_dir: Path, host: int | str = "all") -> PodInfo:
    """Preempt ``host`` (or the whole slice) of the pod of ``run_dir``, as a spot reclaim."""
    return await pod_client.async_preempt(run_dir, host)


def zone_stocked_out(run_dir: Path, zone: str) -> bool:
    """Whether ``zone`` of the pod of ``run_dir`` has no capacity now (a stockout window)."""
    info = pod_client.pod_status(run_dir)
    return info is not None and info.zone_info(zone).stockout


async def stop_pod(run_dir: Path) -> bool:
    """Stop the pod of ``run_dir`` and every process of its hosts; True if one was running."""
    return await pod_client.async_stop_pod(run_dir)


async def pod_status(run_dir: Path) -> PodInfo | None:
    """The pod's current status (hosts, states, notice times), None when it is not running."""
    return await pod_client.async_pod_status(run_dir)


async def preempt_host(run_dir: Path, host: int | str, notice_s: float = 0.0) -> PodInfo:
    """Take ``host`` away as a spot reclaim does; returns once its last process is gone.

    ``notice_s`` > 0 is a preemption with notice, as on GCE: the host's metadata says
    ``instance/preempted`` TRUE, every process gets SIGTERM, and whatever is left after
    ``notice_s`` seconds gets SIGKILL. 0 is the abrupt kill (everything SIGKILLed at once).
    The returned status has the host's ``notice_at``.
    """
    return await pod_client.async_preempt(run_dir, host, notice=notice_s or None, wait=True)


def daemon_pid(run_dir: Path) -> int | None:
    """The emulator daemon's pid (it serves the hosts' SSH, the TPU API, the metadata)."""
    try:
        return int(RunLayout(Path(run_dir)).pid_file.read_text().strip())
    except (OSError, ValueError):
        return None


def leftovers(run_dir: Path, daemon: int | None) -> list[int]:
    """Pids of the pod still alive after ``stop_pod``: processes of its hosts (Ray, jobs,
    trainers, shells, found by the emulator's marker) and its daemon. [] when all is gone."""
    left = list(leftover_pids(run_dir))
    if daemon is not None and _alive(daemon):
        left.append(daemon)
    return left


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has exited
    except OSError:
        return False


__all__ = [
    "MAX_HOSTS",
    "PodInfo",
    "daemon_pid",
    "free_port",
    "free_ray_ports",
    "gcp_config",
    "gcp_user_key",
    "leftovers",
    "pod_config",
    "pod_status",
    "preempt",
    "preempt_host",
    "seeded_windows",
    "start_pod",
    "stop_pod",
    "zone_stocked_out",
]
