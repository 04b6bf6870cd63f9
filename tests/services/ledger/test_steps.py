"""The engine's steps for the ledger: run files attributed to the attempt that wrote them,
and real offline W&B run files (the wandb SDK in a subprocess) turned into restart warm-up
and redone work, also through `phantom report --runs`."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from console import exit_codes
from console.config import Config
from console.report import report_main
from console.services.ledger.goodput import Attempt, StepPoint, account, attempts
from console.services.ledger.steps import (
    RunSteps,
    attribute,
    prefer_lines,
    read_lines,
    read_logs,
    read_runs,
)
from console.services.ledger.timeline import Cause
from console.services.model import Event, EventKind
from console.services.record.journal import Journal
from console.wiring.settings import ledger_settings
from engine.contract import TRAINER_STEP, parse_trainer_step
from tests.support.engine_helpers import engine_env
from tests.support.incident_rows import journaled, replay
from tests.support.waiting import until


def test_a_run_goes_to_the_one_attempt_live_when_it_began() -> None:
    tries = {
        "a": Attempt("a", 0.0, 1.0, 50.0, entrypoint="python -m engine.train --run-name x"),
        "b": Attempt("b", 60.0, 61.0, None, entrypoint="python -m engine.train --run-name x"),
        "c": Attempt("c", 55.0, 56.0, None, entrypoint="python -m engine.train --run-name=y"),
    }
    runs = [
        RunSteps("x", (StepPoint(10.0, 1), StepPoint(20.0, 2))),  # only a was live
        RunSteps("y", (StepPoint(70.0, 5),)),  # b and c live: c names it
        RunSteps("z", (StepPoint(80.0, 7),)),  # b and c live, neither names it: left out
        RunSteps("x", ()),
    ]
    got = attribute(runs, tries)
    assert set(got) == {"a", "c"}
    ((a,),) = [got["a"]]
    assert ([p.step for p in a.points], a.run) == ([1, 2], "x")


# Each attempt as the engine's trainer logs it: the step it resumed from in the run's
# config, its training step as ``global_step`` (the step metric), W&B's own ``_step`` left to
# count log calls (it starts again at 0 in the resumed trainer's file).
WRITER = textwrap.dedent(
    """
    import os, time, wandb
    def attempt(resumed, steps):
        print(time.time(), flush=True)  # the process starts: the job is RUNNING
        run = wandb.init(mode="offline", project="ledger", name="ppo-x",
                         dir=os.environ["WANDB_DIR"], config={"resumed_from_step": resumed})
        run.define_metric("global_step")
        run.define_metric("*", step_metric="global_step")
        for s in steps:
            run.log({"global_step": float(s), "loss": 1.0})
            time.sleep(0.005)  # sleep-noqa: the trainer's pace (distinct row times)
        run.finish()
        print(time.time(), flush=True)  # the process is gone
    attempt(0, range(100, 2001, 100))  # checkpoint at 1400, lost after 2000
    attempt(1400, range(1500, 3001, 100))  # resumed at 1400: 1400..2000 again
    """
)


@pytest.fixture(scope="module")
def two_attempts(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[float]]:
    wandb_dir = tmp_path_factory.mktemp("wandb_ledger")
    env = {
        **os.environ,
        "WANDB_DIR": str(wandb_dir),
        "WANDB_MODE": "offline",
        "WANDB_SILENT": "true",
    }
    env.pop("WANDB_API_KEY", None)
    done = subprocess.run(
        [sys.executable, "-c", WRITER],
        env=env,
        check=True,
        timeout=120,
        capture_output=True,
        text=True,
    )
    return wandb_dir, [float(x) for x in done.stdout.split()]


def rows_for(times: list[float], run: str = "ppo-x") -> list[Event]:
    a0, a1, b0, b1 = times

    def state(at: float, job: str, new: str) -> Event:
        return Event(at, EventKind.JOB_STATE, f"job {job} -> {new}", actor="jobs",
                     data={"job_id": job, "new_status": new,
                           "entrypoint": f"python -m engine.train --run-name {run}"})  # fmt: skip

    return [
        state(a0 - 0.5, "A", "PENDING"),
        state(a0, "A", "RUNNING"),
        state(a1, "A", "LOST"),
        Event(
            a1 + 0.01,
            EventKind.JOB_RESUBMITTED,
            "A as B",
            actor="watchdog",
            data={"old_job_id": "A", "new_job_id": "B"},
        ),
        state(a1 + 0.02, "B", "PENDING"),
        state(b0, "B", "RUNNING"),
        state(b1, "B", "SUCCEEDED"),
    ]


def test_real_run_files_give_warmup_and_redone_work(two_attempts: tuple[Path, list[float]]) -> None:
    wandb_dir, times = two_attempts
    runs = read_runs(wandb_dir)
    assert len(runs) == 2 and all(r.name == "ppo-x" for r in runs)
    stored = journaled(rows_for(times))
    progress = attribute(runs, attempts(stored))
    assert set(progress) == {"A", "B"}
    ((a,), (b,)) = progress["A"], progress["B"]
    assert (a.resumed_from, a.points[0].step, a.reached) == (0, 100, 2000)
    assert (b.resumed_from, b.points[0].step) == (1400, 1500)  # the training step, not _step
    (job,) = account(stored, ledger_settings(Config()).pricing, progress=progress).units
    assert job.steps_known
    assert job.redone_steps == 600  # 1400..2000 again, from the checkpoint B resumed at
    s = job.seconds
    assert s[Cause.WARMUP] > 0  # wandb.init before the first step, in both attempts
    assert s[Cause.REDONE] > 0
    b_first = b.points[0].at
    b_caught = next(p.at for p in b.points if p.step >= 2000)
    assert s[Cause.REDONE] == pytest.approx(b_caught - b_first, abs=1e-6)
    assert sum(s.values()) == pytest.approx(job.wall_s, abs=1e-9)


def test_report_runs_flag(tmp_path: Path, two_attempts: tuple[Path, list[float]]) -> None:
    wandb_dir, times = two_attempts
    path = tmp_path / "journal.sqlite"
    journal = Journal(path)
    asyncio.run(replay(journal, rows_for(times)))
    journal.close()
    out, err = io.StringIO(), io.StringIO()
    code = report_main(Config(), fmt="json", journal_path=str(path), runs_dir=str(wandb_dir),
                       out=out, err=err, clock=lambda: times[-1] + 1)  # fmt: skip
    assert code == exit_codes.OK
    (job,) = json.loads(out.getvalue())["jobs"]
    assert (job["redone_steps"], job["steps_known"]) == (600, True)
    code = report_main(Config(), fmt="md", journal_path=str(path), runs_dir=str(tmp_path / "x"),
                       out=out, err=err)  # fmt: skip
    assert code == exit_codes.USAGE and "--runs" in err.getvalue()


# -- the trainers' own step lines ------------------------------------------------------------------
def step_line(run: str, attempt: str, resumed: int, step: int, at: float) -> str:
    line = TRAINER_STEP.format(run=run, attempt=attempt, resumed_from=resumed, step=step, at=at)
    return f"[engine] {line}"


def test_step_lines_give_one_trainer_per_process_each_step_once() -> None:
    """The sweep driver's log repeats a trial's lines behind Ray's prefix; other lines pass."""
    lines = [
        step_line("x", "a1", 0, 128, 10.0),
        "(trainer pid=42, ip=127.0.0.11) " + step_line("x", "a1", 0, 128, 10.5),
        "[engine] progress step=256/4096 pct=6.2 fps=900",
        step_line("x", "a1", 0, 256, 11.0),
        step_line("x", "b2", 256, 384, 20.0),
        "[engine] step run=x attempt=b2 resumed_from=256 step=oops at=21.0",
    ]
    got = sorted(read_lines(lines), key=lambda r: r.points[0].at)
    assert [(r.name, r.resumed_from, [(p.at, p.step) for p in r.points]) for r in got] == [
        ("x", 0, [(10.0, 128), (11.0, 256)]),
        ("x", 256, [(20.0, 384)]),
    ]


def test_the_lines_cover_a_run_its_files_do_not_count_again() -> None:
    lines = [RunSteps("x", (StepPoint(1.0, 5),), 0)]
    files = [RunSteps("x", (StepPoint(1.0, 4),), 0), RunSteps("y", (StepPoint(2.0, 7),), 0)]
    assert [r.name for r in prefer_lines(lines, files)] == ["x", "y"]


TRAIN = [
    "--algo", "ppo", "--env", "CartPole-v1", "--run-name", "killed", "--wandb", "offline",
    "--log-every", "128", "--checkpoint-every", "1024", "--eval-episodes", "1",
    "--hparams", '{"n_steps": 128}', "--n-envs", "1",
]  # fmt: skip


def train(tmp: Path, total: int, log: Path) -> subprocess.Popen[str]:
    """The real trainer in its own session (a preempted VM loses wandb-core with it)."""
    with open(log, "w") as fh:
        return subprocess.Popen(
            [sys.executable, "-m", "engine.train", *TRAIN, "--total-timesteps", str(total),
             "--storage", f"file://{tmp / 'bucket'}"],
            cwd=tmp, env=engine_env(tmp), stdout=subprocess.DEVNULL, stderr=fh, text=True,
            start_new_session=True,
        )  # fmt: skip


def steps_logged(log: Path) -> list[int]:
    return [s.step for s in map(parse_trainer_step, log.read_text().splitlines()) if s]


@pytest.mark.slow
@pytest.mark.timeout(600)
async def test_a_sigkilled_trainer_s_redone_steps_come_from_its_lines(tmp_path: Path) -> None:
    """A real trainer SIGKILLed with its wandb-core (as a preempted VM is) past a checkpoint,
    then resumed by the same command: ``phantom report --logs`` counts exactly the steps its
    lines say were thrown away (the step it reached less the one its successor resumed at).
    The W&B run files a SIGKILL leaves short are only printed beside it."""
    first, second = tmp_path / "first.log", tmp_path / "second.log"
    a0 = time.time()
    proc = train(tmp_path, 1_000_000, first)
    try:
        await until(
            lambda: max(steps_logged(first), default=0) >= 1024 + 384 or proc.poll() is not None,
            240,
            "the trainer past its first checkpoint",
        )
        assert proc.poll() is None, first.read_text()[-3000:]
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
    a1 = time.time()
    reached = max(steps_logged(first))
    b0 = time.time()
    total = (reached // 128 + 8) * 128
    resumed_proc = train(tmp_path, total, second)
    await asyncio.to_thread(resumed_proc.wait, 300)
    b1 = time.time()
    assert resumed_proc.returncode == 0, second.read_text()[-3000:]
    found = re.search(r"resuming killed from checkpoint \S+ at step (\d+)", second.read_text())
    assert found is not None, second.read_text()[-3000:]
    truth = reached - int(found.group(1))
    assert truth > 0
    logs = tmp_path / "logs"
    logs.mkdir()
    for f in (first, second):
        (logs / f.name).write_text(f.read_text())
    path = tmp_path / "journal.sqlite"
    journal = Journal(path)
    await replay(journal, rows_for([a0, a1, b0, b1], run="killed"))
    journal.close()

    def redone(**sources: str) -> dict[str, Any]:
        out, err = io.StringIO(), io.StringIO()
        code = report_main(Config(), fmt="json", journal_path=str(path), out=out, err=err,
                           clock=lambda: b1 + 1, **sources)  # type: ignore[arg-type]  # fmt: skip
        assert code == exit_codes.OK, err.getvalue()
        (job,) = json.loads(out.getvalue())["jobs"]
        return dict(job)

    job = redone(logs_path=str(logs))
    assert (job["redone_steps"], job["steps_known"]) == (truth, True)
    both = redone(logs_path=str(logs), runs_dir=str(tmp_path / "wandb-dir"))
    assert both["redone_steps"] == truth  # the lines cover the run: its files add nothing
    files = redone(runs_dir=str(tmp_path / "wandb-dir"))["redone_steps"]
    print(f"redone steps: lines {truth}, W&B run files {files} (reached {reached})")


# -- a GKE workload's TensorBoard events -----------------------------------------------------------
def grpo(tmp: Path, *args: str) -> subprocess.Popen[str]:
    """The GKE emulator's GRPO workload (Tunix's tags, one event file per process start), as
    a pod runs it: its run's output in the emulated bucket."""
    env = {**os.environ, "PHANTOM_GCS_ROOT": str(tmp / "gcs")}
    argv = [sys.executable, "-m", "emulators.gke.workload.grpo",
            "base_output_directory=gs://bucket/runs", "run_name=r1", "step_time=0.02",
            "checkpoint_period=10", *args]  # fmt: skip
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=env, start_new_session=True)  # fmt: skip


def test_a_gke_runs_redone_steps_come_from_its_tensorboard_events(tmp_path: Path) -> None:
    """Issue 36: the report showed redone work "-" for GKE runs. A GKE workload's trainer
    (the emulator's GRPO, Tunix's event files) killed without notice past its checkpoint at
    step 10, as a pod on a failed node is, and restarted in the same workload (JobSet
    restart): `phantom report --logs <its output dir>` counts the steps it computed again,
    from the step the first process reached down to the checkpoint the second resumed at."""
    a0 = time.time()
    first = grpo(tmp_path, "steps=400")
    assert first.stdout is not None
    printed = []
    for line in first.stdout:
        printed.append(line)
        if line.startswith("completed step: 18,"):  # step 17's events are written by now
            os.killpg(first.pid, signal.SIGKILL)
            break
    first.communicate(timeout=30)
    second = grpo(tmp_path, "steps=25")
    out, _ = second.communicate(timeout=60)
    b1 = time.time()
    assert second.returncode == 0, out
    assert "(step 10)" in out  # restored from the checkpoint at step 10
    run_dir = tmp_path / "gcs" / "bucket" / "runs"
    found = sorted(read_logs(run_dir), key=lambda r: r.points[0].at)
    assert [(r.name, r.resumed_from, r.points[0].step) for r in found] == [
        ("r1", 0, 1),
        ("r1", 10, 11),
    ]
    reached = found[0].points[-1].step
    assert reached in (17, 18), "".join(printed)
    assert [p.step for p in found[1].points] == list(range(11, 26))

    path = tmp_path / "journal.sqlite"
    journal = Journal(path)

    def state(at: float, new: str) -> Event:
        return Event(at, EventKind.JOB_STATE, f"workload grpo-w -> {new}", actor="gke",
                     data={"job_id": "grpo-w", "new_status": new,
                           "entrypoint": "bash run_gptoss_20b_rl.sh run_name=r1"})  # fmt: skip

    asyncio.run(replay(journal, [state(a0 - 0.5, "PENDING"), state(a0, "RUNNING"),
                                 state(b1, "SUCCEEDED")]))  # fmt: skip
    journal.close()
    out_, err = io.StringIO(), io.StringIO()
    code = report_main(Config(), fmt="json", journal_path=str(path), logs_path=str(run_dir),
                       out=out_, err=err, clock=lambda: b1 + 1)  # fmt: skip
    assert code == exit_codes.OK, err.getvalue()
    (job,) = json.loads(out_.getvalue())["jobs"]
    assert (job["redone_steps"], job["steps_known"]) == (reached - 10, True)
