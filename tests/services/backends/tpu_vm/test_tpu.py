"""TPU provider over the real TpuAsyncClient, against the emulator's gRPC TPU API."""

from __future__ import annotations

import asyncio
import socket
import time
from pathlib import Path
from typing import Any

import asyncssh
import pytest
from google.cloud import tpu_v2

from console.config import parse_config
from console.services.backends.tpu_vm.endpoints import HostEndpoint
from console.services.backends.tpu_vm.hostkeys import parse_public_keys
from console.services.backends.tpu_vm.node import (
    NodeInfo,
    Symptom,
    host_states_of,
    node_info_from_proto,
    parse_guest_hostkeys,
)
from console.services.backends.tpu_vm.tpu import (
    GcpTpuProvider,
    TpuApiError,
    gcp_provider,
    local_client,
)
from console.services.model import HostState
from console.wiring.pod import EmulatedTpuProvider
from emulators.tpu_pod import client as pod_client
from emulators.tpu_pod.client import PodInfo
from tests.support.fixtures_pod import start_test_pod, stop_test_pod

EPS = [HostEndpoint(f"pod-w{i}", f"127.0.0.{10 + i}", 22, i) for i in range(4)]


# --- pure -------------------------------------------------------------------------------


def test_host_states_single_preempted_worker_from_symptom() -> None:
    sym = [Symptom("2", "SYMPTOM_TYPE_UNSPECIFIED", "worker 2 (127.0.0.12) was preempted")]
    states = host_states_of("PREEMPTED", EPS, sym, 4, "hosts not ready: pod-w2")
    assert states == {0: "READY", 1: "READY", 2: "PREEMPTED", 3: "READY"}


def test_host_states_whole_node_shares_state_when_no_worker_is_named() -> None:
    assert set(host_states_of("PREEMPTED", EPS, [], 4).values()) == {"PREEMPTED"}
    assert set(host_states_of("CREATING", EPS, [], 4).values()) == {"CREATING"}


def test_host_states_repairing_names_the_recreated_worker() -> None:
    states = host_states_of("REPAIRING", EPS, [], 4, "hosts not ready: pod-w1")
    assert states == {0: "READY", 1: "REPAIRING", 2: "READY", 3: "READY"}


def test_host_states_ignore_unrelated_symptoms() -> None:
    sym = [Symptom("1", "LOW_MEMORY", "TPU VM memory is low")]
    assert set(host_states_of("READY", EPS, sym, 4).values()) == {"READY"}


def test_node_from_proto_and_guest_keys() -> None:
    node = tpu_v2.Node(
        name="projects/p/locations/z/nodes/v4-32-us-spot",
        state=tpu_v2.Node.State.READY,
        health=tpu_v2.Node.Health.HEALTHY,
        accelerator_type="v4-32",
        network_endpoints=[tpu_v2.NetworkEndpoint(ip_address=f"10.0.0.{i}") for i in range(4)],
        scheduling_config=tpu_v2.SchedulingConfig(spot=True),
    )
    info = node_info_from_proto(node)
    assert info.name == "v4-32-us-spot" and info.ready and info.preemptible
    assert [e.name for e in info.endpoints][:2] == ["v4-32-us-spot-w0", "v4-32-us-spot-w1"]
    key = asyncssh.generate_private_key("ssh-ed25519").convert_to_public()
    blob = key.export_public_key().decode().split()[1]
    ga = tpu_v2.GuestAttributes(
        query_value=tpu_v2.GuestAttributesValue(
            items=[tpu_v2.GuestAttributesEntry(namespace="hostkeys", key="ssh-ed25519", value=blob)]
        )
    )
    (text,) = parse_guest_hostkeys([ga])
    assert parse_public_keys(text) == [key]


def test_gcp_provider_names_the_node() -> None:
    cfg = parse_config({"cluster": {"provider": "gcp", "project": "proj", "zone": "us-central2-b"}})
    prov = gcp_provider(cfg.cluster, cfg.ssh, cfg.capacity, poll_interval_s=5.0)
    assert isinstance(prov, GcpTpuProvider)
    assert prov.node_path == "projects/proj/locations/us-central2-b/nodes/phantom-pod"


def test_a_node_recreated_for_external_ssh_gets_external_ips() -> None:
    prov = GcpTpuProvider("p", "us-central2-b", "n", accelerator_type="v4-32", external_ssh=True)
    assert prov._spec_for_create().network_config.enable_external_ips  # never seen: defaults
    prov._last_proto = tpu_v2.Node(
        accelerator_type="v4-32", network_config=tpu_v2.NetworkConfig(network="vpc-a")
    )
    spec = prov._spec_for_create()  # the old spec, plus external IPs
    assert spec.network_config.enable_external_ips and spec.network_config.network == "vpc-a"
    inside = GcpTpuProvider("p", "us-central2-b", "n", accelerator_type="v4-32")
    inside._last_proto = prov._last_proto
    assert not inside._spec_for_create().network_config.enable_external_ips


def test_endpoints_name_the_external_ip_for_ssh_and_keep_the_internal_one() -> None:
    node = tpu_v2.Node(
        name="projects/p/locations/z/nodes/pod",
        network_endpoints=[
            tpu_v2.NetworkEndpoint(
                ip_address="10.0.0.2", access_config=tpu_v2.AccessConfig(external_ip="34.1.2.3")
            ),
            tpu_v2.NetworkEndpoint(ip_address="10.0.0.3"),
        ],
    )
    outside = node_info_from_proto(node, external=True).endpoints
    assert [(e.ip, e.connect_ip) for e in outside] == [
        ("10.0.0.2", "34.1.2.3"),
        ("10.0.0.3", "10.0.0.3"),  # no external IP: the internal one (and a warning)
    ]
    inside = node_info_from_proto(node).endpoints
    assert [e.connect_ip for e in inside] == ["10.0.0.2", "10.0.0.3"]


@pytest.mark.parametrize(
    "endpoint",
    ["10.1.2.3:443", "http://10.1.2.3:8470", "http://127.evil.example:80", "http://[::2]:1"],
)
def test_local_client_is_loopback_only(endpoint: str) -> None:
    with pytest.raises(ValueError, match=r"must be http://127\.0\.0\.1:PORT on loopback"):
        local_client(endpoint)


# --- against the emulator ---------------------------------------------------------------


async def test_get_node_and_host_keys(quiet_pod: PodInfo) -> None:
    prov = EmulatedTpuProvider(quiet_pod)
    try:
        node = await prov.get_node()
        keys = await prov.host_keys()
    finally:
        await prov.close()
    assert node is not None and node.ready
    assert node.name == quiet_pod.node_name and node.accelerator_type == quiet_pod.accelerator_type
    assert [(e.name, e.ip, e.port, e.index) for e in node.endpoints] == [
        (h.name, h.ip, h.ssh_port, h.index) for h in quiet_pod.hosts
    ]
    assert node.health == "HEALTHY"
    for h in quiet_pod.hosts:
        (key,) = parse_public_keys(keys[h.ip])
        assert key.get_fingerprint("sha256") == h.host_key_fingerprint


async def test_preempt_one_host_then_recreate_it(pod: PodInfo) -> None:
    prov = EmulatedTpuProvider(pod, poll_interval_s=0.05)
    progress: list[Any] = []
    try:
        await prov.preempt(2)
        node = await prov.get_node()
        assert node is not None
        assert node.state == "PREEMPTED" and not node.ready
        assert node.hosts_in(HostState.PREEMPTED) == [2]
        assert node.hosts_in(HostState.READY) == [0, 1, 3]
        assert [s.worker_id for s in node.symptoms] == ["2"]
        preempted_at = node.symptom_time(2)
        assert preempted_at is not None and abs(preempted_at - time.time()) < 600
        keys_before = await prov.host_keys()
        assert pod.hosts[2].ip not in keys_before  # a dead VM publishes no key

        assert await prov.recreate([2]) == [2]
        ready = await prov.wait_ready(30, on_progress=progress.append)
        keys_after = await prov.host_keys()
    finally:
        await prov.close()
    assert ready.ready and ready.hosts_in(HostState.READY) == [0, 1, 2, 3]
    assert all(isinstance(p, NodeInfo) for p in progress) and progress[-1].ready
    old_fp = pod.hosts[2].host_key_fingerprint
    (new_key,) = parse_public_keys(keys_after[pod.hosts[2].ip])
    assert new_key.get_fingerprint("sha256") != old_fp
    assert keys_after[pod.hosts[0].ip] == keys_before[pod.hosts[0].ip]


async def test_recreate_whole_node_through_delete_and_create(pod: PodInfo) -> None:
    """hosts=None goes through the real API: DeleteNode + CreateNode long-running ops."""
    prov = EmulatedTpuProvider(pod, poll_interval_s=0.05)
    try:
        await prov.get_node()  # remembers the spec to re-create
        keys_before = await prov.host_keys()
        assert await prov.recreate(None) == [0, 1, 2, 3]
        node = await prov.wait_ready(30)
        keys_after = await prov.host_keys()
    finally:
        await prov.close()
    assert node.ready and len(node.endpoints) == 4
    assert all(keys_before[ip] != keys_after[ip] for ip in keys_before)


async def test_missing_node_is_none(pod: PodInfo) -> None:
    prov = EmulatedTpuProvider(pod)
    try:
        await prov._delete_node()
        assert await prov.get_node() is None
        assert await prov.host_keys() == {}
    finally:
        await prov.close()


def _dead_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_api_errors_are_one_line_and_wait_ready_reports_them(quiet_pod: PodInfo) -> None:
    client = local_client(f"127.0.0.1:{_dead_port()}")
    prov = GcpTpuProvider(
        quiet_pod.project,
        quiet_pod.zone,
        quiet_pod.node_name,
        client,
        poll_interval_s=0.05,
        call_timeout_s=1.0,
    )
    seen: list[Any] = []
    try:
        with pytest.raises(TpuApiError) as err:
            await prov.get_node()
        assert str(err.value).startswith(f"TPU API GetNode for {quiet_pod.node_name}: ")
        assert "\n" not in str(err.value)
        with pytest.raises(TimeoutError, match=rf"{quiet_pod.node_name} not READY after 0.3s"):
            await prov.wait_ready(0.3, on_progress=seen.append)
    finally:
        await prov.close()
    assert seen and all(isinstance(s, TpuApiError) for s in seen)


async def test_wait_ready_sees_creating_then_ready(tmp_path: Path) -> None:
    # Its hosts spend 3 s in CREATING: the shared fixture's 0.2 s passed on a loaded CI box
    # before the first poll, which then saw READY only.
    pod = await asyncio.to_thread(start_test_pod, tmp_path / "pod", ready_delay=3.0)
    states: list[str] = []
    try:
        prov = EmulatedTpuProvider(pod, poll_interval_s=0.02)
        try:
            await asyncio.to_thread(pod_client.recreate, pod.run_dir, "all")
            node = await prov.wait_ready(30, on_progress=lambda n: states.append(n.state))
        finally:
            await prov.close()
    finally:
        await asyncio.to_thread(stop_test_pod, tmp_path / "pod")
    assert node.ready
    assert states[0] in ("CREATING", "REPAIRING") and states[-1] == "READY"
