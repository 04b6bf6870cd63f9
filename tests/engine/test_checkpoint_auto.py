"""``--checkpoint-every auto`` and the checkpoint line the console reads a save's cost from.

The engine takes the console's advice from its environment (``engine.contract``'s
``CHECKPOINT_ADVICE_STEPS``), falls back to the default without one, and says which it chose.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from engine.contract import (
    CHECKPOINT_ADVICE_REASON,
    CHECKPOINT_ADVICE_STEPS,
    CHECKPOINT_SAVED,
    parse_checkpoint_saved,
)
from engine.trainconfig import DEFAULT_CHECKPOINT_EVERY, UsageError, auto_checkpoint_every
from tests.support.trained_runs import TrainedRun


def test_auto_without_advice_is_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(CHECKPOINT_ADVICE_STEPS, raising=False)
    every, why = auto_checkpoint_every()
    assert every == DEFAULT_CHECKPOINT_EVERY
    assert why == f"no advice in {CHECKPOINT_ADVICE_STEPS}, default"


def test_auto_takes_the_advice_and_its_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CHECKPOINT_ADVICE_STEPS, " 4096 ")
    monkeypatch.setenv(CHECKPOINT_ADVICE_REASON, "Young/Daly, C=1.2s,\n M=3600s")
    assert auto_checkpoint_every() == (4096, "advice from the console: Young/Daly, C=1.2s, M=3600s")
    monkeypatch.delenv(CHECKPOINT_ADVICE_REASON)
    assert auto_checkpoint_every() == (4096, "advice from the console")


@pytest.mark.parametrize("raw", ["lots", "0", "-4096", "1.5", "1e99", "9" * 30])
def test_auto_with_a_bad_advice_names_the_variable(
    monkeypatch: pytest.MonkeyPatch, raw: str
) -> None:
    monkeypatch.setenv(CHECKPOINT_ADVICE_STEPS, raw)
    with pytest.raises(UsageError, match=f"--checkpoint-every auto: {CHECKPOINT_ADVICE_STEPS}="):
        auto_checkpoint_every()


def test_checkpoint_line_round_trips() -> None:
    uri = "/tmp/my runs/x/checkpoints/step-000000000256"  # a local path may hold spaces
    line = "[engine] " + CHECKPOINT_SAVED.format(step=256, uri=uri, seconds=0.0114)
    saved = parse_checkpoint_saved(line)
    assert saved is not None
    assert (saved.step, saved.uri, saved.seconds) == (256, uri, 0.011)
    assert parse_checkpoint_saved("[engine] final weights step=512 at /x/final") is None


def test_auto_run_checkpoints_at_the_advised_interval(advised_run: TrainedRun) -> None:
    """A real (tiny) run: the advised 256 steps are used, said, and each save's cost logged
    (tests/engine/conftest.py's ``advised_run``: the CLI's main in the test process, with
    the advice in its environment; test_envvars reads it too)."""
    proc = advised_run.proc
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (
        "[engine] checkpoint every 256 steps (advice from the console: Young/Daly, C=0.01s, M=60s)"
        in proc.stderr
    )
    saves = [s for s in map(parse_checkpoint_saved, proc.stderr.splitlines()) if s is not None]
    assert [s.step for s in saves] == [256, 512]
    assert all(s.seconds >= 0 for s in saves)
    assert advised_run.result["num_timesteps"] == 512


def test_save_cost_covers_the_pause_it_causes_to_training(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each interval save's reported seconds cover the whole time training stood still for it:
    from the end of one SB3 learn call to the next one's start, a user callback's start hook
    (here an evaluation, as an eval callback runs) included, not only the write."""
    import gymnasium as gym
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.evaluation import evaluate_policy
    from stable_baselines3.common.monitor import Monitor

    from engine.trainconfig import TrainConfig
    from engine.trainer import run_training

    class Pauses(BaseCallback):
        """What training itself sees: when each learn call ended and the next was ready."""

        def __init__(self) -> None:
            super().__init__()
            self.ended: list[tuple[int, float]] = []
            self.ready: list[tuple[int, float]] = []
            self.env = Monitor(gym.make("CartPole-v1"))

        def _on_training_end(self) -> None:
            self.ended.append((self.model.num_timesteps, time.monotonic()))

        def _on_training_start(self) -> None:
            evaluate_policy(self.model, self.env, n_eval_episodes=2)
            self.ready.append((self.model.num_timesteps, time.monotonic()))

        def _on_step(self) -> bool:
            return True

    probe = Pauses()
    cfg = TrainConfig(
        algo="ppo", env="CartPole-v1", total_timesteps=512, checkpoint_every=128,
        storage=str(tmp_path / "runs"), run_name="pause", wandb="disabled",
        hparams={"n_steps": 64}, eval_episodes=0,
    )  # fmt: skip
    run_training(cfg, extra_callbacks=[probe])
    saves = [s for s in map(parse_checkpoint_saved, capsys.readouterr().err.splitlines()) if s]
    assert [s.step for s in saves] == [128, 256, 384, 512]
    ended, ready = dict(probe.ended), dict(probe.ready[1:])  # the first start is no pause
    for save in saves[:-1]:  # the last one ends the run: no training resumes after it
        pause = ready[save.step] - ended[save.step]
        # the line rounds to 1 ms; the engine's span holds the probe's by construction
        assert save.seconds >= pause - 0.0005, (save, pause)
