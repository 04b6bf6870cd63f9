"""A phantom Config for an already-running emulated pod, on free loopback ports.

Tests and benchmarks run several pods and Ray clusters side by side on one machine, so
they cannot use Ray's fixed default ports; this is the one place that picks them.
"""

from __future__ import annotations

import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from console.config import Config, parse_config
from console.emulator.client import PodInfo


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
    source: str = "<emulator test config>",
) -> Config:
    """Config driving ``pod``: free Ray ports, small nodes, offline W&B under ``work_dir``."""
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
            "wandb": {"mode": "offline", "dir": str(work_dir / "wandb")},
            "recovery": {"ready_timeout_s": 120.0, **(recovery or {})},
        },
        source=source,
    )
