"""A checkpoint asked for: ``ASK_SIGNAL`` -> a checkpoint at the step reached -> training goes on.

The notice's path without the stop. A trainer of a job the console submitted registers where
the console finds it (``<ask dir>/<pid>.ask``: job, run, start time), answers an ask with one
complete checkpoint (``"trigger": "asked"``), one line and ``<pid>.done``, and then trains to
its total as if nothing happened. The trainer here is a real ``python -m engine.train``.
"""

from __future__ import annotations

import json
import os
import re
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.notice import (
    ASK_SIGNAL,
    ASKED_LINE_RE,
    JOB_ID_ENV,
    CheckpointAsk,
    _start_time,
)
from engine.storage import MANIFEST
from tests.support.engine_helpers import assert_only_complete_checkpoints, kill, start_train
from tests.support.waiting import wait_until

TOTAL = 3000


@pytest.fixture
def ask_signal_restored() -> Iterator[None]:
    previous = signal.getsignal(ASK_SIGNAL)
    yield
    signal.signal(ASK_SIGNAL, previous)


@pytest.mark.usefixtures("ask_signal_restored")
def test_a_trainer_registers_answers_and_leaves_its_answer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PHANTOM_ASK_DIR", str(tmp_path / "ask"))
    monkeypatch.setenv(JOB_ID_ENV, "raysubmit_7")
    ask = CheckpointAsk()
    with ask.installed("run-a"):
        mine = tmp_path / "ask" / f"{os.getpid()}.ask"
        job, run, started = mine.read_text().splitlines()
        assert (job, run, started) == ("raysubmit_7", "run-a", _start_time(os.getpid()))
        os.kill(os.getpid(), ASK_SIGNAL)
        wait_until(lambda: ask.pending, 5, "the ask to be heard")
        assert ask.source == "SIGUSR2"
        line = ask.answer(512, "file:///runs/run-a/checkpoints/step-000000000512")
        assert not ask.pending
        m = ASKED_LINE_RE.search("[engine] " + line)
        assert m is not None and m["step"] == "512" and m["source"] == "SIGUSR2"
    assert not mine.exists()  # not askable any more; the answer stays for its asker
    step, uri, seconds = (tmp_path / "ask" / f"{os.getpid()}.done").read_text().split()
    assert (step, uri) == ("512", "file:///runs/run-a/checkpoints/step-000000000512")
    assert float(seconds) >= 0
    assert signal.getsignal(ASK_SIGNAL) == signal.SIG_IGN  # a late ask is ignored, not fatal


@pytest.mark.usefixtures("ask_signal_restored")
def test_a_trainer_of_no_job_of_the_consoles_does_not_register(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PHANTOM_ASK_DIR", str(tmp_path / "ask"))
    monkeypatch.delenv(JOB_ID_ENV, raising=False)
    with CheckpointAsk().installed("by-hand"):
        assert not (tmp_path / "ask").exists()


def _progress(log: Path) -> int:
    found = re.findall(r"progress step=(\d+)/", log.read_text())
    return int(found[-1]) if found else 0


def test_an_asked_trainer_checkpoints_at_its_step_and_trains_on(tmp_path: Path) -> None:
    """A real trainer asked mid-interval (the first checkpoint is due at 100k, past its
    total): one complete checkpoint at the step it reached, its line and its answer, and then
    it trains to its total and ends as a run that was never asked (exit 0, final weights)."""
    ask_dir = tmp_path / "ask"
    args = [
        "--algo", "ppo", "--env", "CartPole-v1", "--n-envs", "2",
        "--total-timesteps", str(TOTAL), "--checkpoint-every", "100000",
        "--run-name", "asked", "--wandb", "disabled", "--log-every", "256",
        "--eval-episodes", "1", "--hparams", '{"n_steps": 128}',
    ]  # fmt: skip
    log = tmp_path / "train.log"
    proc = start_train(
        tmp_path, args, log, PHANTOM_ASK_DIR=str(ask_dir), **{JOB_ID_ENV: "raysubmit_ask1"}
    )
    try:
        registered = ask_dir / f"{proc.pid}.ask"
        wait_until(lambda: registered.exists() or proc.poll() is not None, 120, "registered")
        assert registered.read_text().splitlines()[:2] == ["raysubmit_ask1", "asked"]
        wait_until(lambda: _progress(log) > 0 or proc.poll() is not None, 120, "training")
        asked_at = _progress(log)
        os.kill(proc.pid, ASK_SIGNAL)
        done = ask_dir / f"{proc.pid}.done"
        wait_until(lambda: done.exists() or proc.poll() is not None, 120, "the answer")
        step, uri, _ = done.read_text().split()
        out, _ = proc.communicate(timeout=300)
    finally:
        kill(proc)
    text = log.read_text()
    assert proc.returncode == 0, text[-3000:]
    (line,) = ASKED_LINE_RE.finditer(text)
    assert int(line["step"]) == int(step) and line["uri"] == uri and line["source"] == "SIGUSR2"
    assert asked_at <= int(step) < TOTAL and int(step) % 2 == 0
    ckpt = tmp_path / "runs" / "asked" / "checkpoints" / f"step-{int(step):012d}"
    manifest = json.loads((ckpt / MANIFEST).read_text())
    assert manifest["trigger"] == "asked" and manifest["step"] == int(step)
    assert int(step) in assert_only_complete_checkpoints(str(tmp_path / "runs"), "asked")
    result = json.loads(out.strip().splitlines()[-1])  # trained on, to the end
    assert result["num_timesteps"] == TOTAL and result["resumed_from_step"] == 0
    assert _progress(log) > int(step)
    assert not registered.exists()
