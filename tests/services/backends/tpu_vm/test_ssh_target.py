"""Where the gcp path's SSH goes, against the GCP-faithful emulator: each worker's external IP
by default (as `gcloud compute tpus tpu-vm ssh`), its internal IP with ``ssh.internal_ip``,
or through ``ssh.proxy_command`` (a bastion here, with OpenSSH's ``ssh -W``). Whatever the
address, Ray's identity and the host key's stay the worker's internal IP, checked strictly.
"""

from __future__ import annotations

import stat
import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import asyncssh
import pytest

from benchmarks.pods import gcp_config
from console.services.backends.tpu_vm.backend import TpuVmBackend
from console.services.backends.tpu_vm.hostkeys import host_pattern
from console.services.facade import Facade
from console.wiring import make_services
from emulators.tpu_pod.client import PodInfo
from tests.support.emulator_helpers import running_pod


def keygen(path: Path) -> Path:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)
    return path


@pytest.fixture(scope="module")
def gcp_pod(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PodInfo]:
    """A GCP-faithful 4-host pod whose SSH user and key are a GCP user's."""
    tmp = tmp_path_factory.mktemp("gcp-pod")
    key = keygen(tmp / "google_compute_engine")
    with running_pod(tmp / "pod", faithful=True, ssh_user="alice", ssh_key=key) as info:
        yield info


@pytest.fixture
async def services(
    gcp_pod: PodInfo, tmp_path: Path, request: pytest.FixtureRequest
) -> AsyncIterator[Facade]:
    ssh: dict[str, Any] = getattr(request, "param", {})
    svc = make_services(gcp_config(gcp_pod, tmp_path, ssh=ssh), state_dir=tmp_path / "state")
    try:
        yield svc
    finally:
        await svc.stop()
        svc.close_journal()


def backend(svc: Facade) -> TpuVmBackend:
    assert isinstance(svc.backend, TpuVmBackend)
    return svc.backend


async def server_addresses(svc: Facade) -> dict[str, str]:
    """Worker name -> the address its sshd saw the connection arrive on."""
    res = await backend(svc).parts.ssh.run('echo "$SSH_CONNECTION"')
    assert all(r.ok for r in res.values()), res
    return {name: r.stdout_tail.split()[2] for name, r in res.items()}


async def test_external_ip_by_default_with_host_keys_of_the_internal_ip(
    gcp_pod: PodInfo, services: Facade
) -> None:
    snap = await services.refresh()
    assert [h.ssh for h in snap.hosts] == ["ok"] * 4
    assert [h.ip for h in snap.hosts] == [h.ip for h in gcp_pod.hosts]  # Ray's identity
    assert await server_addresses(services) == {h.name: h.external_ip for h in gcp_pod.hosts}
    # Trusted from the TPU API's guest attributes and recorded under the internal IP, so
    # switching between external, internal and proxied access keeps the record valid.
    parts = backend(services).parts
    known = parts.host_keys.file
    assert known is not None
    for h in gcp_pod.hosts:
        (key,) = known.keys_for(h.ip, h.ssh_port)
        assert key.get_fingerprint("sha256") == h.host_key_fingerprint
        assert known.keys_for(h.external_ip, h.ssh_port) == []
    assert [ep.label.split(" ")[0] for ep in parts.endpoints] == [
        f"{h.external_ip}:{h.ssh_port}" for h in gcp_pod.hosts
    ]


@pytest.mark.parametrize("services", [{"internal_ip": True}], indirect=True)
async def test_internal_ip_inside_the_vpc(gcp_pod: PodInfo, services: Facade) -> None:
    snap = await services.refresh()
    assert [h.ssh for h in snap.hosts] == ["ok"] * 4
    assert await server_addresses(services) == {h.name: h.ip for h in gcp_pod.hosts}


async def test_proxy_command_through_a_bastion(gcp_pod: PodInfo, tmp_path: Path) -> None:
    """`ssh -W %h:%p` through worker 0's external address, as through a bastion host: the
    proxy is handed each worker's internal IP and port; the host key is still checked."""
    log = tmp_path / "proxy.log"
    bastion = gcp_pod.hosts[0]
    proxy = tmp_path / "bastion-proxy"
    opts = " ".join(gcp_pod.ssh_options())
    proxy.write_text(
        "#!/bin/sh\n"
        f'echo "$1 $2 $3" >> {log}\n'
        f'SSH_AUTH_SOCK= exec ssh {opts} -p {bastion.ssh_port} -W "$1:$2" '
        f"{gcp_pod.ssh_user}@{bastion.external_ip}\n"
    )
    proxy.chmod(proxy.stat().st_mode | stat.S_IXUSR)
    cfg = gcp_config(gcp_pod, tmp_path, ssh={"proxy_command": f"{proxy} %h %p %n"})
    svc = make_services(cfg, state_dir=tmp_path / "state")
    try:
        snap = await svc.refresh()
        assert [h.ssh for h in snap.hosts] == ["ok"] * 4, snap
        addresses = await server_addresses(svc)
    finally:
        await svc.stop()
        svc.close_journal()
    assert addresses == {h.name: h.ip for h in gcp_pod.hosts}
    used = set(log.read_text().splitlines())
    assert {f"{h.ip} {h.ssh_port} {h.name}" for h in gcp_pod.hosts} <= used


async def test_a_changed_host_key_is_refused_on_the_external_address(
    gcp_pod: PodInfo, tmp_path: Path
) -> None:
    """With known_hosts as the only trust, a worker offering a key other than the one on
    record for it is refused, whichever address SSH went to."""
    impostor = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode()
    known = tmp_path / "known_hosts"
    h0, h1 = gcp_pod.hosts[0], gcp_pod.hosts[1]
    known.write_text(
        f"{host_pattern(h0.ip, h0.ssh_port)} {h0.host_key}\n"
        f"{host_pattern(h1.ip, h1.ssh_port)} {impostor}"
    )
    cfg = gcp_config(
        gcp_pod,
        tmp_path,
        ssh={"known_hosts_policy": "file", "known_hosts": str(known), "retries": 0},
    )
    svc = make_services(cfg, state_dir=tmp_path / "state")
    try:
        await svc.refresh()
        res = await backend(svc).parts.ssh.run("true", [h0.name, h1.name])
    finally:
        await svc.stop()
        svc.close_journal()
    assert res[h0.name].ok
    assert not res[h1.name].ok
    error = res[h1.name].error
    assert f"host key for {h1.name} ({h1.ip}, reached at {h1.external_ip}) changed" in error


def test_bad_proxy_commands_are_named(tmp_path: Path) -> None:
    from console.config import ConfigError, parse_config

    gcp = {"provider": "gcp", "project": "p", "zone": "us-central2-b"}
    with pytest.raises(ConfigError, match=r"ssh\.proxy_command = .*unknown token\(s\) %x"):
        parse_config({"cluster": gcp, "ssh": {"proxy_command": "nc %x %p"}})
    with pytest.raises(ConfigError, match=r"ssh\.proxy_command = .*bad quoting"):
        parse_config({"cluster": gcp, "ssh": {"proxy_command": "nc 'unterminated"}})
