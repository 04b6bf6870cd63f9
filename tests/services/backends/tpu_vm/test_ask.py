"""The host side of asking trainers for a checkpoint: the script every host runs, here on this
machine against real processes that registered through the engine's own ``CheckpointAsk``.

It signals only the registered trainers of the job (not another job's, not a registration
whose pid now belongs to another process), waits for their answers and says which one
answered with what, which one was too late and which one ended first; ``asked_result``
turns the hosts' lines into one result.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from console.services.backends.tpu_vm.ask import ask_command, asked_result
from console.services.model import HostResult
from tests.support import REPO

# A trainer's ask, without the training: register, answer the first ask (or never), exit.
TRAINER = r"""
import sys, time
from engine.notice import CheckpointAsk
ask = CheckpointAsk()
with ask.installed(sys.argv[1]):
    print("ready", flush=True)
    while True:
        if ask.pending and sys.argv[2] == "answer":
            ask.answer(4096, f"file:///runs/{sys.argv[1]}/checkpoints/step-000000004096")
        if ask.pending and sys.argv[2] == "quit":
            break
        time.sleep(0.05)
"""


def _trainer(tmp_path: Path, job: str, run: str, how: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "PHANTOM_ASK_DIR": str(tmp_path / "ask")}
    env["PHANTOM_JOB_ID"] = job
    proc = subprocess.Popen(
        [sys.executable, "-c", TRAINER, run, how], env=env, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    return proc


def _ask(tmp_path: Path, job: str, timeout_s: float) -> str:
    env = {**os.environ, "PHANTOM_ASK_DIR": str(tmp_path / "ask")}
    got = subprocess.run(
        ["bash", "-c", ask_command(job, timeout_s)], env=env, capture_output=True, text=True
    )
    assert got.returncode == 0, got.stderr
    return got.stdout


def test_the_job_s_registered_trainers_are_asked_and_answer(tmp_path: Path) -> None:
    mine = _trainer(tmp_path, "raysubmit_a", "run-a", "answer")
    late = _trainer(tmp_path, "raysubmit_a", "run-b", "never")
    other = _trainer(tmp_path, "raysubmit_b", "run-c", "answer")
    stale = tmp_path / "ask" / f"{os.getpid()}.ask"  # this pid, but not the one registered
    stale.write_text("raysubmit_a\nrun-old\n1\n")
    try:
        out = _ask(tmp_path, "raysubmit_a", 2)
        lines = sorted(out.splitlines())
        assert lines == [
            f"DONE {mine.pid} run-a 4096 file:///runs/run-a/checkpoints/step-000000004096 "
            + lines[0].split()[-1],
            f"LATE {late.pid} run-b",
        ], out
        assert not stale.exists() and other.poll() is None and mine.poll() is None
        assert not (tmp_path / "ask" / f"{mine.pid}.done").exists()  # read, then removed
        both = _ask(tmp_path, "*", 2)  # every job: the other one answers too
        assert f"DONE {other.pid} run-c 4096" in both
    finally:
        for proc in (mine, late, other):
            proc.kill()
            proc.wait()


def test_a_trainer_that_ends_before_it_answers_is_gone(tmp_path: Path) -> None:
    quitter = _trainer(tmp_path, "raysubmit_q", "run-q", "quit")
    try:
        assert _ask(tmp_path, "raysubmit_q", 30) == f"GONE {quitter.pid} run-q\n"
    finally:
        quitter.wait(timeout=30)
    killed = _trainer(tmp_path, "raysubmit_k", "run-k", "never")
    killed.kill()  # SIGKILL: it never unregistered
    killed.wait()
    left = tmp_path / "ask" / f"{killed.pid}.ask"
    assert left.exists()
    assert _ask(tmp_path, "raysubmit_k", 1) == ""  # a process that is no more: not signalled
    assert not left.exists()


def test_the_hosts_lines_make_one_result() -> None:
    ok = HostResult(
        "pod-w0",
        True,
        stdout_tail="DONE 11 run-a 4096 file:///r/a 0.412\nLATE 12 run-b\n",
    )
    quiet = HostResult("pod-w1", True, stdout_tail="")
    down = HostResult("pod-w2", False, error="connection refused")
    result = asked_result("raysubmit_a", {"pod-w0": ok, "pod-w1": quiet, "pod-w2": down}, 3.0)
    assert not result.ok and result.action == "checkpoint"
    assert result.data["checkpoints"] == [
        {"host": "pod-w0", "pid": 11, "run": "run-a", "step": 4096, "uri": "file:///r/a",
         "seconds": 0.412}
    ]  # fmt: skip
    assert result.data["late"] == [{"host": "pod-w0", "pid": "12", "run": "run-b"}]
    assert "1 trainer(s) of job raysubmit_a checkpointed" in result.message
    assert "1 did not answer" in result.message and "pod-w2 (unreachable)" in result.message
    assert not result.per_host["pod-w0"].ok and result.per_host["pod-w1"].ok
    nobody = asked_result("raysubmit_z", {"pod-w0": quiet}, 1.0)
    assert not nobody.ok and "no running trainer of job raysubmit_z takes an ask" in (
        nobody.message
    )
