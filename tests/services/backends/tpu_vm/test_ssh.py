"""SSH fan-out and host-key policy, against the emulated pod's real asyncssh servers."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import itertools
from pathlib import Path

import asyncssh
import pytest

from console.services.backends.tpu_vm.endpoints import HostEndpoint
from console.services.backends.tpu_vm.hostkeys import (
    HostKeyEvent,
    HostKeyPolicy,
    KnownHostsFile,
    fingerprint,
)
from console.services.backends.tpu_vm.ssh import (
    SshFanout,
    quote_command,
    resolve_hosts,
)
from console.wiring.pod import EmulatedTpuProvider
from emulators.tpu_pod import client as pod_client
from emulators.tpu_pod.client import PodInfo
from emulators.tpu_pod.procs import find_marked, marker_value

# --- pure -------------------------------------------------------------------------------
from tests.support.waiting import until

EPS = [HostEndpoint(f"pod-w{i}", f"127.0.0.{10 + i}", 2222, i) for i in range(4)]


def test_sequence_commands_are_quoted() -> None:
    assert quote_command(["echo", "; touch pwned"]) == "echo '; touch pwned'"
    assert quote_command(["a b", "$(id)", "x"]) == "'a b' '$(id)' x"
    assert quote_command("echo $HOME") == "echo $HOME"
    with pytest.raises(ValueError, match="empty"):
        quote_command([])


def test_hosts_resolve_by_name_ip_index_and_suffix() -> None:
    assert [e.index for e in resolve_hosts(EPS, None)] == [0, 1, 2, 3]
    assert [e.index for e in resolve_hosts(EPS, ["pod-w1", "127.0.0.12", 3, "w0"])] == [1, 2, 3, 0]
    assert [e.index for e in resolve_hosts(EPS, ["all"])] == [0, 1, 2, 3]
    assert [e.index for e in resolve_hosts(EPS, ["1", "pod-w1"])] == [1]
    with pytest.raises(ValueError, match=r"unknown host 'w9'.*index 0\.\.3"):
        resolve_hosts(EPS, ["w9"])


def test_hosts_resolve_to_the_first_endpoint_a_reference_names() -> None:
    # "3" is host 1's name and host 3's index: a scan in pod order finds host 1 first
    eps = [
        HostEndpoint("a", "127.0.0.20", 22, 0),
        HostEndpoint("3", "127.0.0.21", 22, 1),
        HostEndpoint("c", "127.0.0.22", 22, 2),
        HostEndpoint("d", "127.0.0.23", 22, 3),
    ]
    assert [e.name for e in resolve_hosts(eps, ["3", 2, "127.0.0.23:22", "c"])] == ["3", "c", "d"]
    big = [HostEndpoint(f"pod-w{i}", f"127.0.{i // 250}.{i % 250 + 1}", 22, i) for i in range(256)]
    assert resolve_hosts(big, list(reversed(range(256)))) == list(reversed(big))


def test_known_hosts_file_replace_keeps_other_lines(tmp_path: Path) -> None:
    k1 = asyncssh.generate_private_key("ssh-ed25519").convert_to_public()
    k2 = asyncssh.generate_private_key("ssh-ed25519").convert_to_public()
    other = asyncssh.generate_private_key("ssh-ed25519").convert_to_public()
    path = tmp_path / "known_hosts"
    salt = b"0123456789abcdefghij"
    hashed = hmac.new(salt, b"[127.0.0.11]:2222", hashlib.sha1).digest()
    hashed_field = f"|1|{base64.b64encode(salt).decode()}|{base64.b64encode(hashed).decode()}"
    path.write_text(
        "# comment\n"
        f"example.org {other.export_public_key().decode().strip()}\n"
        f"{hashed_field} {k2.export_public_key().decode().strip()}\n"
    )
    kh = KnownHostsFile(path)
    assert kh.keys_for("127.0.0.11", 2222) == [k2]  # hashed entry matched
    kh.replace("127.0.0.11", 2222, [k1])
    assert kh.keys_for("127.0.0.11", 2222) == [k1]
    text = path.read_text()
    assert "# comment" in text and "example.org" in text and hashed_field not in text
    assert kh.keys_for("127.0.0.12", 2222) == []


def test_policy_rejects_bad_names(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="allowed values are tpu-api, file, accept-new"):
        HostKeyPolicy("strict", tmp_path / "kh")
    with pytest.raises(ValueError, match="needs a known_hosts file"):
        HostKeyPolicy("file", None)


# --- against the emulator ---------------------------------------------------------------


def endpoints(pod: PodInfo) -> list[HostEndpoint]:
    return [HostEndpoint(h.name, h.ip, h.ssh_port, h.index) for h in pod.hosts]


def fanout(pod: PodInfo, policy: HostKeyPolicy, **kw: object) -> SshFanout:
    opts: dict[str, object] = {"connect_timeout_s": 5.0, "retries": 1, "parallelism": 8}
    opts.update(kw)
    return SshFanout(
        endpoints(pod),
        user=pod.ssh_user,
        client_keys=[pod.client_key],
        host_keys=policy,
        **opts,  # type: ignore[arg-type]
    )


async def test_fanout_streams_output_from_every_host(quiet_pod: PodInfo, tmp_path: Path) -> None:
    provider = EmulatedTpuProvider(quiet_pod)
    fan = fanout(quiet_pod, HostKeyPolicy("tpu-api", tmp_path / "kh", api_keys=provider.host_keys))
    lines: list[tuple[str, str, str]] = []
    try:
        res = await fan.run(
            'echo "host=$PHANTOM_HOST"; echo warn >&2; [ "$PHANTOM_HOST" != pod-x ] && exit 0',
            on_output=lambda h, s, line: lines.append((h, s, line)),
        )
    finally:
        await fan.close()
        await provider.close()
    assert set(res) == {h.name for h in quiet_pod.hosts}
    for h in quiet_pod.hosts:
        r = res[h.name]
        assert r.ok and r.exit_status == 0, r
        assert r.stdout_tail == f"host={h.name}\n"
        assert (h.name, "stdout", f"host={h.name}") in lines
        assert (h.name, "stderr", "warn") in lines


async def test_exit_status_and_subset(quiet_pod: PodInfo, tmp_path: Path) -> None:
    fan = fanout(quiet_pod, HostKeyPolicy("accept-new", tmp_path / "kh"))
    try:
        res = await fan.run("echo boom >&2; exit 7", hosts=["w1", "127.0.0.12"])
    finally:
        await fan.close()
    assert sorted(res) == [quiet_pod.hosts[1].name, quiet_pod.hosts[2].name]
    r = res[quiet_pod.hosts[1].name]
    assert not r.ok and r.exit_status == 7
    assert (
        r.error
        == f"{quiet_pod.hosts[1].ip}:{quiet_pod.ssh_port} ({quiet_pod.hosts[1].name}): exit status 7: boom"
    )


async def test_arguments_never_reach_a_shell(quiet_pod: PodInfo, tmp_path: Path) -> None:
    fan = fanout(quiet_pod, HostKeyPolicy("accept-new", tmp_path / "kh"))
    try:
        res = await fan.run(["echo", "; touch pwned", "$(touch pwned2)"], hosts=[0])
        check = await fan.run("ls -a ~ && pwd", hosts=[0])
    finally:
        await fan.close()
    r = res[quiet_pod.hosts[0].name]
    assert r.ok and r.stdout_tail == "; touch pwned $(touch pwned2)\n"
    listing = check[quiet_pod.hosts[0].name].stdout_tail
    assert "pwned" not in listing
    assert not list(quiet_pod.run_dir.rglob("pwned*"))


async def test_preempted_host_is_named_with_cause(pod: PodInfo, tmp_path: Path) -> None:
    fan = fanout(pod, HostKeyPolicy("accept-new", tmp_path / "kh"), retries=2)
    victim = pod.hosts[2]
    try:
        await pod_client.async_preempt(pod.run_dir, victim.index)
        res = await fan.run("true")
    finally:
        await fan.close()
    assert all(res[h.name].ok for h in pod.hosts if h.index != victim.index)
    r = res[victim.name]
    assert not r.ok and r.exit_status is None
    assert (
        r.error == f"{victim.ip}:{victim.ssh_port} ({victim.name}): connection refused (3 attempts)"
    )


async def test_silent_host_times_out_with_its_name(tmp_path: Path) -> None:
    """A host that accepts TCP but never speaks SSH (a wedged VM): connect timeout, named."""
    accepted: list[asyncio.StreamWriter] = []

    async def hold(_r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        accepted.append(w)

    server = await asyncio.start_server(hold, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    ep = HostEndpoint("pod-w9", "127.0.0.1", port, 9)
    key = asyncssh.generate_private_key("ssh-ed25519")
    fan = SshFanout(
        [ep],
        user="phantom",
        client_keys=[key],
        host_keys=HostKeyPolicy("accept-new", tmp_path / "kh"),
        connect_timeout_s=0.5,
        retries=1,
    )
    try:
        res = await fan.run("true")
    finally:
        await fan.close()
        for w in accepted:
            w.close()
        server.close()
        await server.wait_closed()
    assert res["pod-w9"].error == (
        f"127.0.0.1:{port} (pod-w9): connect timed out after 0.5s (2 attempts)"
    )
    assert len(accepted) == 2  # retried once: a timeout is transient


async def test_wrong_client_key_is_an_auth_failure_not_retried(
    pod: PodInfo, tmp_path: Path
) -> None:
    wrong = asyncssh.generate_private_key("ssh-ed25519")
    fan = SshFanout(
        endpoints(pod),
        user=pod.ssh_user,
        client_keys=[wrong],
        host_keys=HostKeyPolicy("accept-new", tmp_path / "kh"),
        retries=3,
    )
    try:
        res = await fan.run("true", hosts=[1])
    finally:
        await fan.close()
    r = res[pod.hosts[1].name]
    assert not r.ok
    assert r.error.startswith(f"{pod.hosts[1].ip}:{pod.ssh_port} ({pod.hosts[1].name}): ")
    assert f"authentication failed for user 'phantom' with key {fingerprint(wrong)}" in r.error
    assert "attempts" not in r.error  # an auth failure is never retried


async def test_missing_key_file_is_a_config_error(quiet_pod: PodInfo, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"ssh.key = '.*/nope': file not found"):
        SshFanout(
            endpoints(quiet_pod),
            user="phantom",
            client_keys=[tmp_path / "nope"],
            host_keys=HostKeyPolicy("accept-new", tmp_path / "kh"),
        )


async def _recreate(pod: PodInfo, index: int) -> PodInfo:
    await asyncio.to_thread(pod_client.recreate, pod.run_dir, index, True)
    info = pod_client.pod_status(pod.run_dir)
    assert info is not None
    return info


async def test_changed_host_key_refused_under_file_policy(pod: PodInfo, tmp_path: Path) -> None:
    kh = tmp_path / "known_hosts"
    fan = fanout(pod, HostKeyPolicy("file", kh))
    target = pod.hosts[1]
    try:
        # unknown host under `file`: refused, with the way to trust it
        res = await fan.run("true", hosts=[1])
        assert "unknown host key for" in res[target.name].error
        assert f"run `phantom trust {target.name}`" in res[target.name].error
        msg = await fan.trust(1)  # from the offered key (no TPU API given)
        assert target.host_key_fingerprint in msg
        assert (await fan.run("true", hosts=[1]))[target.name].ok

        after = await _recreate(pod, 1)
        new_fp = after.hosts[1].host_key_fingerprint
        assert new_fp != target.host_key_fingerprint
        res = await fan.run("true", hosts=[1])
    finally:
        await fan.close()
    err = res[target.name].error
    assert not res[target.name].ok
    assert err == (
        f"host key for {target.name} ({target.ip}) changed: known {target.host_key_fingerprint}, "
        f"offered {new_fp}; if the VM was recreated run `phantom trust {target.name}` "
        "or use known_hosts_policy=tpu-api"
    )
    assert "attempts" not in err  # never retried


async def test_changed_host_key_accepted_when_tpu_api_publishes_it(
    pod: PodInfo, tmp_path: Path
) -> None:
    kh = tmp_path / "known_hosts"
    events: list[HostKeyEvent] = []
    provider = EmulatedTpuProvider(pod)
    policy = HostKeyPolicy("tpu-api", kh, api_keys=provider.host_keys, on_event=events.append)
    fan = fanout(pod, policy)
    target = pod.hosts[3]
    try:
        assert all(r.ok for r in (await fan.run("true")).values())
        assert {e.kind for e in events} == {"recorded"} and len(events) == 4
        old_fp = target.host_key_fingerprint
        after = await _recreate(pod, 3)
        new_fp = after.hosts[3].host_key_fingerprint
        res = await fan.run("echo ok", hosts=[3])
    finally:
        await fan.close()
        await provider.close()
    assert res[target.name].ok, res[target.name].error
    replaced = [e for e in events if e.kind == "replaced"]
    assert len(replaced) == 1
    assert replaced[0].host == target.name
    assert (replaced[0].old_fingerprint, replaced[0].new_fingerprint) == (old_fp, new_fp)
    assert [fingerprint(k) for k in KnownHostsFile(kh).keys_for(target.ip, pod.ssh_port)] == [
        new_fp
    ]


async def test_key_not_published_by_tpu_api_is_refused(quiet_pod: PodInfo, tmp_path: Path) -> None:
    """The API vouches for one key and the server offers another: a man in the middle."""
    impostor = asyncssh.generate_private_key("ssh-ed25519").convert_to_public()
    target = quiet_pod.hosts[0]

    async def published() -> dict[str, str]:
        return {target.ip: impostor.export_public_key().decode()}

    fan = fanout(quiet_pod, HostKeyPolicy("tpu-api", tmp_path / "kh", api_keys=published))
    try:
        res = await fan.run("true", hosts=[0])
    finally:
        await fan.close()
    assert res[target.name].error == (
        f"host key for {target.name} ({target.ip}) does not match the TPU API: published "
        f"{fingerprint(impostor)}, offered {target.host_key_fingerprint}; refusing "
        "(possible man-in-the-middle)"
    )
    assert not (tmp_path / "kh").exists()  # nothing was recorded


async def test_accept_new_records_then_refuses_change(pod: PodInfo, tmp_path: Path) -> None:
    kh = tmp_path / "kh"
    fan = fanout(pod, HostKeyPolicy("accept-new", kh))
    try:
        assert (await fan.run("true", hosts=[2]))[pod.hosts[2].name].ok
        assert [
            fingerprint(k) for k in KnownHostsFile(kh).keys_for(pod.hosts[2].ip, pod.ssh_port)
        ] == [pod.hosts[2].host_key_fingerprint]
        await _recreate(pod, 2)
        res = await fan.run("true", hosts=[2])
    finally:
        await fan.close()
    assert "changed: known" in res[pod.hosts[2].name].error


async def test_cached_connection_recovers_after_recreate(pod: PodInfo, tmp_path: Path) -> None:
    """A stale cached connection is dropped and re-opened; the command is not lost."""
    provider = EmulatedTpuProvider(pod)
    fan = fanout(pod, HostKeyPolicy("tpu-api", tmp_path / "kh", api_keys=provider.host_keys))
    try:
        assert (await fan.run("true", hosts=[1]))[pod.hosts[1].name].ok
        await _recreate(pod, 1)
        res = await fan.run("echo again", hosts=[1])
    finally:
        await fan.close()
        await provider.close()
    assert res[pod.hosts[1].name].ok, res[pod.hosts[1].name].error


async def test_command_timeout_is_reported(pod: PodInfo, tmp_path: Path) -> None:
    fan = fanout(pod, HostKeyPolicy("accept-new", tmp_path / "kh"), command_timeout_s=0.5)
    try:
        res = await fan.run("echo started; sleep 30", hosts=[0])
    finally:
        await fan.close()
    r = res[pod.hosts[0].name]
    assert not r.ok and r.stdout_tail == "started\n"
    assert r.error.endswith("command timed out after 0.5s")
    # the SIGTERM sent over the channel ends the remote command (no orphan `sleep 30`)
    marker = marker_value(pod_client.read_run_id(pod.run_dir), pod.hosts[0].name)
    await until(lambda: not find_marked(marker), 10, "the remote command to end", step=0.05)


async def test_parallelism_limits_concurrent_sessions(quiet_pod: PodInfo, tmp_path: Path) -> None:
    fan = fanout(quiet_pod, HostKeyPolicy("accept-new", tmp_path / "kh"), parallelism=1)
    try:
        res = await fan.run("date +%s.%N; sleep 0.2; date +%s.%N")
    finally:
        await fan.close()
    spans = sorted(tuple(map(float, r.stdout_tail.split())) for r in res.values())
    assert len(spans) == 4
    for (_, end), (start, _) in itertools.pairwise(spans):
        assert start >= end  # one session at a time


def test_identity_defaults_and_overrides(tmp_path: Path) -> None:
    from console.config import parse_config
    from console.services.backends.tpu_vm.identity import known_hosts_path, ssh_identity

    gcp = parse_config(
        {
            "cluster": {"provider": "gcp", "project": "p", "zone": "z-a"},
            "ssh": {"user": "alice", "key": str(tmp_path / "id"), "known_hosts": "~/kh"},
        }
    )
    assert ssh_identity(gcp.ssh) == ("alice", tmp_path / "id")
    assert known_hosts_path(gcp.ssh) == Path("~/kh").expanduser()
    assert known_hosts_path(parse_config({}).ssh).name == "known_hosts"


async def test_the_pods_ssh_built_from_config_reaches_the_pod(
    quiet_pod: PodInfo, tmp_path: Path
) -> None:
    from console.config import Config
    from console.services.backends.tpu_vm.parts import PodParts
    from console.wiring.pod import pod_access
    from console.wiring.settings import tpu_vm_settings

    events: list[HostKeyEvent] = []
    parts = PodParts(
        tpu_vm_settings(Config()),
        pod_access(Config(), quiet_pod, tmp_path),
        state_dir=tmp_path,
        on_host_key=events.append,
    )
    try:
        res = await parts.ssh.run(["printenv", "PHANTOM_HOST"])
        fan = parts.ssh
    finally:
        await parts.close()
    assert {n: r.stdout_tail.strip() for n, r in res.items()} == {
        h.name: h.name for h in quiet_pod.hosts
    }
    assert fan.user == quiet_pod.ssh_user and fan.host_keys.policy == "tpu-api"
    assert len(events) == 4


async def test_watch_sessions_take_no_fan_out_slot(pod: PodInfo, tmp_path: Path) -> None:
    """A watcher per host (the preemption-notice watchers) runs as long as its host: it must
    not hold a fan-out slot, or a pod with as many hosts as slots starves every command (at
    256 hosts and the default parallelism each poll hung until its budget ran out)."""
    fan = fanout(pod, HostKeyPolicy("accept-new", tmp_path / "kh"), parallelism=2)
    started: set[str] = set()
    watchers = [
        asyncio.create_task(
            fan.run_one(
                h.name, "echo up; sleep 30", lambda host, _s, _l: started.add(host), watch=True
            )
        )
        for h in pod.hosts
    ]
    try:
        await until(lambda: len(started) == len(pod.hosts), 20, "every watcher to start")
        res = await asyncio.wait_for(fan.run("echo done"), 10)
        assert all(r.ok and r.stdout_tail == "done\n" for r in res.values()), res
    finally:
        for task in watchers:
            task.cancel()
        await asyncio.gather(*watchers, return_exceptions=True)
        await fan.close()


async def test_probes_ride_the_connection_the_fan_out_holds(
    quiet_pod: PodInfo, tmp_path: Path
) -> None:
    """One SSH connection a host, not two: at 1,024 hosts the probes' own connections were
    1,024 more sockets on each side (the emulator ran out of file descriptors). A host the
    fan-out holds no connection to is probed on one the probe makes and the fan-out keeps."""
    policy = HostKeyPolicy("accept-new", tmp_path / "kh")
    fan, probe = fanout(quiet_pod, policy), fanout(quiet_pod, policy, retries=0)
    probe.borrow_from = fan
    try:
        first = quiet_pod.hosts[0].name
        assert (await fan.run("true", [first]))[first].ok
        res = await probe.probe()
        assert all(r.ok for r in res.values()), res
        assert probe.connections_opened == len(quiet_pod.hosts) - 1  # none to the first host
        assert all(r.ok for r in (await fan.run("true")).values())
        assert fan.connections_opened == 1  # it kept the probe's
    finally:
        await probe.close()
        await fan.close()


async def test_a_command_gets_no_input(quiet_pod: PodInfo, tmp_path: Path) -> None:
    """As ``ssh -n``: stdin is at EOF, so the host's sshd holds no stdin pipe for a session
    (a notice watcher on every host held one each) and a command that reads it ends."""
    fan = fanout(quiet_pod, HostKeyPolicy("accept-new", tmp_path / "kh"))
    try:
        res = await fan.run_one(quiet_pod.hosts[0].name, "cat; echo eof", timeout_s=10)
        assert res.ok and res.stdout_tail == "eof\n", res
    finally:
        await fan.close()
