"""Ray formed over SSH on the emulated pod: bootstrap, head, workers, state, stop, tunnel."""

from __future__ import annotations

import asyncio
import json
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from console.config import Config, RayConfig, parse_config
from console.services.backends.tpu_vm.endpoints import HostEndpoint
from console.services.backends.tpu_vm.hostkeys import HostKeyPolicy
from console.services.backends.tpu_vm.ray import (
    GCP_BOOTSTRAP,
    LOCAL_BOOTSTRAP,
    RayError,
    RayNodeInfo,
    RayOps,
    alive_by_ip,
    default_bootstrap_command,
    duplicates,
    parse_nodes,
)
from console.services.backends.tpu_vm.ssh import SshFanout
from console.services.backends.tpu_vm.tunnel import Tunnel, free_port
from console.wiring.pod import EmulatedTpuProvider
from emulators.tpu_pod import client as pod_client
from emulators.tpu_pod.client import PodInfo
from emulators.tpu_pod.procs import find_marked, marker_value
from tests.support.waiting import until

# --- pure -------------------------------------------------------------------------------


def _node(ip: str, alive: bool = True, head: bool = False) -> RayNodeInfo:
    return RayNodeInfo(node_id=f"id-{ip}-{alive}", ip=ip, alive=alive, is_head=head)


def test_duplicates_counts_live_nodes_per_ip() -> None:
    nodes = [
        _node("127.0.0.10", head=True),
        _node("127.0.0.11"),
        _node("127.0.0.11"),
        _node("127.0.0.12"),
        _node("127.0.0.12", alive=False),  # a dead node is history, not a duplicate
    ]
    assert duplicates(nodes) == {"127.0.0.11": 2}
    assert alive_by_ip(nodes) == {"127.0.0.10": 1, "127.0.0.11": 2, "127.0.0.12": 1}
    assert duplicates([]) == {}


def test_parse_state_api_answer() -> None:
    body = {
        "result": True,
        "msg": "",
        "data": {
            "result": {
                "result": [
                    {
                        "node_id": "abc",
                        "node_ip": "127.0.0.10",
                        "is_head_node": True,
                        "state": "ALIVE",
                        "node_name": "pod-w0",
                        "resources_total": {"CPU": 2, "TPU": 8},
                        "start_time_ms": 1_700_000_000_000,
                    },
                    {"node_id": "def", "node_ip": "127.0.0.11", "state": "DEAD"},
                ]
            }
        },
    }
    head, dead = parse_nodes(json.dumps(body))
    assert head.is_head and head.alive and head.resources == {"CPU": 2.0, "TPU": 8.0}
    assert head.start_time_s == 1_700_000_000.0 and head.name == "pod-w0"
    assert not dead.alive and not dead.is_head
    with pytest.raises(RayError, match="Ray state API error: boom"):
        parse_nodes({"result": False, "msg": "boom"})


def test_bootstrap_command_defaults() -> None:
    def command(config: Config) -> str:
        return default_bootstrap_command(config.bootstrap_command, local=config.is_local)

    assert command(Config()) == LOCAL_BOOTSTRAP
    gcp = parse_config({"cluster": {"provider": "gcp", "project": "p", "zone": "z-a"}})
    assert command(gcp) == GCP_BOOTSTRAP
    assert command(parse_config({"bootstrap": {"command": "echo hi"}})) == "echo hi"


def test_head_command_keeps_dashboard_on_loopback() -> None:
    eps = [HostEndpoint(f"pod-w{i}", f"127.0.0.{10 + i}", 22, i) for i in range(2)]
    ops = RayOps(
        None,  # type: ignore[arg-type]  # command building needs no SSH
        head=eps[0],
        workers=eps,
        ray_cfg=RayConfig(gcs_port=7000, dashboard_port=7001, client_port=7002),
    )
    cmd = ops.head_command()
    assert "--dashboard-host=127.0.0.1" in cmd and "0.0.0.0" not in cmd
    assert "--port=7000" in cmd and "--node-ip-address=127.0.0.10" in cmd
    assert ops.gcs_address == "127.0.0.10:7000"
    assert "--address=127.0.0.10:7000" in ops.worker_command(eps[1])
    assert [w.name for w in ops.workers] == ["pod-w1"]  # the head is never its own worker


# --- against the emulator with real Ray -------------------------------------------------


def _get_json(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url, timeout=10) as resp:
        data: dict[str, Any] = json.loads(resp.read())
        return data


def _pod_pids(pod: PodInfo) -> list[int]:
    return find_marked(marker_value(pod_client.read_run_id(pod.run_dir)))


@pytest.mark.slow
async def test_ray_cluster_lifecycle_over_ssh(pod: PodInfo, tmp_path: Path) -> None:
    provider = EmulatedTpuProvider(pod, poll_interval_s=0.1)
    eps = [HostEndpoint(h.name, h.ip, h.ssh_port, h.index) for h in pod.hosts]
    fan = SshFanout(
        eps,
        user=pod.ssh_user,
        client_keys=[pod.client_key],
        host_keys=HostKeyPolicy("tpu-api", tmp_path / "kh", api_keys=provider.host_keys),
        connect_timeout_s=5.0,
        retries=1,
        command_timeout_s=180.0,
    )
    cfg = RayConfig(
        gcs_port=free_port(), dashboard_port=free_port(), client_port=free_port(), num_cpus=1
    )
    ops = RayOps(fan, head=eps[0], workers=eps[1:], ray_cfg=cfg, poll_interval_s=0.5)
    local = free_port()
    tunnel = Tunnel(
        lambda: fan.connect(0),
        [("127.0.0.1", local, "127.0.0.1", cfg.dashboard_port)],
        backoff_initial_s=0.1,
        backoff_max_s=1.0,
    )
    lines: list[tuple[str, str]] = []
    try:
        boot = await ops.bootstrap(on_output=lambda h, _s, line: lines.append((h, line)))
        assert all(r.ok for r in boot.values()), boot
        assert {h for h, line in lines if line.startswith("3.")} == {e.name for e in eps}

        head = await ops.start_head()
        assert head.ok, head.error or head.stdout_tail[-2000:]
        again = await ops.start_head()
        assert again.ok and again.stdout_tail.startswith("Ray head already running")

        # One `ray start` at a time (a recovery's rejoin where hosts share cores): each
        # host's output ends before the next host's begins.
        started: list[str] = []
        joined = await ops.join_workers(
            on_output=lambda h, _s, _line: started.append(h), parallelism=1
        )
        assert all(r.ok for r in joined.values()), joined
        blocks = [h for i, h in enumerate(started) if i == 0 or started[i - 1] != h]
        assert sorted(blocks) == sorted(e.name for e in eps[1:]), blocks
        nodes = await ops.nodes()
        assert ops.last_source == "ssh"
        live = [n for n in nodes if n.alive]
        assert sorted(n.ip for n in live) == [e.ip for e in eps]  # 4 nodes, distinct IPs
        assert [n.ip for n in live if n.is_head] == [eps[0].ip]
        assert all(n.resources.get("TPU") == 8.0 for n in live)
        assert duplicates(nodes) == {}
        rejoin = await ops.join_workers()
        assert all(r.stdout_tail == "already joined\n" for r in rejoin.values())

        # The dashboard through the SSH tunnel; the state API follows it.
        tunnel.start()
        assert await tunnel.wait_up(20), tunnel.last_error
        version = await asyncio.to_thread(
            _get_json, f"{tunnel.url(cfg.dashboard_port)}/api/version"
        )
        assert "ray_version" in version
        ops.set_dashboard_url(lambda: tunnel.url(cfg.dashboard_port) if tunnel.is_up else None)
        assert len([n for n in await ops.nodes() if n.alive]) == 4
        assert ops.last_source == "tunnel"

        # A second raylet on w1's IP (a leftover joined twice): flagged, then fixed by a join.
        w1 = eps[1]
        extra = await fan.run_one(w1.name, ops.worker_command(w1) + " 2>&1", timeout_s=180)
        assert extra.ok, extra.stdout_tail[-2000:]

        async def doubled() -> bool:
            return duplicates(await ops.nodes()) == {w1.ip: 2}

        await until(doubled, 60, f"two live Ray nodes on {w1.ip}")
        fixed = await ops.join_workers([w1.name])
        assert fixed[w1.name].ok, fixed[w1.name].error

        async def single() -> bool:
            return alive_by_ip(await ops.nodes()).get(w1.ip) == 1

        await until(single, 60, f"one live Ray node on {w1.ip}")

        # The head host is preempted and recreated: the tunnel comes back by itself once a
        # new head runs there (the rest of the recovery is the watchdog's job).
        await pod_client.async_preempt(pod.run_dir, 0)

        async def tunnel_down() -> bool:
            return not tunnel.is_up

        await until(tunnel_down, 20, "the tunnel to notice the loss")
        with pytest.raises(RayError, match="Ray state API not reachable"):
            await ops.nodes()
        await provider.recreate([0])
        await provider.wait_ready(60)
        assert (await ops.bootstrap([0]))[eps[0].name].ok
        head = await ops.start_head()
        assert head.ok, head.error or head.stdout_tail[-2000:]
        assert await tunnel.wait_up(30), tunnel.last_error
        version = await asyncio.to_thread(
            _get_json, f"{tunnel.url(cfg.dashboard_port)}/api/version"
        )
        assert "ray_version" in version
        assert tunnel.reopens == 1
    finally:
        await tunnel.close()
        stopped = await ops.stop()
        await fan.close()
        await provider.close()
    assert all(r.ok for r in stopped.values()), stopped

    async def no_ray_left() -> bool:
        return not _pod_pids(pod)

    await until(no_ray_left, 30, "every Ray process of the pod to exit")


async def test_join_without_a_head_is_a_named_error(pod: PodInfo, tmp_path: Path) -> None:
    eps = [HostEndpoint(h.name, h.ip, h.ssh_port, h.index) for h in pod.hosts]
    fan = SshFanout(
        eps,
        user=pod.ssh_user,
        client_keys=[pod.client_key],
        host_keys=HostKeyPolicy("file", pod.known_hosts),
    )
    cfg = RayConfig(gcs_port=free_port(), dashboard_port=free_port(), client_port=free_port())
    ops = RayOps(fan, head=eps[0], workers=eps[1:], ray_cfg=cfg)
    try:
        with pytest.raises(RayError, match=rf"via {eps[0].name}: .*Connection refused"):
            await ops.join_workers()
        with pytest.raises(ValueError, match=r"unknown host '127\.0\.0\.99'"):
            await ops.join_workers(["127.0.0.99"])
        with pytest.raises(ValueError, match=r"parallelism must be >= 1, got 0"):
            await ops.join_workers(parallelism=0)
        partial = RayOps(fan, head=eps[0], workers=eps[1:2], ray_cfg=cfg)
        with pytest.raises(ValueError, match=r"hosts \['pod-w2'\]|not workers of this cluster"):
            await partial.join_workers([eps[2].name])
    finally:
        await fan.close()
