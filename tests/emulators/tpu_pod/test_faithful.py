"""GCP-faithful mode: whole-slice preemption, whole-node Delete/Create only, external IPs,
a GCP user's SSH user/key, host keys in guest attributes (new on every Create)."""

from __future__ import annotations

import asyncio
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from google.cloud import tpu_v2

from emulators.tpu_pod import client
from emulators.tpu_pod.cli import pod_main
from emulators.tpu_pod.client import PodInfo
from emulators.tpu_pod.layout import host_ip
from tests.support.emulator_helpers import alive, running_pod, tpu
from tests.support.fixtures_pod import ssh_run


def ssh_ext(info: PodInfo, host: int, command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        info.ssh_argv(host, command, external=True),
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "SSH_AUTH_SOCK": ""},
    )


async def published_host_keys(info: PodInfo) -> list[str]:
    async with tpu(info) as api:
        attrs = await api.get_guest_attributes(
            request={"name": info.node_path, "query_path": "hostkeys/ssh-host-key"}
        )
    return [
        a.query_value.items[0].value if a.query_value.items else "" for a in attrs.guest_attributes
    ]


@pytest.fixture
def faithful_pod(tmp_path: Path) -> Iterator[PodInfo]:
    with running_pod(tmp_path / "pod", faithful=True) as info:
        yield info


async def test_external_ips_are_distinct_loopback_addresses_that_ssh_answers_on(
    faithful_pod: PodInfo,
) -> None:
    info = faithful_pod
    assert info.faithful
    assert [h.external_ip for h in info.hosts] == [
        host_ip(i, external=True) for i in range(len(info.hosts))
    ]
    assert all(h.external_ip != h.ip for h in info.hosts)
    async with tpu(info) as api:
        node = await api.get_node(name=info.node_path)
    assert [(e.ip_address, e.access_config.external_ip) for e in node.network_endpoints] == [
        (h.ip, h.external_ip) for h in info.hosts
    ]
    assert node.network_config.enable_external_ips
    for i in (0, 3):
        result = ssh_ext(info, i, "echo $PHANTOM_HOST $SSH_CONNECTION")
        assert result.returncode == 0, result.stderr
        name, *_, local_ip, _port = result.stdout.split()
        assert name == info.hosts[i].name and local_ip == info.hosts[i].external_ip
    assert ssh_run(info, 1, "true").returncode == 0  # the internal IP answers too


async def test_a_preemption_takes_the_whole_slice_and_only_delete_create_bring_it_back(
    faithful_pod: PodInfo, capsys: pytest.CaptureFixture[str]
) -> None:
    info = faithful_pod
    daemons = [
        int(ssh_run(info, i, "setsid sleep 1000 </dev/null >/dev/null 2>&1 & echo $!").stdout)
        for i in (0, 3)
    ]
    assert all(alive(p) for p in daemons)

    after = client.preempt(info.run_dir, 2)  # one host named, the whole slice goes

    assert after.state == "PREEMPTED"
    assert {h.state for h in after.hosts} == {"PREEMPTED"}
    assert not any(alive(p) for p in daemons)
    assert client.leftover_pids(info.run_dir) == []
    for i in range(len(info.hosts)):
        assert ssh_run(info, i, "true").returncode == 255
        assert "refused" in ssh_ext(info, i, "true").stderr
    async with tpu(info) as api:
        node = await api.get_node(name=info.node_path)
    assert node.state == tpu_v2.Node.State.PREEMPTED

    with pytest.raises(client.PodError, match="cannot recreate single workers"):
        client.recreate(info.run_dir, 2)
    assert pod_main(["recreate", "1", "--run-dir", str(info.run_dir)]) == 1
    assert "delete the node and create it again" in capsys.readouterr().err

    old_keys = await published_host_keys(info)
    assert old_keys == ["", "", "", ""]  # a preempted VM publishes nothing
    async with tpu(info) as api:
        await (await api.delete_node(name=info.node_path)).result()
        spec = tpu_v2.Node(
            accelerator_type="v4-32",
            network_config=tpu_v2.NetworkConfig(enable_external_ips=True),
            scheduling_config=tpu_v2.SchedulingConfig(spot=True),
        )
        op = await api.create_node(parent=info.parent, node_id=info.node_name, node=spec)
        created = await op.result()
    assert created.state == tpu_v2.Node.State.READY
    fresh = client.pod_status(info.run_dir)
    assert fresh is not None and fresh.state == "READY"
    new_keys = await published_host_keys(fresh)
    assert new_keys == [h.host_key for h in fresh.hosts]
    assert set(new_keys).isdisjoint(h.host_key for h in info.hosts)
    # known_hosts follows, so strict host key checking accepts the new VMs.
    result = ssh_ext(fresh, 2, "echo $PHANTOM_HOST")
    assert result.returncode == 0 and result.stdout.strip() == fresh.hosts[2].name


async def test_a_gcp_users_ssh_user_and_key_and_ssh_keys_metadata(tmp_path: Path) -> None:
    key = tmp_path / "google_compute_engine"
    await asyncio.to_thread(_keygen, key)
    with running_pod(tmp_path / "pod", faithful=True, ssh_user="alice", ssh_key=key) as info:
        assert info.ssh_user == "alice" and info.client_key == key
        result = ssh_ext(info, 0, "echo $USER")
        assert result.returncode == 0 and result.stdout.strip() == "alice", result.stderr
        as_phantom = [a.replace("alice@", "phantom@") for a in info.ssh_argv(0, "true")]
        refused = await asyncio.to_thread(
            subprocess.run, as_phantom, capture_output=True, timeout=60
        )
        assert refused.returncode == 255

        # Keys in the node's ssh-keys metadata are authorized too, as GCE does.
        bob = tmp_path / "bob"
        await asyncio.to_thread(_keygen, bob)
        line = "bob:" + (bob.with_suffix(".pub")).read_text().strip()
        async with tpu(info) as api:
            await (await api.delete_node(name=info.node_path)).result()
            spec = tpu_v2.Node(
                accelerator_type="v4-32",
                metadata={"ssh-keys": line},
                network_config=tpu_v2.NetworkConfig(enable_external_ips=True),
            )
            op = await api.create_node(parent=info.parent, node_id=info.node_name, node=spec)
            await op.result()
        fresh = client.pod_status(info.run_dir)
        assert fresh is not None
        argv = fresh.ssh_argv(1, "echo $USER", external=True)
        argv[argv.index(str(key))] = str(bob)
        argv = [a.replace("alice@", "bob@") for a in argv]
        result = await asyncio.to_thread(
            subprocess.run, argv, capture_output=True, text=True, timeout=60
        )
        assert result.returncode == 0 and result.stdout.strip() == "bob", result.stderr


def _keygen(path: Path) -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)
