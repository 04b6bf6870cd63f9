"""Scale (issue 14): 256 emulated hosts start, answer on every layer, and stop cleanly."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import pytest

from emulators.tpu_pod import client
from tests.support.emulator_helpers import alive, metadata_get, tpu
from tests.support.fixtures_pod import ssh_run, start_test_pod, stop_test_pod

HOSTS = 256


def _bindable(ip: str, port: int) -> bool:
    """True if nothing listens on ip:port (TIME_WAIT of closed sessions does not count)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((ip, port))
        except OSError:
            return False
    return True


@pytest.mark.slow
def test_256_hosts_start_answer_and_stop_leaving_nothing(tmp_path: Path) -> None:
    run_dir = tmp_path / "pod256"
    info = start_test_pod(run_dir, hosts=HOSTS, ready_delay=0.0)
    try:
        assert len(info.hosts) == HOSTS and info.state == "READY"
        assert info.hosts[199].ip == "127.0.0.209" and info.hosts[255].ip == "127.0.1.65"
        for i in (0, 199, 200, 255):  # both address blocks
            result = ssh_run(info, i, "echo $PHANTOM_HOST")
            assert result.stdout.strip() == info.hosts[i].name, result.stderr
        assert metadata_get(info.hosts[255].metadata, "instance/name")[1] == info.hosts[255].name

        async def endpoints() -> list[str]:
            async with tpu(info) as api:
                node = await api.get_node(name=info.node_path)
            return [e.ip_address for e in node.network_endpoints]

        assert asyncio.run(endpoints()) == [h.ip for h in info.hosts]
        pids = [
            int(ssh_run(info, i, "setsid sleep 1000 </dev/null >/dev/null 2>&1 & echo $!").stdout)
            for i in (3, 200, 255)
        ]
        after = client.preempt(run_dir, "all")
        assert {h.state for h in after.hosts} == {"PREEMPTED"}
        assert not any(alive(p) for p in pids)
        assert client.leftover_pids(run_dir) == []
    finally:
        stop_test_pod(run_dir)
    assert not alive(info.pid)
    for host in (info.hosts[0], info.hosts[255]):
        assert _bindable(host.ip, info.ssh_port) and _bindable(host.ip, info.metadata_port)
