"""What the engine's tests share to spend less CPU on interpreters and trainers.

``smoke_run`` and ``advised_run`` are trainer runs that tests of two modules read (see
tests/support/trained_runs.py for why): session-scoped, so their readers share an xdist
group (tests/conftest.py) and each run happens once per session. Each is started in the
environment the console gives a job (W&B's mode and project by name), as test_envvars needs,
with no flag that would hide it. ``python`` runs entry points as children of a fork server.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from engine.contract import CHECKPOINT_ADVICE_REASON, CHECKPOINT_ADVICE_STEPS
from tests.support.engine_helpers import engine_env
from tests.support.forked_python import ForkedPython
from tests.support.forkrun import ForkServer
from tests.support.trained_runs import SMOKE, TrainedRun, train, train_here

ADVICE_REASON = "Young/Daly, C=0.01s, M=60s"


@pytest.fixture(scope="session")
def smoke_run(tmp_path_factory: pytest.TempPathFactory) -> TrainedRun:
    """The seed's smoke command in a fresh directory, W&B offline with a project from the
    environment. Read by test_train (checkpoints, final weights, the offline artifact) and
    test_envvars (W&B's mode and project came from the environment)."""
    cwd = tmp_path_factory.mktemp("smoke")
    env = engine_env(cwd, WANDB_MODE="offline", WANDB_PROJECT="capstone_tpu")
    return train(cwd, SMOKE, env)


@pytest.fixture(scope="session")
def advised_run(tmp_path_factory: pytest.TempPathFactory) -> TrainedRun:
    """A tiny run with ``--checkpoint-every auto`` and the console's advice of 256 steps in
    its environment, W&B disabled by ``WANDB_MODE``. Read by test_checkpoint_auto (the
    advised interval is used, said, and each save's cost logged) and test_envvars (the mode
    came from the environment: no W&B files, no artifact). Neither is about the trainer's
    process, so it runs in this one (``train_here``), in that environment and directory."""
    cwd = tmp_path_factory.mktemp("advised")
    env = {
        "WANDB_MODE": "disabled",
        "WANDB_PROJECT": "capstone_tpu",
        "WANDB_DIR": str(cwd / "wandb-dir"),
        CHECKPOINT_ADVICE_STEPS: "256",
        CHECKPOINT_ADVICE_REASON: ADVICE_REASON,
    }
    args = [
        "--algo", "ppo", "--env", "CartPole-v1", "--total-timesteps", "512",
        "--checkpoint-every", "auto", "--eval-episodes", "1", "--hparams", '{"n_steps": 64}',
        "--run-name", "adv",
    ]  # fmt: skip
    with pytest.MonkeyPatch.context() as mp:
        for name in ("PHANTOM_STORAGE", "WANDB_API_KEY", "WANDB_SERVICE"):
            mp.delenv(name, raising=False)
        for name, value in env.items():
            mp.setenv(name, value)
        mp.chdir(cwd)
        (cwd / "wandb-dir").mkdir()
        return TrainedRun(cwd, env, train_here(args))


@pytest.fixture(scope="module")
def python(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ForkedPython]:
    """``python ARGV`` as a child of a fork server: one interpreter start-up for the module's
    validation and bad-flag runs, each still a process of its own."""
    home = tmp_path_factory.mktemp("forkserver")
    server = ForkServer(home, engine_env(home))
    try:
        yield ForkedPython(server)
    finally:
        server.close()
