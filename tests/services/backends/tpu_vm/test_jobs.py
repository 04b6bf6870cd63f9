"""Ray jobs against a REAL single-node Ray cluster on loopback.

The cluster is started once per session with its own temp dir and free ports; every process
it spawns carries a marker variable, and teardown kills exactly those pids (never a global
`ray stop`: other test sessions run Ray on this machine too). The job's working dir is a tmp
dir with a tiny stand-in `engine/train.py` that prints and sleeps.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import asyncssh
import pytest

from console.commands.kit.told import plain_lines
from console.services.backends.tpu_vm.jobs import (
    EX_PREEMPTED,
    DashboardUnreachableError,
    JobService,
    SubmitError,
    UnknownJobError,
    job_status_of,
)
from console.services.backends.tpu_vm.tunnel import Tunnel
from console.services.jobs.spec import META_MODE, META_SPEC, SpecError, SubmitSpec
from console.services.jobs.watcher import JobTransition, JobWatcher
from console.services.model import JobStatus, LogLine, LogStreamClosed
from emulators.tpu_pod import client as pod_client
from emulators.tpu_pod.client import PodInfo
from tests.support.waiting import until

VENV_BIN = Path(sys.executable).parent
RAY = VENV_BIN / "ray"
MARKER = "PHANTOM_TEST_JOBS_RAY"
# Ray rewrites 127.0.0.1 as the node IP to the machine's external address; any other
# 127/8 address stays on loopback.
NODE_IP = "127.0.0.231"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def marked_pids(value: str) -> list[int]:
    needle = f"\0{MARKER}={value}\0".encode()
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                env = b"\0" + f.read()
        except OSError:
            continue
        if needle in env:
            pids.append(int(entry))
    return pids


def kill_marked(value: str, grace_s: float = 10.0) -> list[int]:
    """SIGTERM then SIGKILL every process of this cluster, by pid. Returns survivors."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in marked_pids(value):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + grace_s
        while marked_pids(value) and time.monotonic() < deadline:
            time.sleep(0.2)  # sleep-noqa: a grace before SIGKILL, not a wait
    return marked_pids(value)


@dataclass(frozen=True)
class RayHead:
    address: str  # dashboard URL
    temp_dir: str
    marker: str


@pytest.fixture(scope="session")
def ray_head() -> Iterator[RayHead]:
    # A short temp dir: Ray's unix socket paths must stay under 107 bytes.
    temp_dir = tempfile.mkdtemp(prefix="pjr", dir="/tmp")
    marker = uuid.uuid4().hex
    dashboard_port = free_port()
    env = dict(os.environ)
    env.update(
        {MARKER: marker, "RAY_USAGE_STATS_ENABLED": "0", "PATH": f"{VENV_BIN}:{env['PATH']}"}
    )
    cmd = [
        str(RAY),
        "start",
        "--head",
        f"--node-ip-address={NODE_IP}",
        f"--port={free_port()}",
        "--dashboard-host=127.0.0.1",
        f"--dashboard-port={dashboard_port}",
        f"--ray-client-server-port={free_port()}",
        "--dashboard-agent-listen-port=0",
        "--node-manager-port=0",
        "--object-manager-port=0",
        "--min-worker-port=0",
        "--max-worker-port=0",
        "--num-cpus=2",
        f"--object-store-memory={100 * 1024 * 1024}",
        f"--temp-dir={temp_dir}",
        "--disable-usage-stats",
    ]
    try:
        proc = subprocess.run(
            cmd, env=env, capture_output=True, text=True, timeout=240, start_new_session=True
        )
        if proc.returncode != 0:
            pytest.fail(f"ray start failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
        yield RayHead(f"http://127.0.0.1:{dashboard_port}", temp_dir, marker)
    finally:
        survivors = kill_marked(marker)
        subprocess.run(["rm", "-rf", temp_dir], check=False)
        assert not survivors, f"Ray processes survived teardown: {survivors}"


FAKE_TRAIN = textwrap.dedent(
    """
    # Stand-in for engine.train: prints one line per "timestep", then maybe holds.
    import argparse, os, sys, time
    p = argparse.ArgumentParser()
    p.add_argument("--total-timesteps", type=int, default=3)
    p.add_argument("--hold", type=float, default=0.0)
    p.add_argument("--exit-code", type=int, default=0)
    args, _ = p.parse_known_args()
    print("key ok" if os.environ.get("WANDB_API_KEY") == "sekret-value-123" else "no key",
          flush=True)
    for i in range(args.total_timesteps):
        print(f"step {i}", flush=True)
        time.sleep(0.05)  # sleep-noqa: the stand-in trainer's pace
    time.sleep(args.hold)  # sleep-noqa: a job that keeps running
    print("done", flush=True)
    sys.exit(args.exit_code)
    """
)


@pytest.fixture
def working_dir(tmp_path: Path) -> Path:
    wd = tmp_path / "proj"
    (wd / "engine").mkdir(parents=True)
    (wd / "engine" / "__init__.py").write_text("")
    (wd / "engine" / "train.py").write_text(FAKE_TRAIN)
    return wd


def spec(steps: int, hold: float = 0.0, exit_code: int = 0, **kw: object) -> SubmitSpec:
    args = f"--algo ppo --total-timesteps {steps} --alpha 0.3 --device cpu --hold {hold}"
    if exit_code:
        args += f" --exit-code {exit_code}"
    return SubmitSpec(train_args=args, **kw)  # type: ignore[arg-type]


ENVIRON = {"WANDB_API_KEY": "sekret-value-123"}
WANDB_ENV = {"env_vars": {"WANDB_API_KEY": "$WANDB_API_KEY", "WANDB_MODE": "offline"}}


# A driver whose Ray tasks print, as engine.distributed's trainers do (log_to_driver, Ray's
# dedup off as the engine sets it): each task prints its own numbered lines once and one line
# three times over (a real repeat, as a Tune table's border or a reused actor's banner is).
TASKS_PRINT = textwrap.dedent(
    """
    import argparse, os, time
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    import ray
    p = argparse.ArgumentParser()
    p.add_argument("--hold", type=float, default=0.0)
    args, _ = p.parse_known_args()
    ray.init(log_to_driver=True)

    @ray.remote(num_cpus=0)
    def work(i):
        for n in range(3):
            print(f"task {i} line {n}", flush=True)
        for _ in range(3):
            print(f"task {i} tick", flush=True)
        return i

    print("driver got", sorted(ray.get([work.remote(i) for i in range(2)])), flush=True)
    time.sleep(args.hold)  # sleep-noqa: a job that keeps running
    """
)


@pytest.mark.slow
async def test_the_logs_of_a_ray_job_give_each_worker_line_as_often_as_it_was_printed(
    ray_head: RayHead, tmp_path: Path
) -> None:
    """Issue 36: "each worker line three times at the driver". On a real Ray job each task's
    line reaches the driver's log once, and the script's `logs` (plain_lines over
    job_logs) gives it once, without colour codes; a line a task printed three times stays
    three lines (the old window dedup folded such repeats into one, and so lost Tune's table
    borders and every trial's W&B banner but the first)."""
    wd = tmp_path / "proj"
    (wd / "engine").mkdir(parents=True)
    (wd / "engine" / "__init__.py").write_text("")
    (wd / "engine" / "train.py").write_text(TASKS_PRINT)
    jobs = JobService(ray_head.address)
    info = await jobs.submit(
        SubmitSpec(train_args="--hold 300", submission_id="phantom-test-task-logs"),
        working_dir=wd,
        environ=ENVIRON,
    )
    wanted = [f"task {i} line {n}" for i in range(2) for n in range(3)]

    async def all_arrived() -> bool:
        text = await jobs.logs(info.job_id)
        return "driver got" in text and all(text.count(f"task {i} tick") >= 3 for i in range(2))

    try:
        await until(all_arrived, 180, "every task's lines in the driver's log")
        raw = (await jobs.logs(info.job_id)).splitlines()
    finally:
        await jobs.stop(info.job_id)
    lines = plain_lines(raw)
    assert not any("\x1b" in line for line in lines)
    for text in wanted:
        hits = [line for line in lines if line.endswith(f") {text}")]
        assert len(hits) == 1, (text, hits, raw)
        assert hits[0].startswith("(work pid="), hits
    for i in range(2):
        ticks = [line for line in lines if line.endswith(f") task {i} tick")]
        assert len(ticks) == 3 and len(set(ticks)) == 1, (ticks, raw)


# -- against the real cluster ---------------------------------------------------------------------
@pytest.mark.slow
async def test_submit_follow_to_completion(ray_head: RayHead, working_dir: Path) -> None:
    jobs = JobService(ray_head.address)
    info = await jobs.submit(
        spec(4, runtime_env=WANDB_ENV, submission_id="phantom-test-complete"),
        working_dir=working_dir,
        environ=ENVIRON,
    )
    assert info.job_id == "phantom-test-complete"
    assert info.status in ("PENDING", "RUNNING", "SUCCEEDED")
    assert info.entrypoint.startswith("python -m engine.train --algo ppo --total-timesteps 4")
    assert info.metadata[META_MODE] == "single"
    assert "$WANDB_API_KEY" in info.metadata[META_SPEC]
    assert "sekret-value-123" not in json.dumps(info.metadata)

    items = [item async for item in jobs.follow(info.job_id)]
    lines = [i.text for i in items if isinstance(i, LogLine)]
    closed = items[-1]
    assert isinstance(closed, LogStreamClosed) and closed.job_id == info.job_id
    assert [x for x in lines if x.startswith(("key", "no key", "step", "done"))] == [
        "key ok",  # the $NAME reference was resolved from `environ` at submit time
        "step 0",
        "step 1",
        "step 2",
        "step 3",
        "done",
    ]
    if closed.early:  # the stream may close before Ray records the final status
        await jobs.wait_for(info.job_id, ["SUCCEEDED"], timeout_s=60)
    else:
        assert closed.job_status == "SUCCEEDED"
    final = await jobs.status(info.job_id)
    assert final.status == "SUCCEEDED" and final.end_time and final.start_time
    assert final.end_time >= final.start_time
    assert "step 3" in await jobs.logs(info.job_id)
    assert info.job_id in {j.job_id for j in await jobs.list()}


@pytest.mark.slow
async def test_stop_a_running_job_and_watch_transitions(
    ray_head: RayHead, working_dir: Path
) -> None:
    jobs = JobService(ray_head.address)
    watcher = JobWatcher(jobs.list)
    assert await watcher.poll() == []  # baseline: existing jobs are not "transitions"
    info = await jobs.submit(spec(2, hold=600), working_dir=working_dir, environ=ENVIRON)
    assert info.job_id.startswith("phantom-single-")

    seen: list[str] = []
    async for item in jobs.follow(info.job_id):
        if isinstance(item, LogLine):
            seen.append(item.text)
            if item.text == "step 1":
                assert await jobs.stop(info.job_id) is True
        else:
            closed = item
    assert "step 1" in seen and "done" not in seen
    assert closed.job_status in ("STOPPED", "RUNNING")  # RUNNING: stop still in flight
    stopped = await jobs.wait_for(info.job_id, ["STOPPED"], timeout_s=60)
    assert stopped.end_time is not None
    assert await jobs.stop(info.job_id) is False  # not running any more

    transitions: list[JobTransition] = []

    async def stopped() -> bool:
        transitions.extend(t for t in await watcher.poll() if t.job.job_id == info.job_id)
        return bool(transitions) and transitions[-1].new_status == "STOPPED"

    await until(stopped, 30, "the job's STOPPED transition")
    assert transitions[0].old_status is None  # first seen after the baseline
    assert transitions[-1].new_status == "STOPPED"
    ev = transitions[-1].to_event(at=123.0)
    assert ev.kind == "job_state" and info.job_id in ev.message and ev.data["mode"] == "single"


@pytest.mark.slow
async def test_a_job_that_exits_preempted_resumable_is_preempted_not_failed(
    ray_head: RayHead, working_dir: Path
) -> None:
    """The engine's exit 75 (checkpointed on a preemption notice) reads as PREEMPTED: a
    terminal state recovery resumes from, where any other non-zero exit stays FAILED."""
    jobs = JobService(ray_head.address)
    watcher = JobWatcher(jobs.list)
    await watcher.poll()
    noticed = await jobs.submit(spec(1, exit_code=75), working_dir=working_dir, environ=ENVIRON)
    crashed = await jobs.submit(spec(1, exit_code=1), working_dir=working_dir, environ=ENVIRON)
    done = await jobs.wait_for(noticed.job_id, ["PREEMPTED", "FAILED", "SUCCEEDED"], timeout_s=120)
    assert done.status == JobStatus.PREEMPTED and "exit code 75" in done.message
    crash = await jobs.wait_for(crashed.job_id, ["FAILED", "PREEMPTED"], timeout_s=120)
    assert crash.status == "FAILED"
    listed = {j.job_id: j.status for j in await jobs.list()}
    assert listed[noticed.job_id] == "PREEMPTED" and listed[crashed.job_id] == "FAILED"
    ends = {t.job.job_id: t.new_status for t in await watcher.poll()}
    assert ends[noticed.job_id] == "PREEMPTED"


def test_only_the_engines_resumable_exit_is_preempted() -> None:
    from engine.exit_codes import EX_PREEMPTED as ENGINE_EX_PREEMPTED

    assert EX_PREEMPTED == ENGINE_EX_PREEMPTED  # one contract, two homes (layers)
    ray_says = "Job entrypoint command failed with exit code {}, last available logs: ..."
    assert job_status_of("FAILED", ray_says.format(75)) == JobStatus.PREEMPTED
    assert job_status_of("FAILED", ray_says.format(1)) == JobStatus.FAILED
    assert job_status_of("FAILED", ray_says.format(750)) == JobStatus.FAILED
    no_logs = "Job entrypoint command failed with exit code 75. No logs available."
    assert job_status_of("FAILED", no_logs) == JobStatus.PREEMPTED
    assert job_status_of("STOPPED", ray_says.format(75)) == "STOPPED"
    assert job_status_of("FAILED", "exit code 75 somewhere in a driver message") == "FAILED"
    assert JobStatus.PREEMPTED.terminal and not JobStatus.PREEMPTED.active


@pytest.mark.slow
async def test_unknown_job_id_names_the_id_and_the_address(ray_head: RayHead) -> None:
    jobs = JobService(ray_head.address)
    expected = f"no job 'xyz' on {ray_head.address}; `phantom status` lists them (the Jobs screen too: key 2)"
    for call in (jobs.status, jobs.stop, jobs.logs):
        with pytest.raises(UnknownJobError) as err:
            await call("xyz")
        assert str(err.value) == expected
    with pytest.raises(UnknownJobError, match="no job 'xyz'"):
        async for _ in jobs.follow("xyz"):
            pass
    with pytest.raises(UnknownJobError, match="is not valid"):
        await jobs.status("../etc")


@pytest.mark.slow
async def test_runtime_env_refused_by_ray_is_a_submit_error(
    ray_head: RayHead, working_dir: Path
) -> None:
    jobs = JobService(ray_head.address)
    both = {"pip": ["gymnasium"], "conda": {"dependencies": ["pip"]}}  # Ray allows one of them
    with pytest.raises(SubmitError, match=r"Ray refused job 'phantom-bad-env'"):
        await jobs.submit(
            spec(1, runtime_env=both, submission_id="phantom-bad-env"), working_dir=working_dir
        )
    with pytest.raises(UnknownJobError):
        await jobs.status("phantom-bad-env")


@pytest.mark.slow
async def test_reconnects_when_the_dashboard_address_comes_back(ray_head: RayHead) -> None:
    """The tunnel moved: calls fail clearly on the dead port, then work once re-pointed."""
    dead = f"http://127.0.0.1:{free_port()}"
    jobs = JobService(dead, timeout_s=5)
    with pytest.raises(DashboardUnreachableError):
        await jobs.list()
    jobs.set_address(ray_head.address)
    assert isinstance(await jobs.list(), list)


# -- no cluster needed -----------------------------------------------------------------------------
async def test_unreachable_dashboard_names_the_address_and_the_fix() -> None:
    address = f"http://127.0.0.1:{free_port()}"
    jobs = JobService(address, timeout_s=5)
    with pytest.raises(DashboardUnreachableError) as err:
        await jobs.status("raysubmit_abc")
    msg = str(err.value)
    assert msg.startswith(f"Ray dashboard at {address} is unreachable")
    assert "re-open the tunnel" in msg
    stream = jobs.follow("raysubmit_abc")
    with pytest.raises(DashboardUnreachableError):
        await anext(stream)  # nothing is yielded before the failure


@pytest.mark.parametrize(
    ("runtime_env", "needle"),
    [
        ("{not json", "runtime_env: must be a JSON object"),
        ({"pip": "gymnasium"}, "runtime_env.pip: must be a list"),
        ({"pipp": []}, "unknown field(s) ['pipp']"),
        ({"env_vars": {"WANDB_API_KEY": "abc123"}}, "do not inline secrets"),
    ],
)
async def test_invalid_runtime_env_is_refused_before_sending(
    runtime_env: object, needle: str, working_dir: Path
) -> None:
    jobs = JobService(f"http://127.0.0.1:{free_port()}")  # nothing listens: never reached
    bad = SubmitSpec(runtime_env=runtime_env)  # type: ignore[arg-type]
    assert "runtime_env" in bad.validate()
    with pytest.raises(SpecError) as err:
        await jobs.submit(bad, working_dir=working_dir)
    assert set(err.value.problems) == {"runtime_env"}
    assert needle in err.value.problems["runtime_env"]


async def test_missing_working_dir_is_named(tmp_path: Path) -> None:
    jobs = JobService(f"http://127.0.0.1:{free_port()}")
    with pytest.raises(SubmitError, match=r"working_dir '.*nope' is not a directory"):
        await jobs.submit(SubmitSpec(), working_dir=tmp_path / "nope")


@pytest.mark.slow
async def test_a_log_stream_cut_while_the_job_runs_is_followed_again_from_where_it_stopped(
    ray_head: RayHead, working_dir: Path, pod: PodInfo
) -> None:
    """`ray job logs -f` stopping silently: the console reaches the dashboard through its SSH
    tunnel to the head (here an emulated host's sshd forwarding to this Ray head), and the
    host's forwarded connections are cut while the job runs (the emulator's `drop-forwards`,
    as a NAT or proxy that times out a long-lived connection). Ray's stream just ends. The
    follow takes it up again where it stopped: every line once, in order, to the job's end.
    Before, it ended there with the job RUNNING and the lines after the cut never shown."""
    port = int(ray_head.address.rsplit(":", 1)[1])
    tunnel = Tunnel(
        lambda: asyncssh.connect(**pod.asyncssh_options(0)), [("127.0.0.1", 0, "127.0.0.1", port)]
    )
    await tunnel.open()
    try:
        jobs = JobService(tunnel.url(port))
        info = await jobs.submit(
            spec(3, hold=20.0, runtime_env=WANDB_ENV, submission_id="phantom-test-cut"),
            working_dir=working_dir,
            environ=ENVIRON,
        )
        items: list[LogLine | LogStreamClosed] = []

        async def follow() -> None:
            async for item in jobs.follow(info.job_id):
                items.append(item)

        follower = asyncio.create_task(follow())

        def lines() -> list[str]:
            return [i.text for i in items if isinstance(i, LogLine)]

        await until(lambda: "step 2" in lines(), 120, "the lines before the cut")
        cut = await pod_client.async_fault(pod.run_dir, 0, "drop-forwards")
        assert cut is not None
        await asyncio.wait_for(follower, 120)

        closed = items[-1]
        assert isinstance(closed, LogStreamClosed) and closed.job_status == "SUCCEEDED"
        assert closed.refollows >= 1  # the stream was cut, and taken up again
        assert [x for x in lines() if x.startswith(("key", "no key", "step", "done"))] == [
            "key ok",
            "step 0",
            "step 1",
            "step 2",
            "done",
        ]
        # ... and exactly what the job's log holds, each line once
        whole = (await jobs.logs(info.job_id)).rstrip("\n").split("\n")
        assert lines() == [x.rstrip("\r") for x in whole]
    finally:
        await tunnel.close()
