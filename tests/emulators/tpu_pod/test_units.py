"""Pure parts of the emulator and raycmd: no daemon, no network."""

from __future__ import annotations

import itertools
import os
import shlex
import subprocess
import sys

import pytest

from console.services.backends.tpu_vm import raycmd
from emulators.tpu_pod.daemon import chaos_schedule
from emulators.tpu_pod.layout import MARKER_ENV, resolve_host_ref
from emulators.tpu_pod.procs import (
    cgroup_pids,
    find_marked,
    kill_marked,
    make_host_cgroup,
    make_run_cgroup,
    marker_value,
    remove_cgroup,
)
from tests.support.waiting import wait_until


def _argv(command: str) -> list[str]:
    # TEMP_DIR_SHELL is meant for the remote shell; give it a value to split on.
    return shlex.split(command.replace(raycmd.TEMP_DIR_SHELL, "/tmp/ray"))


def test_head_command_binds_dashboard_to_loopback_and_sets_every_port() -> None:
    node = raycmd.RayNodeOptions(
        node_ip="127.0.0.10",
        node_name="phantom-pod-w0",
        num_cpus=2,
        object_store_memory=256 * 1024 * 1024,
    )
    head = raycmd.RayHeadOptions(gcs_port=41000, dashboard_port=41001, client_server_port=41002)
    argv = _argv(raycmd.head_start_command(node, head))
    stop_wait = f"RAY_JOB_STOP_WAIT_TIME_S={raycmd.JOB_STOP_WAIT_S}"
    assert argv[:5] == ["GRPC_ENABLE_FORK_SUPPORT=false", stop_wait, "ray", "start", "--head"]
    for flag in (
        "--port=41000",
        "--dashboard-host=127.0.0.1",
        "--dashboard-port=41001",
        "--ray-client-server-port=41002",
        "--include-dashboard=true",
        "--node-ip-address=127.0.0.10",
        "--num-cpus=2",
        '--resources={"TPU":8}',
        f"--object-store-memory={256 * 1024 * 1024}",
        "--dashboard-agent-listen-port=0",
        "--min-worker-port=0",
        "--max-worker-port=0",
        "--temp-dir=/tmp/ray",
        "--disable-usage-stats",
    ):
        assert flag in argv
    assert not any("0.0.0.0" in a for a in argv)


def test_worker_command_joins_gcs_without_dashboard() -> None:
    node = raycmd.RayNodeOptions(node_ip="127.0.0.12", resources={"TPU": 8, "slice": 0.5})
    cmd = raycmd.worker_start_command(node, raycmd.gcs_address("127.0.0.10", 6379))
    argv = _argv(cmd)
    assert "--address=127.0.0.10:6379" in argv and "--head" not in argv
    # No sizing given: the node advertises its host's own CPUs and memory.
    assert not any(a.startswith(("--num-cpus", "--memory", "--object-store")) for a in argv)
    assert not any(a.startswith(("--dashboard-host", "--dashboard-port")) for a in argv)
    assert '--resources={"TPU":8,"slice":0.5}' in argv
    # The temp dir follows the host's $TMPDIR (unquoted on purpose), not the head's.
    assert f"--temp-dir={raycmd.TEMP_DIR_SHELL}" in cmd


def test_values_are_shell_quoted_and_env_is_prefixed() -> None:
    node = raycmd.RayNodeOptions(
        node_ip="127.0.0.11",
        node_name="w 1; rm -rf ~",
        temp_dir="/tmp/my ray",
        env={"RAY_health_check_period_ms": "500"},
        user_path=True,
    )
    cmd = raycmd.worker_start_command(node, "127.0.0.10:6379")
    assert cmd.startswith(
        'export PATH="$HOME/.local/bin:$PATH" && GRPC_ENABLE_FORK_SUPPORT=false'
        f" RAY_JOB_STOP_WAIT_TIME_S={raycmd.JOB_STOP_WAIT_S} RAY_health_check_period_ms=500 "
    )
    argv = shlex.split(cmd.split(" && ", 1)[1])
    assert "--node-name=w 1; rm -rf ~" in argv and "--temp-dir=/tmp/my ray" in argv
    assert raycmd.stop_command() == "ray stop -f"
    # A node's own env overrides the defaults (e.g. a user who wants gRPC's fork handlers).
    mine = raycmd.RayNodeOptions(node_ip="127.0.0.11", env={"GRPC_ENABLE_FORK_SUPPORT": "1"})
    assert raycmd.worker_start_command(mine, "127.0.0.10:6379").startswith(
        f"GRPC_ENABLE_FORK_SUPPORT=1 RAY_JOB_STOP_WAIT_TIME_S={raycmd.JOB_STOP_WAIT_S} ray start"
    )


def test_drain_command_parses_with_the_installed_ray() -> None:
    """Ray's hidden ``drain-node`` CLI is not a stable interface: the installed Ray's own
    parser takes every option and the PREEMPTION reason the console sends."""
    from ray.scripts.scripts import drain_node

    cmd = raycmd.drain_command("ab" * 28, "127.0.0.10:6379", 27.9, "preemption notice; it's")
    argv = shlex.split(cmd)
    assert argv[:2] == ["ray", "drain-node"]
    ctx = drain_node.make_context("drain-node", argv[2:])  # parses; runs nothing
    assert ctx.params["reason"] == "DRAIN_NODE_REASON_PREEMPTION"
    assert ctx.params["deadline_remaining_seconds"] == 27
    assert ctx.params["reason_message"] == "preemption notice; it's"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"object_store_memory": 10}, "object_store_memory"),
        ({"resources": {"CPU": 4}}, "CPU"),
        ({"num_cpus": -1}, "num_cpus"),
        ({"env": {"BAD NAME": "x"}}, "env"),
    ],
)
def test_bad_node_options_name_the_field(change: dict[str, object], message: str) -> None:
    node = raycmd.RayNodeOptions(node_ip="127.0.0.10", **change)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=message):
        raycmd.worker_start_command(node, "127.0.0.10:6379")


def test_host_refs_accept_index_name_and_ip() -> None:
    assert resolve_host_ref("2", "phantom-pod", 4) == 2
    assert resolve_host_ref("phantom-pod-w3", "phantom-pod", 4) == 3
    assert resolve_host_ref("127.0.0.11", "phantom-pod", 4) == 1
    for bad in ("4", "127.0.0.14", "w2", "-1", ""):
        with pytest.raises(ValueError, match="unknown host"):
            resolve_host_ref(bad, "phantom-pod", 4)


def test_chaos_schedule_depends_on_the_seed_only() -> None:
    first = list(itertools.islice(chaos_schedule(7, 2.0, 4), 50))
    assert first == list(itertools.islice(chaos_schedule(7, 2.0, 4), 50))
    assert first != list(itertools.islice(chaos_schedule(8, 2.0, 4), 50))
    assert all(1.0 <= delay <= 3.0 for delay, _ in first)
    assert {target for _, target in first} <= {"0", "1", "2", "3", "all"}


def test_kill_marked_kills_detached_descendants_only() -> None:
    run_id = f"unit{os.getpid()}"
    env = {**os.environ, MARKER_ENV: marker_value(run_id, "h0", 1)}
    # A shell that detaches a grandchild into its own session, like `ray start`.
    script = "setsid sleep 1000 </dev/null >/dev/null 2>&1 & echo $!"
    out = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True)
    grandchild = int(out.stdout)
    other = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(1000)"],  # sleep-noqa: a process to kill
        env={**os.environ, MARKER_ENV: marker_value(run_id, "h1", 1)},
    )
    try:
        wait_until(
            lambda: grandchild in find_marked(marker_value(run_id, "h0")),
            10,
            "the grandchild to carry the marker",
            step=0.01,
        )
        assert kill_marked(marker_value(run_id, "h0")) >= 1
        assert find_marked(marker_value(run_id, "h0")) == []
        assert find_marked(marker_value(run_id, "h1")) == [other.pid]
    finally:
        other.kill()
        other.wait()
        kill_marked(marker_value(run_id))


def test_descendants_with_a_wiped_environment_are_found() -> None:
    # Like setproctitle (Ray's ray::IDLE workers): the child's environ shows no marker.
    run_id = f"unitd{os.getpid()}"
    env = {**os.environ, MARKER_ENV: marker_value(run_id, "h0", 1)}
    parent = subprocess.Popen(["bash", "-c", "env -i sleep 1000 & wait"], env=env)
    try:
        wait_until(
            lambda: len(find_marked(marker_value(run_id, "h0"))) >= 2,
            10,
            "the child with a wiped environment to show up",
            step=0.01,
        )
        assert kill_marked(marker_value(run_id, "h0")) == 2
    finally:
        parent.kill()
        parent.wait()


def test_cgroup_catches_orphans_without_marker() -> None:
    run_id = f"unitc{os.getpid()}"
    run_cg = make_run_cgroup(run_id)
    if run_cg is None:
        pytest.skip("no writable cgroup hierarchy on this machine")
    host_cg = make_host_cgroup(run_cg, "h0")
    assert host_cg is not None
    try:
        join = 'echo $$ > "$0/cgroup.procs"; env -i setsid sleep 1000 </dev/null >/dev/null 2>&1 &'
        subprocess.run(["sh", "-c", join, str(host_cg)], check=True)  # the parent exits
        orphans = cgroup_pids(host_cg)
        assert len(orphans) == 1
        assert find_marked(marker_value(run_id, "h0"), host_cg) == sorted(orphans)
        assert kill_marked(marker_value(run_id, "h0"), host_cg) == 1
        assert cgroup_pids(host_cg) == set()
    finally:
        kill_marked(marker_value(run_id), run_cg)
        remove_cgroup(run_cg)
    assert not run_cg.exists()
