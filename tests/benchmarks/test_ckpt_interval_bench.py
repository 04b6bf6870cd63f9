"""The checkpoint-interval benchmark's pure parts: its seeded schedule, and its measurement
and report over a run's journal rows (written by its own row builders and journaled through
the real sink), the trainer's steps and the engine's checkpoint lines."""

from __future__ import annotations

import math

import pytest

from benchmarks.ckpt_interval import (
    Run,
    compare,
    measure,
    report,
    resubmit_row,
    schedule,
    spread,
    state_row,
    submit_row,
    trainers_redone,
)
from console.services.ledger.goodput import StepPoint
from console.services.ledger.steps import RunSteps
from console.services.model import Event, EventKind, JobStatus
from console.services.record.journal import RECOVERED
from engine.contract import CHECKPOINT_SAVED
from tests.support.incident_rows import journaled_async


def test_the_trainers_own_count_of_redone_steps() -> None:
    a = ["[engine] progress step=1280/9 fps=1", "[engine] progress step=1408/9 fps=1"]
    b = ["[engine] resuming r from checkpoint /b/step-1024 at step 1024"]
    assert trainers_redone([a, b, []]) == 1408 - 1024
    assert trainers_redone([a, ["no checkpoint yet"]]) == 1408  # started over from 0


def test_the_schedule_is_seeded_and_floored() -> None:
    plan = schedule(1, 4, 20.0)
    assert plan == schedule(1, 4, 20.0) and plan != schedule(2, 4, 20.0)
    assert len(plan) == 4 and all(s >= 3.0 for s in plan)
    assert sum(schedule(7, 400, 20.0)) / 400 == pytest.approx(20.0, rel=0.15)
    with pytest.raises(ValueError, match="--preemptions must be >= 1"):
        schedule(1, 0, 20.0)
    with pytest.raises(ValueError, match="--mtbf must be > 3 s"):
        schedule(1, 2, 3.0)


def _saved(step: int, seconds: float) -> str:
    return "[engine] " + CHECKPOINT_SAVED.format(step=step, uri=f"/b/step-{step}", seconds=seconds)


async def _run(name: str, resumed_at: int, saves: list[float]) -> Run:
    """A trains to step 3000 (logged at 20 s), its host is reclaimed at 21 s; B resumes at
    ``resumed_at`` (first step logged at 30 s, when the watchdog sees it train), passes 3000
    at 34 s and trains on to 40 s."""
    rows = [
        submit_row(0.0, "A", "python -m engine.train"),
        state_row(1.0, "A", None, JobStatus.RUNNING),
        Event(21.0, EventKind.PREEMPTED, "w-0 preempted", host="w-0"),
        state_row(22.0, "A", JobStatus.RUNNING, JobStatus.LOST),
        submit_row(23.0, "B", "python -m engine.train", actor="watchdog"),
        resubmit_row(23.0, "A", "B"),
        state_row(24.0, "B", None, JobStatus.RUNNING),
        Event(30.0, RECOVERED, "B trains again"),
    ]
    run = f"ckpt-{name}"  # every attempt's W&B run file names the same run
    steps_a = RunSteps(run, (StepPoint(5.0, 128), StepPoint(12.0, 2048), StepPoint(20.0, 3000)))
    steps_b = RunSteps(
        run, (StepPoint(30.0, resumed_at), StepPoint(34.0, 3000), StepPoint(40.0, 4000))
    )
    lines = [
        "[engine] progress step=128/100000000 fps=900",
        *(_saved(2048 * (i + 1), s) for i, s in enumerate(saves)),
    ]
    attempt_a = [*lines, "[engine] progress step=3072/100000000 pct=0.0 fps=900"]
    attempt_b = [
        f"[engine] resuming ckpt-{name} from checkpoint /b/step-{resumed_at} at step {resumed_at}",
        "[engine] progress step=3200/100000000 pct=0.0 fps=900",
    ]
    return Run(
        name,
        2048,
        await journaled_async(rows),
        [steps_a, steps_b],
        lines,
        40.0,
        preemptions=1,
        per_attempt=[attempt_a, attempt_b],
    )


async def test_badput_is_the_ledgers_redone_work_plus_the_engines_saves() -> None:
    default = measure(await _run("default", 2048, [0.01, 0.02]))
    assert default["attempts"] == 2 and default["steps_known"]
    assert default["redone_steps"] == 3000 - 2048
    assert default["redone_s"] == pytest.approx(4.0)  # 30 s to 34 s
    assert (default["saves"], default["checkpoint_s"]) == (2, pytest.approx(0.03))
    assert default["badput_s"] == pytest.approx(4.03)
    # the trainer got to 3072 (its last line; W&B's last point said 3000) and resumed at 2048
    assert default["trainers_redone_steps"] == 3072 - 2048

    advised = measure(await _run("advised", 2560, [0.01] * 4))
    assert advised["redone_steps"] == 3000 - 2560 and advised["badput_s"] == pytest.approx(4.04)
    verdict = compare(default, advised)
    # by the trainers' lines: 512 steps redone against 1024, at 900/s; the ledger saw 440
    # against 952 (W&B's last point of A was 3000, its last line 3072)
    by_trainers = (512 / 900 + 0.04, 1024 / 900 + 0.03)
    assert verdict == {"advised_over_default": pytest.approx(by_trainers[0] / by_trainers[1],
                                                             abs=1e-3),
                       "advised_not_worse": True,
                       "difference_s": pytest.approx(by_trainers[0] - by_trainers[1], abs=1e-3),
                       "difference_2se_s": 0.0, "within_noise": False,
                       "ledger_advised_over_default": pytest.approx(4.04 / 4.03, abs=1e-3)}  # fmt: skip
    # one reclaim each: one draw of where a reclaim lands, no spread to weigh it against
    assert default["redone_per_reclaim_s"] == [pytest.approx(1024 / 900, abs=0.01)]
    assert default["redone_se_s"] == 0.0

    lines = report({"schedule_s": [5.0], "default": default, "advised": advised, **verdict})
    assert lines[1] == (
        "default: every 2048 steps, 1 reclaims: badput 1.17s = redone 1.14s (1024 steps, the "
        "trainers' lines) + checkpoints 0.03s (2 saves); by the ledger 4.03s (redone 4.00s, "
        "952 steps) in 40s; reached step 4000"
    )
    assert lines[-2:] == [
        "advised / default badput (the trainers' lines): 0.52 (not worse); difference -0.56s "
        "against a noise of ±0.00s (2 s.e.: where the reclaims land): beyond it",
        "advised / default badput by the ledger (W&B run files): 1.00",
    ]


def test_the_spread_of_a_runs_redone_work_weighs_the_difference() -> None:
    """Where each reclaim lands in the checkpoint cycle is luck: the difference between the
    runs is judged against two standard errors of it, from each run's per-reclaim spread."""
    assert spread([1.0]) == 0.0
    assert spread([0.5, 1.5, 1.0, 1.0]) == pytest.approx(math.sqrt(1 / 6) * 2)
    default = {"badput_s": 4.0, "badput_trainers_s": 4.0, "redone_se_s": 0.6}
    advised = {"badput_s": 5.0, "badput_trainers_s": 5.0, "redone_se_s": 0.8}
    verdict = compare(default, advised)
    assert verdict["difference_2se_s"] == pytest.approx(2.0)
    assert (verdict["advised_not_worse"], verdict["within_noise"]) == (False, True)
    assert compare(default, {**advised, "badput_trainers_s": 6.5})["within_noise"] is False
