"""SSH local forwards to the head, and their automatic re-opening after a preemption."""

from __future__ import annotations

import asyncio
import json
import threading
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from console.config import RayConfig
from console.services.backends.tpu_vm.endpoints import HostEndpoint
from console.services.backends.tpu_vm.hostkeys import HostKeyPolicy
from console.services.backends.tpu_vm.ssh import SshError, SshFanout
from console.services.backends.tpu_vm.tunnel import Tunnel, default_forwards, free_port
from console.wiring.pod import EmulatedTpuProvider
from emulators.tpu_pod import client as pod_client
from emulators.tpu_pod.client import PodInfo
from tests.support.fixtures_pod import RayPod
from tests.support.ray_client import client_proxier_env, ray_client_task
from tests.support.waiting import until


class _Version(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = json.dumps({"ray_version": "fake", "path": self.path}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def web() -> Iterator[int]:
    """A stand-in for the dashboard on the head's loopback (free port)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Version)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()


def _get(url: str) -> dict[str, str]:
    with urllib.request.urlopen(url, timeout=5) as resp:
        data: dict[str, str] = json.loads(resp.read())
        return data


async def get(url: str) -> dict[str, str]:
    return await asyncio.to_thread(_get, url)


def make_fanout(pod: PodInfo, tmp_path: Path, provider: EmulatedTpuProvider) -> SshFanout:
    return SshFanout(
        [HostEndpoint(h.name, h.ip, h.ssh_port, h.index) for h in pod.hosts],
        user=pod.ssh_user,
        client_keys=[pod.client_key],
        host_keys=HostKeyPolicy("tpu-api", tmp_path / "kh", api_keys=provider.host_keys),
        connect_timeout_s=3.0,
        retries=0,
    )


def test_default_forwards_follow_config() -> None:
    ray = RayConfig(local_dashboard_port=18265, local_client_port=20001)
    # The dashboard listens on the head's loopback, Ray's client server on its node IP.
    assert default_forwards(ray, "10.128.0.7") == [
        ("127.0.0.1", 18265, "127.0.0.1", 8265),
        ("127.0.0.1", 20001, "10.128.0.7", 10001),
    ]


async def test_forward_reaches_head_and_reopens_after_preemption(
    pod: PodInfo, tmp_path: Path, web: int
) -> None:
    provider = EmulatedTpuProvider(pod, poll_interval_s=0.05)
    fan = make_fanout(pod, tmp_path, provider)
    changes: list[tuple[bool, str]] = []
    local = free_port()
    tunnel = Tunnel(
        lambda: fan.connect(0),
        [("127.0.0.1", local, "127.0.0.1", web)],
        on_change=lambda up, why: changes.append((up, why)),
        backoff_initial_s=0.05,
        backoff_max_s=0.2,
    )
    try:
        tunnel.start()
        assert await tunnel.wait_up(10)
        assert tunnel.url(web) == f"http://127.0.0.1:{local}"
        assert (await get(f"{tunnel.url(web)}/api/version"))["path"] == "/api/version"

        await pod_client.async_preempt(pod.run_dir, 0)
        # the down transition is published by watch()
        await until(
            lambda: not tunnel.is_up and changes[-1][0] is False,
            10,
            "the tunnel to go down",
            step=0.02,
        )

        await pod_client.async_recreate(pod.run_dir, 0)
        await provider.wait_ready(30)
        assert await tunnel.wait_up(30), tunnel.last_error
        assert (await get(f"{tunnel.url(web)}/api/version"))["ray_version"] == "fake"
    finally:
        await tunnel.close()
        await fan.close()
        await provider.close()
    assert [up for up, _ in changes] == [True, False, True, False]
    assert tunnel.reopens == 1
    assert "connection to the head closed" in changes[1][1]


async def test_a_local_port_in_use_falls_back_and_says_so(
    pod: PodInfo, tmp_path: Path, web: int
) -> None:
    """A console in tmux holds the configured port: a second front end's tunnel binds
    another one, says which, and keeps it when it re-opens."""
    provider = EmulatedTpuProvider(pod)
    fan = make_fanout(pod, tmp_path, provider)
    busy = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = busy.sockets[0].getsockname()[1]
    changes: list[tuple[bool, str]] = []
    tunnel = Tunnel(
        lambda: fan.connect(0),
        [("127.0.0.1", port, "127.0.0.1", web)],
        on_change=lambda up, why: changes.append((up, why)),
    )
    try:
        await tunnel.open()
        bound = tunnel.bound[web]
        assert bound != port and tunnel.url(web) == f"http://127.0.0.1:{bound}"
        assert (await get(f"{tunnel.url(web)}/api/version"))["path"] == "/api/version"
        assert f"local port {port} in use, using {bound}" in changes[-1][1]
        await tunnel.close()
        await tunnel.open()  # the same fallback port again, so a bookmarked URL holds
        assert tunnel.bound[web] == bound
    finally:
        await tunnel.close()
        busy.close()
        await busy.wait_closed()
        await fan.close()
        await provider.close()


async def test_open_on_dead_head_raises_named_error(pod: PodInfo, tmp_path: Path) -> None:
    provider = EmulatedTpuProvider(pod)
    fan = make_fanout(pod, tmp_path, provider)
    tunnel = Tunnel(lambda: fan.connect(0), [("127.0.0.1", free_port(), "127.0.0.1", 1)])
    try:
        await pod_client.async_preempt(pod.run_dir, 0)
        with pytest.raises(SshError, match=rf"{pod.hosts[0].ip}:\d+ \({pod.hosts[0].name}\): "):
            await tunnel.open()
    finally:
        await tunnel.close()
        await fan.close()
        await provider.close()


@pytest.mark.slow
async def test_ray_client_through_the_tunnel_runs_a_task(ray_pod: RayPod, tmp_path: Path) -> None:
    """The seed's `-L 10001:...`: `ray.init("ray://127.0.0.1:<local client port>")` through
    the console's forwards reaches Ray's client server, which listens on the head's node IP.
    Ray's client proxier forks a server per client beside live gRPC streams: it runs with
    gRPC's fork handlers off (raycmd.NODE_ENV), else about 1 fork in 25 aborted before its
    exec and the connect failed with "Starting Ray client server failed"."""
    pod = ray_pod.pod
    ray = RayConfig(
        dashboard_port=int(ray_pod.dashboard_url.rsplit(":", 1)[1]),
        client_port=ray_pod.head.client_server_port,
        local_dashboard_port=free_port(),
        local_client_port=free_port(),
    )
    provider = EmulatedTpuProvider(pod)
    fan = make_fanout(pod, tmp_path, provider)
    tunnel = Tunnel(lambda: fan.connect(0), default_forwards(ray, pod.hosts[0].ip))
    try:
        await tunnel.open()
        address = tunnel.url(ray.client_port, scheme="ray")
        assert address == f"ray://127.0.0.1:{ray.local_client_port}"
        assert client_proxier_env(ray_pod.gcs).get("GRPC_ENABLE_FORK_SUPPORT") == "false"
        result = await ray_client_task(address, pod.run_dir)
    finally:
        await tunnel.close()
        await fan.close()
        await provider.close()
    assert result["ran_on"] in {h.ip for h in pod.hosts}
    assert result["nodes"] == len(pod.hosts)
