"""Preemption notice: SIGTERM -> a checkpoint at the step reached -> exit 75 -> exact resume.

Processes are real (``python -m engine.train``, Ray clusters on loopback) and signalled as a
spot VM's shutdown would: SIGTERM, then SIGKILL when the grace runs out. The resumes that
follow run the CLI's ``main`` with the same argv in the test's own process
(tests/support/trained_runs.py's ``train_here``): a resume is the engine's logic, not a
process boundary, and a trainer process costs ~3 s of CPU before its first step.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from engine.exit_codes import EX_PREEMPTED
from engine.notice import NOTICE_LINE_RE, notice_line
from engine.storage import (
    MANIFEST,
    NOTICE,
    FsspecCheckpointStore,
    latest_checkpoint_step,
)
from engine.trainconfig import TrainConfig
from tests.support.engine_helpers import (
    assert_only_complete_checkpoints,
    engine_env,
    kill,
    notice_from_log,
    start_train,
)
from tests.support.noticed_runs import NOTICED_RUN, NOTICED_TOTAL, NoticedRuns
from tests.support.trained_runs import train_here
from tests.support.waiting import wait_until

# ------------------------------------------------------------------ in-process: the step gate


@pytest.mark.parametrize(
    ("algo", "hparams"),
    [
        ("ppo", {"n_steps": 64, "batch_size": 32, "n_epochs": 2}),
        ("a2c", {"n_steps": 16}),
        ("dqn", {"learning_starts": 10, "train_freq": 16, "buffer_size": 1000}),
    ],
)
def test_step_gate_stops_at_the_step_and_trains_the_partial_rollout(
    algo: str, hparams: dict[str, int]
) -> None:
    """Stop requested at the 41st env step of a chunk: the model stands at exactly 40 stored
    steps (x n_envs), the 40 - 32 (or 40 - 16 ...) steps of the interrupted rollout are
    trained on (the update counter moves), and the buffer is the configured one again."""
    from stable_baselines3.common.logger import Logger

    from engine.learning import StepGate, fresh_model, learn_exactly, make_vec_env

    cfg = TrainConfig(algo=algo, n_envs=2, env="CartPole-v1", hparams=hparams, seed=3)
    venv = make_vec_env(cfg, None)
    model = fresh_model(cfg, venv)
    model.set_logger(Logger(folder=None, output_formats=[]))
    calls = {"n": 0}

    def stop_at_41() -> bool:
        calls["n"] += 1
        return calls["n"] > 40

    gate = StepGate(stop_at_41)
    updates = []

    real_train = model.train

    def counting_train(*args: object, **kwargs: object) -> None:
        updates.append(model.num_timesteps)
        real_train(*args, **kwargs)

    model.train = counting_train
    done = learn_exactly(model, 2 * 1000, gate, log_interval=1, gate=gate)
    assert done is False and gate.stopped
    assert model.num_timesteps == 2 * 40
    per_rollout = hparams.get("n_steps") or hparams["train_freq"]
    assert gate.collected == 40 % per_rollout
    assert updates[-1] == 2 * 40, "the partial rollout was not trained on"
    if algo != "dqn":
        assert model.rollout_buffer.buffer_size == per_rollout
    venv.close()


def test_notice_line_round_trips_through_its_regex() -> None:
    line = "[engine] " + notice_line(12288, "file:///b/run/checkpoints/step-x", 0.4123, "SIGTERM")
    m = NOTICE_LINE_RE.search(line)
    assert m is not None
    assert m["step"] == "12288" and m["uri"] == "file:///b/run/checkpoints/step-x"
    assert m["seconds"] == "0.412" and m["source"] == "SIGTERM" and m["code"] == "75"


# A process that stops on a notice the way engine.train does, with what a normal exit keeps:
# an atexit handler, unflushed stdout, a non-daemon thread; and what only the teardown runs.
EXIT_NOW = r"""
import atexit, sys, threading
from pathlib import Path
from engine.notice import exit_with

out = Path(sys.argv[1])
atexit.register(lambda: (out / "atexit").write_text("ran"))
go = threading.Event()
def late_writer():
    go.wait()
    (out / "thread").write_text("joined")
threading.Thread(target=late_writer).start()
class Teardown:
    def __del__(self):
        (out / "teardown").write_text("ran")
kept = Teardown()  # a module global: finalized only by the interpreter's teardown
sys.stdout.write("unflushed line")
go.set()
exit_with(int(sys.argv[2]))
"""


@pytest.mark.parametrize("code", [EX_PREEMPTED, 1])
def test_exit_after_a_notice_keeps_what_an_exit_keeps_and_skips_the_teardown(
    tmp_path: Path, code: int
) -> None:
    """Exit 75 leaves at once: the handlers, the flush and the join still happen, the
    interpreter's teardown (torch's alone takes seconds on a busy VM) does not. Any other
    code is a normal exit."""
    proc = subprocess.run(
        [sys.executable, "-c", EXIT_NOW, str(tmp_path), str(code)],
        capture_output=True,
        text=True,
        env=engine_env(tmp_path),
        timeout=60,
    )
    assert proc.returncode == code, proc.stderr
    assert proc.stdout == "unflushed line"
    assert (tmp_path / "atexit").read_text() == "ran"
    assert (tmp_path / "thread").read_text() == "joined"
    assert (tmp_path / "teardown").exists() == (code != EX_PREEMPTED)


# A sweep driver whose main thread is inside a C call that retries on EINTR (as Ray's calls
# on a dead raylet do): libc system() waits for its child and never returns to Python.
STUCK_DRIVER = r"""
import atexit, ctypes, sys
from pathlib import Path
from engine.notice import PreemptionNotice

out = Path(sys.argv[1])
atexit.register(lambda: (out / "atexit").write_text("ran"))
notice = PreemptionNotice(on_first=lambda: (out / "stop-asked").write_text("yes"))
with notice.watched(stop_within_s=60.0, stuck_s=float(sys.argv[3])):
    (out / "ready").write_text("yes")
    ctypes.CDLL(None).system(sys.argv[2].encode())
print("main thread returned", flush=True)
"""


@pytest.mark.parametrize("stuck", [True, False])
def test_notice_is_honoured_while_the_main_thread_is_stuck_in_c(
    tmp_path: Path, stuck: bool
) -> None:
    """SIGTERM to a driver whose main thread never returns to the interpreter: the watcher
    still asks the stop (on_first) and, the main thread still stuck, exits 75 with the
    atexit handlers run. A main thread that ends in time exits on its own, as before."""
    seconds, within = ("120", "1") if stuck else ("2", "60")
    out_path, err_path = tmp_path / "stdout", tmp_path / "stderr"
    # output to files, not pipes: system()'s shell keeps its copies open after the driver exits
    with out_path.open("w") as stdout, err_path.open("w") as stderr:
        proc = subprocess.Popen(
            [sys.executable, "-c", STUCK_DRIVER, str(tmp_path), f"sleep {seconds}", within],
            stdout=stdout,
            stderr=stderr,
            env=engine_env(tmp_path),
            start_new_session=True,  # the shell and its sleep are killed with the group below
        )
    try:
        wait_until(lambda: (tmp_path / "ready").exists(), 30, "the driver to start")
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    out, err = out_path.read_text(), err_path.read_text()
    assert (tmp_path / "stop-asked").read_text() == "yes", err
    assert (tmp_path / "atexit").read_text() == "ran"
    if stuck:
        assert proc.returncode == EX_PREEMPTED, err
        assert "the main thread is stuck 1s after SIGTERM; exiting 75" in err
        assert "main thread returned" not in out
    else:
        assert proc.returncode == 0, err
        assert "main thread returned" in out


# ------------------------------------------------------------------ storage: the notice marker


def test_notice_marker_is_waited_for_until_removed(tmp_path: Path) -> None:
    store = FsspecCheckpointStore(str(tmp_path), "r")
    assert store.pending_notice() is None and store.wait_for_notice() is None
    writer = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])  # sleep-noqa
    try:
        store.begin_notice(
            {
                "step": 7,
                "pid": writer.pid,
                "host": os.uname().nodename,
                "deadline_unix": time.time() + 30,
            }
        )
        assert store.pending_notice() is not None
        timer = threading.Timer(0.5, store.end_notice)
        timer.start()
        started = time.monotonic()
        assert store.wait_for_notice(poll_s=0.05) is not None
        assert time.monotonic() - started >= 0.4  # it did wait for the removal
        assert store.pending_notice() is None
        # a marker whose writer died on this machine, or whose deadline passed, is stale
        store.begin_notice(
            {"pid": writer.pid, "host": os.uname().nodename, "deadline_unix": time.time() + 30}
        )
        kill(writer)  # type: ignore[arg-type]
        assert store.pending_notice() is None
        store.begin_notice({"pid": os.getpid(), "host": "elsewhere", "deadline_unix": 1.0})
        assert store.pending_notice() is None
    finally:
        writer.kill()
        writer.wait()


# ------------------------------------------------------------------ engine.train, SIGTERM


def _progressed_past(log: Path, step: int) -> bool:
    found = re.findall(r"progress step=(\d+)/", log.read_text())
    return bool(found) and int(found[-1]) > step


@pytest.mark.parametrize("algo", ["ppo", "dqn"])
def test_sigterm_mid_interval_resumes_at_the_step_reached(
    noticed_runs: NoticedRuns, algo: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SIGTERM long before the first checkpoint (interval 100k > total): exit 75, one notice
    line naming step N, a complete checkpoint at N; the same command resumes at exactly N
    and ends at exactly --total-timesteps (3,000: the signal lands at the first progress
    line, step 256 or 512; the resumed run trains the rest). The preempted trainer is
    tests/support/noticed_runs.py's (the ledger's notice test reads it too); the resume
    runs on a copy of its storage, as a retry on another VM reads the same bucket, and in
    this process (the CLI's main with the same argv): what it checks is the engine's
    resume, the process boundary is the first run's."""
    noticed_run = noticed_runs[algo]
    text, storage = noticed_run.log, str(noticed_run.storage)
    assert noticed_run.returncode == EX_PREEMPTED, text[-3000:]
    assert noticed_run.stdout == ""  # no result object: the run did not finish
    notice = notice_from_log(text)
    assert notice is not None, text[-3000:]
    step = notice["step"]
    assert 0 < step < NOTICED_TOTAL and step % 2 == 0
    assert latest_checkpoint_step(storage, NOTICED_RUN) == step
    assert_only_complete_checkpoints(storage, NOTICED_RUN)
    ckpt = noticed_run.storage / NOTICED_RUN / "checkpoints" / f"step-{step:012d}"
    manifest = json.loads((ckpt / MANIFEST).read_text())
    assert manifest["trigger"] == "notice" and manifest["step"] == step
    assert not (noticed_run.storage / NOTICED_RUN / NOTICE).exists()

    shutil.copytree(noticed_run.storage, tmp_path / "runs")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("PHANTOM_STORAGE", raising=False)
    again = train_here(noticed_run.args)
    assert again.returncode == 0, again.stderr[-3000:]
    result = json.loads(again.stdout.strip().splitlines()[-1])
    assert result["resumed_from_step"] == step
    assert result["num_timesteps"] == NOTICED_TOTAL
    assert f"at step {step}" in again.stderr
    final = json.loads((tmp_path / "runs" / NOTICED_RUN / "final" / MANIFEST).read_text())
    assert final["step"] == NOTICED_TOTAL


@pytest.mark.parametrize("kill_when", ["marker", "publishing"])
def test_sigterm_then_sigkill_during_the_write_leaves_only_complete_checkpoints(
    tmp_path: Path, kill_when: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A notice, a second SIGTERM (ignored), then SIGKILL while the notice checkpoint is
    being written (a DQN replay buffer makes it take a while): every checkpoint a loader can
    see is complete, the run resumes from the last complete one and ends at its total."""
    args = [
        "--algo", "dqn", "--total-timesteps", "3000", "--checkpoint-every", "1000",
        "--run-name", "killed", "--wandb", "disabled", "--eval-episodes", "0",
        "--log-every", "100", "--hparams", '{"buffer_size": 150000, "learning_starts": 100}',
    ]  # fmt: skip
    run = tmp_path / "runs" / "killed"
    ckpts = run / "checkpoints"
    log = tmp_path / "first.log"
    proc = start_train(tmp_path, args, log, PHANTOM_NOTICE_GRACE_S="5")
    try:
        wait_until(
            lambda: _progressed_past(log, 1000) or proc.poll() is not None,
            300,
            "training past the first periodic checkpoint",
            step=0.05,
        )
        assert proc.poll() is None, log.read_text()[-3000:]
        proc.send_signal(signal.SIGTERM)
        if kill_when == "marker":
            seen = lambda: (run / NOTICE).exists()  # noqa: E731
        else:
            seen = lambda: any(p.name.startswith(".tmp-step") for p in ckpts.iterdir())  # noqa: E731
        wait_until(lambda: seen() or proc.poll() is not None, 60, kill_when, step=0.001)
        proc.send_signal(signal.SIGTERM)  # a second notice changes nothing
        proc.send_signal(signal.SIGKILL)  # the grace period ran out
        proc.wait(timeout=60)
    finally:
        kill(proc)
    assert proc.returncode == -signal.SIGKILL, log.read_text()[-3000:]
    visible = assert_only_complete_checkpoints(str(tmp_path / "runs"), "killed")
    assert visible and visible[0] >= 1000
    leftovers = [p.name for p in ckpts.iterdir() if p.name.startswith(".tmp-")]
    print(f"killed at {kill_when}: visible {visible}, invisible leftovers {leftovers}")
    if visible[0] == 1000:  # the kill did land in the write: its remains are invisible
        assert kill_when == "marker" or leftovers, "no trace of an interrupted write"
    assert latest_checkpoint_step(str(tmp_path / "runs"), "killed") == visible[0]
    assert notice_from_log(log.read_text()) is None  # killed before it could say so

    # the resume in this process (the CLI's main, same argv): the process that matters,
    # the one killed mid-write, was a real one
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("PHANTOM_STORAGE", raising=False)
    monkeypatch.setenv("PHANTOM_NOTICE_GRACE_S", "5")
    again = train_here(args)
    assert again.returncode == 0, again.stderr[-3000:]
    result = json.loads(again.stdout.strip().splitlines()[-1])
    assert result["resumed_from_step"] == visible[0] and result["num_timesteps"] == 3000
    assert "waiting for the notice checkpoint" not in again.stderr  # its writer is dead
