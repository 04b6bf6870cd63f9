"""A preemption notice keeps the trainer's W&B run's end, on the W&B emulator.

A spot VM's shutdown sends SIGTERM to every process of the host (the pod emulator's
notice does the same: ``emulators/tpu_pod/procs.signal_targets``), so wandb-core, in its
own session, gets it too and dies with the rows it had not sent. The trainer still
checkpoints, and its run on the server then has the notice step's row and summary, the
checkpoint as a version of its model artifact (logged by that run) and ends ``preempted``;
the same command resumes the same run id to its total, and the resumed run uses that
artifact. All of it read back with the real ``wandb.Api()``.

On the emulated pod the same holds through the notice path itself: a trainer on a worker
(submitted with ``submit_ray_job.sh``, distributed mode), the worker preempted with the
emulator's notice (``phantom pod preempt HOST --notice S``), Ray's retry of the trainer on a
worker that joins afterwards (the recovery's "join workers") resuming the same run id.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from emulators.tpu_pod import client as pod_client
from emulators.tpu_pod.client import PodInfo
from engine.exit_codes import EX_PREEMPTED
from engine.storage import FsspecCheckpointStore
from engine.tracking import wandb_run_id
from tests.support import REPO
from tests.support.engine_helpers import engine_env, kill, notice_from_log
from tests.support.fixtures_pod import start_ray, start_worker, stop_ray
from tests.support.fixtures_wandb import WandbEmu, kill_group, wandb_emu
from tests.support.waiting import wait_until

__all__ = ["wandb_emu"]

ARGS = [
    "--algo", "ppo", "--env", "CartPole-v1", "--n-envs", "2", "--total-timesteps", "4096",
    "--checkpoint-every", "100000", "--run-name", "noticed-wb", "--wandb", "online",
    "--wandb-project", "notice", "--wandb-entity", "lab", "--log-every", "256",
    "--eval-episodes", "0", "--hparams", '{"n_steps": 128}',
]  # fmt: skip

# The real wandb.Api() answering one run path a line (one JSON line each): the fast test
# reads its run twice, and wandb's import is most of a read's CPU.
READ = textwrap.dedent(
    """
    import json, sys, wandb
    def art(a):
        return {
            "name": a.name, "aliases": sorted(a.aliases), "trigger": a.metadata.get("trigger"),
            "step": a.metadata.get("step"), "logged_by": a.logged_by().id,
            "used_by": [r.id for r in a.used_by()], "files": sorted(f.name for f in a.files()),
        }
    for path in sys.stdin:
        api = wandb.Api()  # a fresh client for each read
        run = api.run(path.strip())
        rows = [r for r in run.scan_history() if "global_step" in r]
        print("run " + json.dumps({
            "state": run.state,
            "summary": {k: v for k, v in run.summary.items() if not k.startswith("_")},
            "steps": [int(r["global_step"]) for r in rows],
            "runs": [r.id for r in api.runs(run.entity + "/" + run.project)],
            "logged": [art(a) for a in run.logged_artifacts()],
            "used": [art(a) for a in run.used_artifacts()],
        }), flush=True)
    """
)


def _descendants(pid: int) -> list[int]:
    """Every process under ``pid`` (wandb-core sits there, in a session of its own)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def _env(emu: WandbEmu, tmp_path: Path) -> dict[str, str]:
    return {**engine_env(tmp_path), **emu.env(tmp_path / "home")}


class RunReader:
    """A client process of the real ``wandb.Api()`` (``READ``) that reads runs on request;
    in a session of its own, killed with its group when closed."""

    def __init__(self, emu: WandbEmu, tmp_path: Path) -> None:
        self._err = tmp_path / "reader.stderr"
        with self._err.open("w") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", READ],
                env=_env(emu, tmp_path),
                cwd=tmp_path,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
                start_new_session=True,
            )
        self._lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line)
        self._lines.put(None)

    def read(self, path: str, timeout: float = 120.0) -> dict:
        """The run at ``entity/project/id`` as the real ``wandb.Api()`` shows it."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(path + "\n")
        self.proc.stdin.flush()
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self._lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(
                    f"no answer for {path} in {timeout}s: {self._tail()}"
                ) from None
            if line is None:
                raise AssertionError(f"the reader ended ({self.proc.wait()}): {self._tail()}")
            if line.startswith("run "):
                return json.loads(line[4:])  # type: ignore[no-any-return]

    def _tail(self) -> str:
        return self._err.read_text()[-3000:]

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()  # the loop ends at EOF
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
        finally:
            kill_group(self.proc)  # wandb-core or anything else it left
            self.proc.wait()
            if self.proc.stdout is not None:
                self.proc.stdout.close()


@contextlib.contextmanager
def run_reader(emu: WandbEmu, tmp_path: Path) -> Iterator[RunReader]:
    reader = RunReader(emu, tmp_path)
    try:
        yield reader
    finally:
        reader.close()


def read_run(emu: WandbEmu, tmp_path: Path, path: str) -> dict:
    """The run at ``entity/project/id`` as the real ``wandb.Api()`` shows it (one read)."""
    with run_reader(emu, tmp_path) as reader:
        return reader.read(path)


@pytest.fixture
def reader(wandb_emu: WandbEmu, tmp_path: Path) -> Iterator[RunReader]:
    """A test's own reader: it imports wandb while the test starts its trainer."""
    with run_reader(wandb_emu, tmp_path) as started:
        yield started


def assert_ended_at_notice(got: dict, run_id: str, step: int) -> None:
    """The run's end as the notice left it: preempted, the step's row and summary, and the
    checkpoint as a version of its model artifact logged by this very run."""
    assert got["state"] == "preempted", got
    assert got["summary"]["preempted_at_step"] == step
    assert got["summary"]["num_timesteps"] == step
    assert got["steps"][-1] == step
    (logged,) = got["logged"]
    assert logged["trigger"] == "notice" and logged["step"] == step, logged
    assert {"latest", "preempted", f"step-{step}"} <= set(logged["aliases"])
    assert logged["logged_by"] == run_id and "model.zip" in logged["files"]


def assert_resumed_with_lineage(got: dict, run_id: str, step: int, total: int) -> None:
    """The same run id, continued past the notice to ``total``, used the notice's artifact."""
    assert got["state"] == "finished", got
    assert got["steps"][-1] == total
    assert [s for s in got["steps"] if s > step]  # rows past the notice, same run
    (used,) = got["used"]
    assert used["trigger"] == "notice" and used["step"] == step, used
    assert used["logged_by"] == run_id and used["used_by"] == [run_id]
    noticed, final = got["logged"]  # the notice's version, then the final weights
    assert noticed["name"] == used["name"] and f"step-{total}" in final["aliases"]
    assert "latest" in final["aliases"] and "latest" not in noticed["aliases"]


def test_sigterm_to_every_process_keeps_the_runs_end_and_resume_continues_it(
    wandb_emu: WandbEmu, reader: RunReader, tmp_path: Path
) -> None:
    env = _env(wandb_emu, tmp_path)
    log = tmp_path / "first.log"
    with open(log, "w") as fh:
        proc = subprocess.Popen(
            [sys.executable, "-m", "engine.train", *ARGS],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=fh,
            text=True,
            start_new_session=True,
        )
    core: list[int] = []
    try:
        wait_until(
            lambda: proc.poll() is not None or "progress step=" in log.read_text(),
            180,
            "training with a W&B run",
        )
        assert proc.poll() is None, log.read_text()[-3000:]
        core = _descendants(proc.pid)
        assert core, "no wandb-core under the trainer"
        for pid in [proc.pid, *core]:  # the host's shutdown: everyone at once
            os.kill(pid, signal.SIGTERM)
        proc.communicate(timeout=180)
    finally:
        kill(proc)
        for pid in core:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    text = log.read_text()
    assert proc.returncode == EX_PREEMPTED, text[-3000:]
    notice = notice_from_log(text)
    assert notice is not None, text[-3000:]
    step = notice["step"]

    run_id = wandb_run_id("noticed-wb", "notice")
    got = reader.read(f"lab/notice/{run_id}")
    assert_ended_at_notice(got, run_id, step)
    assert got["runs"] == [run_id]

    again = subprocess.run(
        [sys.executable, "-m", "engine.train", *ARGS],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        start_new_session=True,
    )
    assert again.returncode == 0, again.stderr[-3000:]
    assert json.loads(again.stdout.strip().splitlines()[-1])["resumed_from_step"] == step
    assert "W&B run uses artifact" in again.stderr, again.stderr[-3000:]
    after = reader.read(f"lab/notice/{run_id}")
    assert after["runs"] == [run_id]  # the same run, continued
    assert_resumed_with_lineage(after, run_id, step, 4096)
    assert wandb_emu.trap.seen == []


# A trainer's W&B writer whose wandb-core is gone, as after a notice's SIGTERM: a dump
# before the trainer stops must not raise (it would lose the notice checkpoint), unless no
# notice came.
DEAD_CORE = textwrap.dedent(
    """
    import os, signal, sys, wandb
    from engine.metrics import WandbWriter
    run = wandb.init(project="p", mode="offline", settings=wandb.Settings(console="off"))
    # This process's own children, from its threads' lists: scanning all of /proc races
    # with any other process of the machine exiting between the listing and the read.
    children = [int(c) for t in os.listdir("/proc/self/task")
                for c in open(f"/proc/self/task/{t}/children").read().split()]
    for pid in children:
        os.kill(pid, signal.SIGTERM)
    for pid in children:
        os.waitpid(pid, 0)
    noticed = WandbWriter(run, stopping=lambda: True)
    noticed.write({"loss": 1.0}, {}, step=1)
    noticed.write({"loss": 0.5}, {}, step=2)
    print("noticed: no error, lost", noticed.lost, flush=True)
    try:
        WandbWriter(run, stopping=lambda: False).write({"loss": 1.0}, {}, step=3)
    except Exception as exc:
        print("no notice:", type(exc).__name__, flush=True)
    os._exit(0)
    """
)


def test_a_dump_after_wandb_core_died_with_the_notice_does_not_stop_the_trainer(
    tmp_path: Path,
) -> None:
    done = subprocess.run(
        [sys.executable, "-c", DEAD_CORE], cwd=tmp_path, env=engine_env(tmp_path),
        capture_output=True, text=True, timeout=120, start_new_session=True,
    )  # fmt: skip
    lines = done.stdout.splitlines()
    assert "noticed: no error, lost True" in lines, done.stdout + done.stderr[-3000:]
    assert any(line.startswith("no notice: ") for line in lines), done.stdout + done.stderr


POD_GRACE_S = 60.0  # the trainer needs a few seconds of it: checkpoint, then W&B's end
POD_TOTAL = 8192
POD_TRAIN_ARGS = (
    f"--algo ppo --env CartPole-v1 --n-envs 2 --total-timesteps {POD_TOTAL} "
    "--checkpoint-every 100000 --run-name pod-wb --wandb online --wandb-project notice-pod "
    "--wandb-entity lab --log-every 256 --eval-episodes 0 --device cpu "
    """--hparams '{"n_steps": 128}'"""
)
# a trainer's lines in the job's log, behind Ray's "(trainer-1 pid=..., ip=...)" prefix
PROGRESS = re.compile(r"\(trainer-(\d) pid=[^)]*\)(?:\x1b\[0m)?\s*\[engine\] progress step=(\d+)/")
PLACED = re.compile(r"trainer (\d) on node ([0-9.]+)")


def _last_summary(text: str) -> dict:
    for line in reversed(text.splitlines()):
        if line.strip().startswith('{"') and '"trainers"' in line:
            return json.loads(line.strip())  # type: ignore[no-any-return]
    raise AssertionError(f"no launcher summary in the job's log:\n{text[-4000:]}")


@pytest.mark.slow
def test_a_worker_preempted_with_notice_keeps_its_runs_end_and_the_retry_continues_it(
    pod: PodInfo, wandb_emu: WandbEmu, tmp_path: Path
) -> None:
    """Two trainers, STRICT_SPREAD over the head and worker 1 (Ray on those two only, so
    the preempted trainer's retry waits for a node). Worker 1 gets the emulator's notice
    mid-run; once it is PREEMPTED, W&B has that trainer's run ended at the notice step
    (row, summary, state preempted, checkpoint artifact logged by it) while no retry has
    run. Worker 2 then joins Ray; the retry resumes there from the notice checkpoint into
    the same run id, uses the artifact, and finishes."""
    from ray.job_submission import JobStatus, JobSubmissionClient

    ray_pod = start_ray(pod, workers=[1])
    storage = f"{pod.bucket_uri}/noticed-wb"
    env = {
        **wandb_emu.env(tmp_path / "home"),
        "RAY_ADDRESS": ray_pod.dashboard_url,
        "RAY_MODE": "distributed",
        "NUM_NODES": "2",
        "STORAGE": storage,
        "TRAIN_ARGS": POD_TRAIN_ARGS,
        "SUBMISSION_ID": "noticed-wb",
        "NO_WAIT": "1",
        "RUNTIME_ENV_JSON": json.dumps(
            {"env_vars": {"WANDB_ERROR_REPORTING": "false", "NO_GCE_CHECK": "True"}}
        ),
    }
    try:
        submitted = subprocess.run(
            ["bash", str(REPO / "submit_ray_job.sh")],
            env=env, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert submitted.returncode == 0, submitted.stdout[-3000:] + submitted.stderr[-2000:]
        jobs = JobSubmissionClient(ray_pod.dashboard_url)
        w1, w2 = pod.hosts[1], pod.hosts[2]
        on_w1: list[int] = []

        def training_on_w1() -> bool:
            assert not jobs.get_job_status("noticed-wb").is_terminal(), jobs.get_job_logs(
                "noticed-wb"
            )[-4000:]
            logs = jobs.get_job_logs("noticed-wb")
            placed = [int(i) for i, ip in PLACED.findall(logs) if ip == w1.ip]
            steps = [int(n) for i, n in PROGRESS.findall(logs) if placed and int(i) == placed[0]]
            on_w1[:] = placed[:1]
            return bool(steps) and max(steps) >= 1024

        wait_until(training_on_w1, 600, "the trainer on worker 1 past step 1024")
        (index,) = on_w1
        run_name = f"pod-wb-t{index}"
        run_id = wandb_run_id(run_name, "notice-pod")

        # the notice as `phantom pod preempt 1 --notice 60` gives it; returns once PREEMPTED
        gone = pod_client.preempt(pod.run_dir, 1, notice=POD_GRACE_S)
        assert gone.hosts[1].state == "PREEMPTED"
        noticed = FsspecCheckpointStore(storage, run_name).latest()
        assert noticed is not None, (
            f"no checkpoint on the notice; {gone.events[-1:]}\n"
            + jobs.get_job_logs("noticed-wb")[-6000:]
        )
        assert noticed.manifest["trigger"] == "notice" and noticed.manifest["node"] == w1.ip
        step = noticed.step
        assert 0 < step < POD_TOTAL
        path = f"lab/notice-pod/{run_id}"
        assert_ended_at_notice(read_run(wandb_emu, tmp_path, path), run_id, step)

        # the recovery's "join workers": the retry's bundle finds a node again
        start_worker(pod, 2, ray_pod.gcs)

        def ended() -> bool:
            return bool(jobs.get_job_status("noticed-wb").is_terminal())

        wait_until(ended, 900, "the job to end after worker 2 joined", step=1.0)
        logs = jobs.get_job_logs("noticed-wb")
        assert jobs.get_job_status("noticed-wb") == JobStatus.SUCCEEDED, logs[-4000:]
        summary = _last_summary(logs)
        retried = next(t for t in summary["trainers"] if t["run_name"] == run_name)
        assert retried["resumed_from_step"] == step and retried["node_ip"] == w2.ip
        assert retried["num_timesteps"] == POD_TOTAL

        after = read_run(wandb_emu, tmp_path, path)
        assert sorted(after["runs"]) == sorted(
            wandb_run_id(f"pod-wb-t{i}", "notice-pod") for i in (0, 1)
        )  # no third run: the retry continued the same id
        assert_resumed_with_lineage(after, run_id, step, POD_TOTAL)
        assert wandb_emu.trap.seen == []
    finally:
        stop_ray(pod)
