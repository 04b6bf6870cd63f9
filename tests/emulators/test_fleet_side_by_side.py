"""A fleet's emulators side by side: the two pods and the GKE cluster of examples/fleet.toml,
each started by its own `phantom --cluster NAME pod|gke up`, answer on their own addresses,
run dirs and APIs without clashing; every process is stopped by its pid afterwards, also
when the test fails."""

from __future__ import annotations

import asyncio
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from console.config import load_fleet
from emulators.gke import client as gke_client
from emulators.tpu_pod.client import PodInfo, pod_status
from tests.script.test_e2e import phantom_argv
from tests.support import REPO
from tests.support.emulator_helpers import alive, tpu
from tests.support.fixtures_gke import FAST, kubectl, stop_cluster
from tests.support.fixtures_pod import ssh_run, stop_test_pod

FLEET = REPO / "examples" / "fleet.toml"


def phantom(state: Path, *args: str, timeout: float = 180.0) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "XDG_STATE_HOME": str(state), "PHANTOM_NO_CONFIG_DISCOVERY": "1"}
    return subprocess.run(
        phantom_argv("--config", str(FLEET), *args),
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture
def fleet_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The fleet's state dir; afterwards every emulator of it is stopped by its pid (the
    run dir's pid file), and none may leave a process behind."""
    state = tmp_path / "state"
    monkeypatch.setenv("XDG_STATE_HOME", str(state))
    fleet = load_fleet(FLEET)
    yield state
    pids = []
    for member in fleet.members:
        if member.is_local:
            run_dir = Path(member.cluster.run_dir)
            info = pod_status(run_dir)
            pids += [info.pid] if info else []
            stop_test_pod(run_dir)
        else:
            run_dir = Path(member.gke.run_dir)
            gke = gke_client.status(run_dir)
            pids += [gke.pid] if gke else []
            stop_cluster(run_dir)
    assert not [p for p in pids if alive(p)], f"emulator daemons survived: {pids}"


async def node_of(info: PodInfo) -> tuple[str, list[str]]:
    async with tpu(info) as api:
        node = await api.get_node(name=info.node_path)
    return node.state.name, [e.ip_address for e in node.network_endpoints]


def test_two_pods_and_a_gke_cluster_run_side_by_side(fleet_state: Path) -> None:
    fleet = load_fleet(FLEET)
    pod_a, pod_b, grpo = fleet.members
    ups = [
        ("pod-a", "pod", "up", "--ssh-port", "0", "--ready-delay", "0.2"),
        ("pod-b", "pod", "up", "--ssh-port", "0", "--ready-delay", "0.2"),
        ("grpo", "gke", "up", *FAST),
    ]
    for name, *command in ups:
        proc = phantom(fleet_state, "--cluster", name, *command)
        assert proc.returncode == 0, f"{name}: {proc.stderr[-2000:]}"

    a = pod_status(Path(pod_a.cluster.run_dir))
    b = pod_status(Path(pod_b.cluster.run_dir))
    gke = gke_client.status(Path(grpo.gke.run_dir))
    assert a is not None and b is not None and gke is not None
    # each where its entry says: zone, node, size; the zone's place picks the addresses
    assert (a.zone, a.node_name, len(a.hosts)) == ("local-a", "pod-a", 4)
    assert (b.zone, b.node_name, len(b.hosts)) == ("local-b", "pod-b", 2)
    assert [h.ip for h in a.hosts] == [f"127.0.0.{10 + i}" for i in range(4)]
    assert [h.ip for h in b.hosts] == [f"127.1.0.{10 + i}" for i in range(2)]
    assert len({a.tpu_api, b.tpu_api, gke.server}) == 3
    assert len({a.run_dir, b.run_dir, gke.run_dir}) == 3
    assert len({a.pid, b.pid, gke.pid}) == 3

    # each pod's TPU API knows its own node, READY, on its own addresses
    for info in (a, b):
        state, ips = asyncio.run(node_of(info))
        assert (state, ips) == ("READY", [h.ip for h in info.hosts])
    # each host answers the real ssh client on its own address, as its own VM
    for info in (a, b):
        for host in info.hosts:
            done = ssh_run(info, host.index, "echo $HOME")
            assert done.returncode == 0, done.stderr
            assert done.stdout.strip() == host.sandbox
    # the GKE cluster answers the real kubectl with its own slice's nodes (v5p-64: 8)
    assert gke.tpu_type == "v5p-64" and len(gke.slices) == 1
    listed = subprocess.run(
        [kubectl("1.28"), "--kubeconfig", str(gke.kubeconfig), "get", "nodes", "-o", "name"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert listed.returncode == 0, listed.stderr
    names = {line.removeprefix("node/") for line in listed.stdout.split()}
    assert set(gke.slices[0].nodes) <= names and len(gke.slices[0].nodes) == 8

    # `phantom --cluster NAME pod status` reads that cluster's emulator, not the other's
    for name, info in (("pod-a", a), ("pod-b", b)):
        shown = phantom(fleet_state, "--cluster", name, "pod", "status", "--json")
        assert shown.returncode == 0, shown.stderr
        assert f'"node_name": "{info.node_name}"' in shown.stdout
