"""Faults seen in the field (issue 12): hang, silent-death, stale-api, slow-api, and clear."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import urllib.request
from pathlib import Path

import asyncssh
import pytest
from google.api_core import exceptions as gexc
from google.cloud import tpu_v2

from emulators.tpu_pod import client
from emulators.tpu_pod.cli import pod_main
from emulators.tpu_pod.client import PodInfo
from emulators.tpu_pod.procs import find_marked, marker_value
from tests.support.emulator_helpers import alive, running_pod, tpu
from tests.support.fixtures_pod import ssh_run
from tests.support.waiting import until, wait_until


def quick_ssh(info: PodInfo, host: int, command: str = "true") -> subprocess.CompletedProcess[str]:
    argv = [
        "ConnectTimeout=2" if a == "ConnectTimeout=10" else a for a in info.ssh_argv(host, command)
    ]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60)


async def api_state(info: PodInfo, timeout: float = 10.0) -> str:
    async with tpu(info) as api:
        node = await api.get_node(name=info.node_path, timeout=timeout)
    return tpu_v2.Node.State(node.state).name


def rest_state(info: PodInfo) -> str:
    with urllib.request.urlopen(f"{info.rest_endpoint}v2/{info.node_path}", timeout=10) as r:
        return str(json.loads(r.read())["state"])


async def test_hang_accepts_tcp_and_never_answers_until_cleared(pod: PodInfo) -> None:
    async with asyncssh.connect(**pod.asyncssh_options(1)) as before:
        after = client.fault(pod.run_dir, 1, "hang")
        assert after.hosts[1].faults == ("hang",) and after.hosts[0].faults == ()

        with socket.create_connection((pod.hosts[1].ip, pod.ssh_port), timeout=5) as s:
            s.settimeout(1.0)
            with pytest.raises(TimeoutError):
                s.recv(64)  # no SSH banner ever comes
        result = quick_ssh(pod, 1)
        assert result.returncode == 255 and "timed out" in result.stderr.lower(), result.stderr
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(before.run("echo stuck"), 1.5)  # open sessions stall too
        assert quick_ssh(pod, 2).returncode == 0  # the other hosts are fine

        client.clear_faults(pod.run_dir, 1)
        assert quick_ssh(pod, 1, "echo back").stdout.strip() == "back"
        result = await asyncio.wait_for(before.run("echo resumed"), 30)
        assert str(result.stdout).strip() == "resumed"


def test_hang_with_seconds_ends_on_its_own(pod: PodInfo) -> None:
    client.fault(pod.run_dir, 3, "hang", seconds=1)
    wait_until(lambda: quick_ssh(pod, 3).returncode == 0, 30, "the hang to end")
    status = client.pod_status(pod.run_dir)
    assert status is not None and status.hosts[3].faults == ()


async def test_silent_death_kills_everything_while_api_and_ssh_say_up(pod: PodInfo) -> None:
    pid = int(ssh_run(pod, 2, "setsid sleep 1000 </dev/null >/dev/null 2>&1 & echo $!").stdout)
    assert alive(pid)
    after = client.fault(pod.run_dir, 2, "silent-death")
    assert not alive(pid)
    assert find_marked(marker_value(pod.run_id, pod.hosts[2].name)) == []
    assert after.hosts[2].state == "READY" and after.state == "READY"
    assert await api_state(pod) == "READY"
    assert ssh_run(pod, 2, "echo still").stdout.strip() == "still"
    # The VM is up: it can start new processes (Ray is restarted on it by a recovery).
    assert ssh_run(pod, 2, "echo forked | cat").stdout.strip() == "forked"
    event = after.events[-1]
    assert event["kind"] == "fault" and event["fault"] == "silent-death" and event["killed"] >= 1


async def test_stale_api_keeps_reporting_the_old_state(pod: PodInfo) -> None:
    client.fault(pod.run_dir, 0, "stale-api", seconds=600)
    truth = client.preempt(pod.run_dir, 2)
    assert truth.state == "PREEMPTED"
    assert await api_state(pod) == "READY"
    assert rest_state(pod) == "READY"
    async with tpu(pod) as api:
        listed = [n async for n in await api.list_nodes(parent=pod.parent)]
    assert [tpu_v2.Node.State(n.state).name for n in listed] == ["READY"]
    assert [f["kind"] for f in truth.faults] == ["stale-api"]

    client.clear_faults(pod.run_dir)
    assert await api_state(pod) == "PREEMPTED"

    client.recreate(pod.run_dir, 2, wait=True)
    client.fault(pod.run_dir, 0, "stale-api", seconds=1)
    client.preempt(pod.run_dir, 1)
    await until(lambda: _is(pod, "PREEMPTED"), 30, "the stale view to expire")


async def _is(info: PodInfo, state: str) -> bool:
    return await api_state(info) == state


async def test_slow_api_delays_every_call_on_both_front_ends(pod: PodInfo) -> None:
    client.fault(pod.run_dir, "all", "slow-api", seconds=3)
    with pytest.raises(gexc.DeadlineExceeded):
        await api_state(pod, timeout=0.5)
    with pytest.raises(TimeoutError):
        await asyncio.to_thread(
            urllib.request.urlopen, f"{pod.rest_endpoint}v2/{pod.node_path}", timeout=0.5
        )
    client.clear_faults(pod.run_dir)
    assert await api_state(pod, timeout=5) == "READY"

    # A call held by the fault ends when the fault is cleared, not after its whole delay.
    client.fault(pod.run_dir, "all", "slow-api", seconds=600)
    held = asyncio.create_task(api_state(pod, timeout=300))
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(asyncio.shield(held), 0.5)
    await asyncio.to_thread(client.clear_faults, pod.run_dir)
    assert await asyncio.wait_for(held, 60) == "READY"

    client.fault(pod.run_dir, "all", "slow-api", seconds=3, duration=1)
    await until(lambda: _fast(pod), 30, "the slow API to end")


async def _fast(info: PodInfo) -> bool:
    try:
        return await api_state(info, timeout=0.5) == "READY"
    except gexc.DeadlineExceeded:
        return False


def test_fault_cli(pod: PodInfo, capsys: pytest.CaptureFixture[str]) -> None:
    common = ["--run-dir", str(pod.run_dir)]
    assert pod_main(["fault", "1", "hang", "--seconds", "30", *common]) == 0
    assert "[hang]" in capsys.readouterr().out
    assert pod_main(["fault", "1", "melt", *common]) == 2
    assert "invalid choice: 'melt'" in capsys.readouterr().err
    assert pod_main(["fault", "9", "hang", *common]) == 2
    assert "unknown host '9'" in capsys.readouterr().err
    assert pod_main(["fault", "0", "stale-api", "--seconds", "0", *common]) == 2
    assert "stale-api needs --seconds > 0" in capsys.readouterr().err
    assert pod_main(["fault", "all", "clear", *common]) == 0
    assert "[hang]" not in capsys.readouterr().out
    assert quick_ssh(pod, 1).returncode == 0


def test_chaos_schedule_injects_faults_too(tmp_path: Path) -> None:
    run_dir = tmp_path / "chaos"
    with running_pod(
        run_dir, hosts=2, chaos_seed=11, chaos_interval=0.4, chaos_faults=("silent-death",)
    ):
        info = client.wait_for(
            run_dir,
            lambda p: any(e.get("source") == "chaos" and e["kind"] == "fault" for e in p.events),
            60,
            "a chaos fault",
        )
        faults = [e for e in info.events if e["kind"] == "fault"]
        assert {e["fault"] for e in faults} == {"silent-death"}
