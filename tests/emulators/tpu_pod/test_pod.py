"""The local spot-pod emulator over its real protocols: gRPC TPU API, OpenSSH, CLI."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
from pathlib import Path

import asyncssh
import grpc
import pytest
from google.auth.credentials import AnonymousCredentials
from google.cloud import tpu_v2
from google.cloud.tpu_v2.services.tpu.transports import TpuGrpcAsyncIOTransport

from emulators.tpu_pod import client
from emulators.tpu_pod.cli import pod_main
from emulators.tpu_pod.client import PodInfo
from emulators.tpu_pod.layout import host_ip
from tests.support.fixtures_pod import ssh_run, start_test_pod, stop_test_pod


def tpu_client(info: PodInfo) -> tuple[tpu_v2.TpuAsyncClient, grpc.aio.Channel]:
    channel = grpc.aio.insecure_channel(info.tpu_api)
    transport = TpuGrpcAsyncIOTransport(channel=channel, credentials=AnonymousCredentials())
    return tpu_v2.TpuAsyncClient(transport=transport), channel


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


async def test_tpu_client_lists_gets_and_reads_guest_attributes(quiet_pod: PodInfo) -> None:
    tpu, channel = tpu_client(quiet_pod)
    async with channel:
        nodes = [n async for n in await tpu.list_nodes(parent=quiet_pod.parent)]
        assert [n.name for n in nodes] == [quiet_pod.node_path]
        node = nodes[0]
        assert node.state == tpu_v2.Node.State.READY
        assert node.accelerator_type == "v4-32"
        assert node.scheduling_config.spot
        endpoints = [(e.ip_address, e.port) for e in node.network_endpoints]
        assert endpoints == [(host_ip(i), quiet_pod.ssh_port) for i in range(4)]

        got = await tpu.get_node(name=quiet_pod.node_path)
        assert got.name == quiet_pod.node_path and got.state == tpu_v2.Node.State.READY

        attrs = await tpu.get_guest_attributes(
            request={"name": quiet_pod.node_path, "query_path": "hostkeys/ssh-host-key"}
        )
        published = [a.query_value.items[0].value for a in attrs.guest_attributes]
        assert published == [h.host_key for h in quiet_pod.hosts]
        known = quiet_pod.known_hosts.read_text().splitlines()
        assert known == [f"[{h.ip}]:{h.ssh_port} {h.host_key}" for h in quiet_pod.hosts]

        with pytest.raises(Exception, match="not found"):
            await tpu.get_node(name=quiet_pod.node_path + "-missing")


async def test_tpu_delete_and_create_are_long_running_operations(pod: PodInfo) -> None:
    tpu, channel = tpu_client(pod)
    async with channel:
        op = await tpu.delete_node(name=pod.node_path)
        await op.result()
        assert [n async for n in await tpu.list_nodes(parent=pod.parent)] == []
        assert ssh_run(pod, 0, "true").returncode == 255  # the VMs are gone

        op = await tpu.create_node(
            parent=pod.parent, node_id=pod.node_name, node=tpu_v2.Node(accelerator_type="v4-32")
        )
        node = await op.result()
        assert node.state == tpu_v2.Node.State.READY
        assert len(node.network_endpoints) == 4

    fresh = client.pod_status(pod.run_dir)
    assert fresh is not None and fresh.state == "READY"
    old_keys = {h.host_key for h in pod.hosts}
    assert not old_keys & {h.host_key for h in fresh.hosts}
    result = ssh_run(fresh, 3, "echo $PHANTOM_HOST")
    assert result.stdout.strip() == fresh.hosts[3].name, result.stderr


def test_openssh_runs_command_on_host_2_with_strict_host_keys(quiet_pod: PodInfo) -> None:
    argv = quiet_pod.ssh_argv(
        2, 'echo "$PHANTOM_HOST $PHANTOM_HOST_IP $PWD"; cat; echo oops >&2; exit 7'
    )
    assert "StrictHostKeyChecking=yes" in argv and "BatchMode=yes" in argv
    result = subprocess.run(argv, input="from stdin\n", capture_output=True, text=True, timeout=60)
    assert result.returncode == 7, result.stderr
    host = quiet_pod.hosts[2]
    sandbox = str(quiet_pod.run_dir / "hosts" / host.name / "home")
    assert result.stdout.splitlines() == [f"{host.name} {host.ip} {sandbox}", "from stdin"]
    assert "oops" in result.stderr

    env = ssh_run(quiet_pod, "127.0.0.12", "env").stdout
    path = next(line for line in env.splitlines() if line.startswith("PATH=")).split("=", 1)[1]
    # The host-scoped `ray` wrapper, then the venv's bin, then ~/.local/bin, then system.
    assert path.split(":")[:3] == [
        str(quiet_pod.run_dir / "bin"),
        str(Path(sys.executable).parent),
        f"{sandbox}/.local/bin",
    ]
    assert "TMPDIR=" in env and f"HOME={sandbox}" in env


def test_ssh_rejects_wrong_user_and_unknown_key(quiet_pod: PodInfo, tmp_path: Path) -> None:
    argv = quiet_pod.ssh_argv(1, "true")
    wrong_user = [a.replace(f"{quiet_pod.ssh_user}@", "root@") for a in argv]
    assert subprocess.run(wrong_user, capture_output=True, timeout=60).returncode == 255
    other_key = tmp_path / "other"
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other_key)], check=True
    )
    argv[argv.index(str(quiet_pod.client_key))] = str(other_key)
    result = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert result.returncode == 255 and "Permission denied" in result.stderr


async def test_asyncssh_forwards_to_loopback_only(quiet_pod: PodInfo) -> None:
    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"pong:" + await reader.readline())
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(echo, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server, asyncssh.connect(**quiet_pod.asyncssh_options(0)) as conn:
        result = await conn.run("echo $PHANTOM_HOST", check=True)
        assert str(result.stdout).strip() == quiet_pod.hosts[0].name
        for dest in ("localhost", "127.0.0.1"):
            reader, writer = await conn.open_connection(dest, port)
            writer.write(b"ping\n")
            assert await reader.readline() == b"pong:ping\n"
            writer.close()
        with pytest.raises(asyncssh.ChannelOpenError, match="loopback"):
            await conn.open_connection("example.invalid", 80)


async def test_signals_from_the_client_reach_the_command(quiet_pod: PodInfo) -> None:
    async with asyncssh.connect(**quiet_pod.asyncssh_options(1)) as conn:
        proc = await conn.create_process("echo up; exec sleep 1000", stdin=asyncssh.DEVNULL)
        assert await proc.stdout.readline() == "up\n"
        proc.send_signal("TERM")
        result = await asyncio.wait_for(proc.wait(), 30)
        assert result.exit_signal is not None and result.exit_signal[0] == "TERM"


async def test_commands_and_shells_start_inside_the_host_cgroup(quiet_pod: PodInfo) -> None:
    """A host's shell joins its cgroup before the command runs."""
    if client.read_cgroup(quiet_pod.run_dir) is None:
        pytest.skip("no writable cgroup hierarchy here: host processes are tracked by marker")
    probe = 'echo "$$ $LINENO"; cat "$_PHANTOM_POD_CGROUP/cgroup.procs"\n'
    async with asyncssh.connect(**quiet_pod.asyncssh_options(3)) as conn:
        ran = await conn.run(probe, check=True)  # an "exec" request: bash -c
        shell = await conn.run(input=probe, check=True)  # a "shell" request: bash on stdin
    for result in (ran, shell):
        pid, line, *members = str(result.stdout).split()
        assert line == "1"  # the command's own line numbers
        assert pid in members, result.stdout


def test_preempt_kills_host_processes_and_recreate_gives_fresh_vm(pod: PodInfo) -> None:
    # A detached daemon (own session, like `ray start`) and a foreground session.
    started = ssh_run(
        pod, 2, "setsid nohup sleep 1000 </dev/null >/dev/null 2>&1 & echo $!; touch ~/marker"
    )
    daemon_pid = int(started.stdout.strip())
    foreground = subprocess.Popen(
        pod.ssh_argv(2, "echo up; sleep 1001"), stdout=subprocess.PIPE, text=True
    )
    assert foreground.stdout is not None and foreground.stdout.readline() == "up\n"
    bystander = ssh_run(pod, 1, "setsid nohup sleep 1002 </dev/null >/dev/null 2>&1 & echo $!")
    bystander_pid = int(bystander.stdout.strip())
    assert _alive(daemon_pid) and _alive(bystander_pid)

    after = client.preempt(pod.run_dir, 2)

    # preempt returns only once the kill loop found no process of host 2 left.
    assert not _alive(daemon_pid)
    assert foreground.wait(timeout=30) == 255  # connection dropped
    assert _alive(bystander_pid)
    assert after.state == "PREEMPTED"
    assert [h.state for h in after.hosts] == ["READY", "READY", "PREEMPTED", "READY"]
    event = after.events[-1]
    assert event["kind"] == "preempt" and event["killed"] >= 2
    print(f"preempt host 2: {event['killed']} processes gone in {event['kill_seconds']}s")
    refused = ssh_run(pod, 2, "true")
    assert refused.returncode == 255 and "refused" in refused.stderr

    async def api_view() -> tpu_v2.Node:
        tpu, channel = tpu_client(pod)
        async with channel:
            return await tpu.get_node(name=pod.node_path)

    node = asyncio.run(api_view())
    assert node.state == tpu_v2.Node.State.PREEMPTED
    assert [s.worker_id for s in node.symptoms] == ["2"]

    repairing = client.recreate(pod.run_dir, "phantom-pod-w2")
    assert repairing.state == "REPAIRING"
    ready = client.wait_for(pod.run_dir, lambda p: p.state == "READY", 60, "READY")
    assert ready.hosts[2].host_key_fingerprint != pod.hosts[2].host_key_fingerprint
    assert ready.hosts[0].host_key == pod.hosts[0].host_key
    # known_hosts was updated, so strict checking accepts the new key.
    listing = ssh_run(ready, 2, "ls -A ~")
    assert listing.returncode == 0, listing.stderr
    assert "marker" not in listing.stdout.split()


def test_preempt_all_and_recreate_all(pod: PodInfo) -> None:
    for i in range(4):
        ssh_run(pod, i, "setsid nohup sleep 1000 </dev/null >/dev/null 2>&1 &")
    after = client.preempt(pod.run_dir, "all")
    assert {h.state for h in after.hosts} == {"PREEMPTED"}
    assert client.leftover_pids(pod.run_dir) == []
    assert client.recreate(pod.run_dir, "all").state == "CREATING"
    ready = client.wait_for(pod.run_dir, lambda p: p.state == "READY", 60, "READY")
    assert ssh_run(ready, 3, "true").returncode == 0


def test_cli_up_twice_unknown_host_status_and_down(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = tmp_path / "pod"
    common = ["--run-dir", str(run_dir)]
    try:
        up = ["up", *common, "--hosts", "2", "--ssh-port", "0", "--ready-delay", "0.1", "--json"]
        assert pod_main(up) == 0
        status = json.loads(capsys.readouterr().out)
        assert status["state"] == "READY" and len(status["hosts"]) == 2
        for key in (
            "run_dir", "pid", "tpu_api", "project", "zone", "node_name", "node_path",
            "accelerator_type", "ssh_user", "client_key", "known_hosts", "bucket",
        ):  # fmt: skip
            assert key in status
        assert set(status["hosts"][0]) >= {
            "index", "name", "ip", "ssh_port", "state", "host_key_fingerprint",
        }  # fmt: skip
        bucket = Path(status["bucket"])
        assert bucket.is_dir() and not str(bucket).startswith(str(run_dir / "hosts"))

        assert pod_main(up) == 1
        err = capsys.readouterr().err
        assert "already running" in err and str(status["pid"]) in err

        assert pod_main(["preempt", "7", *common]) == 2
        assert "unknown host '7'" in capsys.readouterr().err
        assert pod_main(["recreate", "phantom-pod-w9", *common]) == 2
        assert pod_main(["preempt", "127.0.0.11", *common]) == 0
        assert "PREEMPTED" in capsys.readouterr().out
    finally:
        assert pod_main(["down", *common]) == 0
    assert client.leftover_pids(run_dir) == []
    assert not _alive(status["pid"])
    assert pod_main(["status", *common]) == 1


def test_cli_up_fails_clearly_when_the_ssh_port_is_taken(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with socket.socket() as taken:
        taken.bind((host_ip(2), 0))
        taken.listen()
        port = taken.getsockname()[1]
        argv = ["up", "--run-dir", str(tmp_path / "pod"), "--ssh-port", str(port)]
        assert pod_main(argv) == 2
    assert f"port {port} on 127.0.0.12 is in use; pass --ssh-port" in capsys.readouterr().err
    assert client.pod_status(tmp_path / "pod") is None


def test_cli_rejects_bad_flags(capsys: pytest.CaptureFixture[str]) -> None:
    assert pod_main(["up", "--hosts", "0"]) == 2
    assert "--hosts" in capsys.readouterr().err
    assert pod_main(["up", "--ssh-port", "70000"]) == 2
    assert pod_main(["up", "--nice", "20"]) == 2
    assert "--nice: must be 0..19, got 20" in capsys.readouterr().err
    with pytest.raises(client.PodUsageError, match=r"--nice must be 0\.\.19, got -1"):
        client.start_pod("/nonexistent/pod", nice=-1)
    assert pod_main(["frobnicate"]) == 2


def test_32_hosts(tmp_path: Path) -> None:
    run_dir = tmp_path / "pod32"
    info = start_test_pod(run_dir, hosts=32, ready_delay=0.0)
    try:
        assert len(info.hosts) == 32 and info.hosts[31].ip == "127.0.0.41"
        assert ssh_run(info, 31, "echo $PHANTOM_HOST").stdout.strip() == info.hosts[31].name
    finally:
        stop_test_pod(run_dir)


def test_seeded_chaos_preempts_on_its_own(tmp_path: Path) -> None:
    run_dir = tmp_path / "chaos"
    start_test_pod(run_dir, hosts=2, chaos_seed=7, chaos_interval=0.5)
    try:
        info = client.wait_for(
            run_dir,
            lambda p: any(e.get("source") == "chaos" for e in p.events),
            60,
            "a chaos preemption",
        )
        assert info.state == "PREEMPTED"
    finally:
        stop_test_pod(run_dir)
