"""Cadence in one-shot snapshots: `phantom status --json` reads the run files at call time.

A one-shot status starts no poller, so before this it printed ``"cadence": []`` while a job
logged every ~2 s (issue 25, item 4). Here a job logs through the engine's own W&B writer
into the product's default directory (``$XDG_STATE_HOME/phantom/wandb``), and the real CLI,
as a subprocess, shows its last step and usual interval. A run file that never answers (a
FIFO: its read blocks until someone writes) and one that is not a W&B file are reported
``stale`` with the reason, and the command still returns: the FIFO's read would block
forever, so returning at all is the proof that it was not waited for.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from console.services.cadence.snapshot import mark_stale, read_cadence, with_jobs
from console.services.cadence.sources import OfflineRunSource, OnlineRunSource
from console.services.cadence.wandb_files import read_history, run_files
from console.services.model import CadenceVerdict, JobInfo, RunCadence
from emulators.tpu_pod.client import PodInfo
from tests.support.waiting import wait_until

ROOT = Path(__file__).resolve().parents[3]
PHANTOM = [sys.executable, "-m", "console"]

# The engine's own metric path: engine.tracking starts the run (offline, the engine's
# settings), engine.metrics.WandbWriter logs what SB3's logger hands it; here every 0.3 s.
ENGINE_WRITER = textwrap.dedent(
    """
    import os, sys, time
    from engine.metrics import WandbWriter
    from engine.tracking import start_wandb
    run = start_wandb(mode="offline", project="phantom", entity=None, run_name=sys.argv[1],
                      config={"algo": "ppo"}, resume_id=None, directory=os.environ["WANDB_DIR"])
    writer = WandbWriter(run)
    print("started", run.id, flush=True)
    step = 0
    while True:
        step += 64
        writer.write({"train/loss": 1.0 / step, "time/fps": 210.0}, {}, step)
        time.sleep(0.3)  # sleep-noqa: the writer's logging pace, not a wait
    """
)


def _env(tmp_path: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        RAY_USAGE_STATS_ENABLED="0",
        WANDB_MODE="offline",
        WANDB_SILENT="true",
        PHANTOM_NO_CONFIG_DISCOVERY="1",
        NO_GCE_CHECK="True",
        XDG_STATE_HOME=str(tmp_path / "state"),
        XDG_CONFIG_HOME=str(tmp_path / "config"),
    )
    env.pop("WANDB_DIR", None)
    env.pop("WANDB_API_KEY", None)
    return env


def _fifo_run(wandb_dir: Path, run_id: str) -> Path:
    """A run file whose read blocks (until a writer opens it): a hung source."""
    run_dir = wandb_dir / "wandb" / f"offline-run-20260101_000000-{run_id}"
    run_dir.mkdir(parents=True)
    path = run_dir / f"run-{run_id}.wandb"
    os.mkfifo(path)
    return path


def _junk_run(wandb_dir: Path, run_id: str) -> Path:
    run_dir = wandb_dir / "wandb" / f"offline-run-20260101_000001-{run_id}"
    run_dir.mkdir(parents=True)
    path = run_dir / f"run-{run_id}.wandb"
    path.write_bytes(b"not a run file at all")
    return path


@pytest.mark.timeout(120)
def test_a_hung_or_broken_run_is_stale_and_the_others_are_judged(
    finished_run: Path, tmp_path: Path
) -> None:
    wandb_dir = finished_run.parent.parent.parent  # <dir>/wandb/offline-run-*/run-*.wandb
    fifo = _fifo_run(tmp_path / "w", "hung01")
    junk = _junk_run(tmp_path / "w", "junk01")
    try:
        got = read_cadence(
            [
                OfflineRunSource(wandb_dir),
                OfflineRunSource(tmp_path / "w"),
                OnlineRunSource("phantom", environ={}),  # no key: cannot be read at all
            ],
            stall_factor=5.0,
            deadline_s=2.0,
        )
    finally:
        with contextlib.suppress(OSError):  # release the reader still waiting on the FIFO
            fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
            os.close(fd)
    by_id = {c.run_id: c for c in got}
    (done,) = [c for c in got if c.source == "offline" and not c.stale]
    assert done.last_step == read_history(finished_run)[-1].step == 23
    assert done.median_interval_s is not None and done.median_interval_s > 0
    assert done.state == "finished" and done.verdict == CadenceVerdict.OK
    assert by_id["hung01"].verdict == CadenceVerdict.STALE
    assert "no answer within 2s (recovery.cadence_deadline_s)" in by_id["hung01"].stale
    assert by_id["junk01"].verdict == CadenceVerdict.STALE
    assert "not a W&B run file" in by_id["junk01"].stale and str(junk) in by_id["junk01"].stale
    (online,) = [c for c in got if c.source == "online"]
    assert online.verdict == CadenceVerdict.STALE and "WANDB_API_KEY is not set" in online.stale


def test_a_run_is_matched_to_the_job_that_names_it() -> None:
    jobs = [
        JobInfo("raysubmit_1", "RUNNING", entrypoint="python -m engine.train --run-name ppo-s1"),
        JobInfo("ws-grpo", "RUNNING"),
    ]
    runs = [
        _cad("ppo-s1", "ppo-s1-0a1b"),
        _cad("ws-grpo", "ws-grpo", "tensorboard"),
        _cad("x", "y"),
    ]
    assert [c.job for c in with_jobs(runs, jobs)] == ["raysubmit_1", "ws-grpo", ""]


def test_the_pollers_values_are_marked_stale_by_source() -> None:
    runs = [_cad("a", "a"), _cad("b", "b", "online"), replace(_cad("c", "c"), stalled=True)]
    assert [c.verdict for c in runs] == ["ok", "ok", "stalled"]
    marked = mark_stale(runs, {"online": "listing runs failed"})
    assert [(c.run_id, c.verdict, c.stale) for c in marked] == [
        ("a", "ok", ""),
        ("b", "stale", "listing runs failed"),
        ("c", "stalled", ""),
    ]
    assert {c.verdict for c in mark_stale(runs, {"": "late"})} == {"stale"}


def test_a_bad_deadline_flag_is_refused_naming_it(tmp_path: Path) -> None:
    proc = subprocess.run(
        [*PHANTOM, "status", "--json", "--cadence-deadline", "0"],
        cwd=ROOT,
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "--cadence-deadline: '0': seconds greater than 0" in proc.stderr


def _cad(name: str, run_id: str, source: str = "offline") -> RunCadence:
    return RunCadence(run_id, name, source, 3, 1.0, 1.0, 0.5, 60.0)


@dataclass
class LoggingJob:
    """A job logging metrics into the product's default dir, beside a run file that hangs."""

    cfg: Path
    env: dict[str, str]
    fifo: Path
    rows_seen: int  # rows in the job's run file before the test looked


@contextlib.contextmanager
def logging_job(pod: PodInfo, tmp_path: Path) -> Iterator[LoggingJob]:
    env = _env(tmp_path)
    # The product's default: runs land in <state>/phantom/wandb (wandb.dir unset).
    wandb_dir = tmp_path / "state" / "phantom" / "wandb"
    wandb_dir.mkdir(parents=True)
    cfg = tmp_path / "config.toml"
    cfg.write_text(
        f'[cluster]\nprovider = "local"\nhosts = {len(pod.hosts)}\n'
        f'run_dir = "{pod.run_dir}"\n\n[wandb]\nmode = "offline"\n'
    )
    fifo = _fifo_run(wandb_dir, "hung01")
    writer = subprocess.Popen(
        [sys.executable, "-c", ENGINE_WRITER, "ppo-cadence-s0"],
        cwd=ROOT,
        env={**env, "WANDB_DIR": str(wandb_dir), "WANDB__TRANSACTION_LOG_FLUSH_INTERVAL": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:

        def logged() -> int:
            files = [f for f in run_files(wandb_dir) if f != fifo]
            return len(read_history(files[0])) if files else 0

        wait_until(lambda: logged() >= 4 or writer.poll() is not None, 120, "four rows")
        assert writer.poll() is None, writer.communicate()[1][-2000:]
        yield LoggingJob(cfg, env, fifo, logged())
    finally:
        writer.kill()
        writer.communicate()
        with contextlib.suppress(OSError):
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))


@pytest.mark.timeout(300)
def test_one_shot_status_json_shows_a_logging_runs_step_and_interval(
    pod: PodInfo, tmp_path: Path
) -> None:
    with logging_job(pod, tmp_path) as job:
        proc = subprocess.run(
            [*PHANTOM, "--config", str(job.cfg), "status", "--json", "--cadence-deadline", "3"],
            cwd=ROOT,
            env=job.env,
            capture_output=True,
            text=True,
            timeout=120,  # the FIFO never answers: a status that waited would never return
        )
    (tmp_path / "status.json").write_text(proc.stdout)  # kept for a reader of a failure
    assert proc.returncode == 0, proc.stderr[-3000:]
    status = json.loads(proc.stdout)
    runs = {c["run_id"]: c for c in status["cadence"]}
    assert set(runs) == {"hung01", *(k for k in runs if k.startswith("ppo-cadence-s0"))}
    (run,) = [c for k, c in runs.items() if k != "hung01"]
    assert run["name"] == "ppo-cadence-s0" and run["source"] == "offline"
    assert run["last_step"] >= job.rows_seen - 1
    assert run["median_interval_s"] > 0 and run["seconds_since"] >= 0
    assert run["state"] == "running" and run["verdict"] == "ok" and not run["stale"]
    hung = runs["hung01"]
    assert hung["verdict"] == "stale" and hung["last_step"] is None
    assert "no answer within 3s" in hung["stale"]


@pytest.mark.slow  # two script runs, ~30 s
@pytest.mark.timeout(400)
def test_the_scripts_status_shows_the_pollers_cadence_and_exits_past_a_hung_file(
    pod: PodInfo, tmp_path: Path
) -> None:
    """The script's `status` runs with the pollers started: their values, or stale while
    their first read hangs (on the FIFO); and the script still exits."""
    with logging_job(pod, tmp_path) as job:
        blind = _script_status(job.cfg, job.env)
        job.fifo.unlink()
        seen = _script_status(job.cfg, job.env)
    assert [(c["source"], c["verdict"]) for c in blind] == [("offline", "stale")]
    # The tracker gives up on the hung read after the deadline (5 s) and marks the source
    # stale; or the status call's own wait for that first poll ran out first.
    assert re.search(
        r"offline cadence: no answer for \d+s|the first cadence poll has not finished within 5s",
        blind[0]["stale"],
    ), blind[0]["stale"]
    (run,) = seen
    assert run["name"] == "ppo-cadence-s0" and run["verdict"] == "ok"
    assert run["last_step"] >= job.rows_seen - 1 and run["median_interval_s"] > 0


def _script_status(cfg: Path, env: dict[str, str]) -> list[dict[str, Any]]:
    """The cadence of a script's `status` step (`phantom --script -`)."""
    proc = subprocess.run(
        [*PHANTOM, "--config", str(cfg), "--script", "-"],
        input="status\n",
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,  # a script whose exit waited on the FIFO's reader would never return
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    (step,) = [x for x in map(json.loads, proc.stdout.splitlines()) if x["type"] == "step"]
    return list(step["result"]["cadence"])
