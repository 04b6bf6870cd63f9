"""Pytest plugin: an emulated 4-host spot pod (``pod``) and one running Ray (``ray_pod``).

Enable with ``pytest_plugins = ["fixtures_pod"]`` in conftest.py. Every
fixture uses free ports and its own run dir, so concurrent test runs on one
machine never collide, and tears everything down also when the test fails,
then checks that no process of the pod survived.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from console.emulator.client import PodInfo, leftover_pids, start_pod, stop_pod

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
    run_dir = tmp_path_factory.mktemp("pod")
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


__all__ = [
    "POD_HOSTS",
    "pod",
    "ssh_run",
    "start_test_pod",
    "stop_test_pod",
]
