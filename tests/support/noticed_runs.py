"""Trainers preempted by a notice, shared by the tests that read what the notice left.

``python -m engine.train`` (PPO and DQN on CartPole, 3,000 steps, no periodic checkpoint
before the end) gets SIGTERM at its first progress line, as a spot VM's shutdown sends it,
and exits. tests/engine/test_notice.py checks the notice checkpoint and resumes the same
command from a copy of the storage; tests/services/ledger/test_notices.py judges notices
against the checkpoints it left. A trainer costs about 3 s of CPU before its first step,
so they read the same two runs (a session fixture: registered in tests/conftest.py so that
both directories see one copy, and xdist keeps its readers on one worker).
"""

from __future__ import annotations

import signal
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.engine_helpers import kill, start_train
from tests.support.waiting import wait_until

NOTICED_RUN = "noticed"
NOTICED_TOTAL = 3000
_HPARAMS = {"ppo": '{"n_steps": 128}', "dqn": '{"learning_starts": 200, "train_freq": 8}'}


def noticed_args(algo: str) -> list[str]:
    """The trainer's command line (the resume runs the same)."""
    return [
        "--algo", algo, "--env", "CartPole-v1", "--n-envs", "2",
        "--total-timesteps", str(NOTICED_TOTAL), "--checkpoint-every", "100000",
        "--run-name", NOTICED_RUN, "--wandb", "disabled", "--log-every", "256",
        "--eval-episodes", "1", "--hparams", _HPARAMS[algo],
    ]  # fmt: skip


@dataclass(frozen=True)
class NoticedRun:
    """A trainer that got SIGTERM mid-interval, and what it left."""

    algo: str
    args: list[str]
    cwd: Path  # the storage is ``cwd / "runs"`` (the default, relative to the cwd)
    returncode: int
    stdout: str
    log: str  # its stderr
    signalled_at: float  # time.time() just before the SIGTERM

    @property
    def storage(self) -> Path:
        return self.cwd / "runs"


def _progressed(log: Path) -> bool:
    return "progress step=" in log.read_text()


def notice_at_first_progress(cwd: Path, algo: str) -> NoticedRun:
    """SIGTERM long before the first checkpoint (interval 100k > total), at the first
    progress line (step 256 or 512); returns once the trainer has exited (or was killed)."""
    args = noticed_args(algo)
    log = cwd / "first.log"
    proc = start_train(cwd, args, log)
    try:
        wait_until(lambda: _progressed(log) or proc.poll() is not None, 120, "training")
        assert proc.poll() is None, log.read_text()[-3000:]
        signalled_at = time.time()
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=120)
    finally:
        kill(proc)
    return NoticedRun(algo, args, cwd, proc.returncode, out, log.read_text(), signalled_at)


class NoticedRuns:
    """One noticed run per algorithm, started by the first test that asks for it (so the
    tests may run in any order)."""

    def __init__(self, tmp_path_factory: pytest.TempPathFactory) -> None:
        self._factory = tmp_path_factory
        self._runs: dict[str, NoticedRun] = {}

    def __getitem__(self, algo: str) -> NoticedRun:
        if algo not in self._runs:
            cwd = self._factory.mktemp(f"noticed-{algo}")
            self._runs[algo] = notice_at_first_progress(cwd, algo)
        return self._runs[algo]


@pytest.fixture(scope="session")
def noticed_runs(tmp_path_factory: pytest.TempPathFactory) -> NoticedRuns:
    """The noticed PPO and DQN runs (``noticed_runs["ppo"]``), shared by the session."""
    return NoticedRuns(tmp_path_factory)
