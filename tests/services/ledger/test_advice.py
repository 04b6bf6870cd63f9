"""Checkpoint-interval advice: Young/Daly against hand-computed numbers and a NumPy reference,
the badput model, M from a real journal file, and the edge cases that give no advice."""

from __future__ import annotations

import asyncio
import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest

from console.services.ledger.advice import (
    PREEMPTION_KINDS,
    Advice,
    NoAdvice,
    advice_env,
    advise,
    checkpoint_cost,
    daly_interval,
    down_seconds,
    expected_badput,
    mean_time_between_preemptions,
    preemption_rate,
    young_interval,
)
from console.services.record.incidents import KEY
from console.services.record.journal import Journal
from tests.support.incident_rows import recorded, replay


# -- the formulas ----------------------------------------------------------------------------------
def test_young_and_daly_match_hand_computed_numbers() -> None:
    # C = 30 s, M = 60 s: C/2M = 1/4, sqrt(C/2M) = 1/2, sqrt(2CM) = 60
    # Daly = 60 (1 + 1/6 + 1/36) - 30 = 60 * 43/36 - 30 = 41.666...
    assert young_interval(30, 60) == pytest.approx(60.0)
    assert daly_interval(30, 60) == pytest.approx(60 * 43 / 36 - 30)
    # C = 1.2 s, M = 1 h: sqrt(8640) = 92.9516..., Daly a little under it
    assert young_interval(1.2, 3600) == pytest.approx(92.951600309)
    assert daly_interval(1.2, 3600) == pytest.approx(92.153321635)


def test_daly_matches_a_numpy_reference_over_a_grid() -> None:
    cost = np.array([0.01, 0.5, 1.2, 10.0, 60.0, 300.0])
    mtbf = np.array([60.0, 600.0, 3600.0, 86_400.0])
    c, m = np.meshgrid(cost, mtbf)
    r = c / (2 * m)
    ref = np.where(c < 2 * m, np.sqrt(2 * c * m) * (1 + np.sqrt(r) / 3 + r / 9) - c, m)
    ours = np.vectorize(daly_interval)(c, m)
    np.testing.assert_allclose(ours, ref, rtol=1e-12)
    np.testing.assert_allclose(np.vectorize(young_interval)(c, m), np.sqrt(2 * c * m), rtol=1e-12)


def test_a_save_as_long_as_two_mtbf_or_more_gives_m() -> None:
    assert daly_interval(120, 60) == 60  # C = 2M: the boundary takes M
    assert daly_interval(150, 60) == 60
    assert daly_interval(119.999, 60) < 60


def test_a_free_save_gives_an_interval_of_zero() -> None:
    assert young_interval(0, 3600) == 0 and daly_interval(0, 3600) == 0
    assert expected_badput(100, 0, 3600) == pytest.approx(100 / 7200)


def test_badput_model_numbers_and_its_minimum_at_young() -> None:
    # C/tau + (tau + C)/(2M) at C = 1.2 s, M = 3600 s
    assert expected_badput(4.096, 1.2, 3600) == pytest.approx(1.2 / 4.096 + 5.296 / 7200)
    assert expected_badput(4.096, 1.2, 3600) == pytest.approx(0.2937043056)
    assert expected_badput(daly_interval(1.2, 3600), 1.2, 3600) == pytest.approx(0.0259875161)
    grid = np.linspace(1, 1000, 100_000)
    best = grid[np.argmin([expected_badput(t, 1.2, 3600) for t in grid])]
    assert best == pytest.approx(young_interval(1.2, 3600), abs=0.02)
    assert expected_badput(1.0, 30, 60) == 1.0  # capped: more than all of it is all of it
    assert expected_badput(0, 1.2, 3600) == 1.0


@pytest.mark.parametrize(("cost", "mtbf"), [(-1, 60), (math.nan, 60), (1, 0), (1, math.inf)])
def test_impossible_inputs_are_refused(cost: float, mtbf: float) -> None:
    with pytest.raises(ValueError, match=r"checkpoint cost|time between preemptions"):
        daly_interval(cost, mtbf)


# -- the measurements ------------------------------------------------------------------------------
def test_checkpoint_cost_is_the_mean_of_the_engines_lines() -> None:
    """Every save is paid in full: a slow one weighs its whole pause (a median would not)."""
    lines = [
        "[engine] run x: ppo on CartPole-v1 for 512 steps",
        "[engine] checkpoint step=256 at /r/x/checkpoints/step-000000000256 (1.100s)",
        "[engine] checkpoint step=512 at /r/x/checkpoints/step-000000000512 (9.000s)",
        "[engine] checkpoint step=768 at /r/my x/checkpoints/step-000000000768 (1.300s)",
        "[engine] final weights step=768 at /r/x/final",
    ]
    assert checkpoint_cost(lines) == pytest.approx((1.1 + 9.0 + 1.3) / 3)
    assert checkpoint_cost(lines[:1]) is None


@pytest.fixture
def journal_file(tmp_path: Path) -> Path:
    """The recorded worker-then-head preemption, journaled into a real file and closed."""
    path = tmp_path / "journal.sqlite"
    journal = Journal(path)
    try:
        asyncio.run(replay(journal, recorded(start=1000.0)))
    finally:
        journal.close()
    return path


def test_mtbf_from_a_real_journal_file(journal_file: Path) -> None:
    journal = Journal(journal_file)
    try:
        rows = journal.query(limit=100_000, kinds=PREEMPTION_KINDS)
        everything = journal.query(limit=100_000)
    finally:
        journal.close()
    # a worker (w1) at +61.6 s; the head (w0: head_lost and preempted) at +67.2 s
    assert sorted(r.kind for r in rows) == ["head_lost", "preempted", "preempted"]
    start, end = everything[0].at, everything[-1].at
    rate = preemption_rate(rows, start, end, hosts=4)
    assert (rate.interruptions, rate.hosts_lost) == (2, 2)
    assert rate.mtbf_s == pytest.approx((end - start) / 2)
    assert rate.per_vm_hour == pytest.approx(2 / ((end - start) * 4 / 3600))
    # M is up time over interruptions: each recovery (the loss, detect_s before its row, to
    # its recovered row) is no time between preemptions: 1061.469..1066.566 for the worker,
    # 1066.663..1108.685 for the head (its preempted row's loss is the earlier)
    assert down_seconds(everything, start, end) == pytest.approx(5.097 + 42.022, abs=1e-3)
    assert mean_time_between_preemptions(everything, start, end, hosts=4) == pytest.approx(
        (end - start - 47.119) / 2, abs=1e-3
    )
    # the preemption rows alone have no recovered rows: each incident down to its last row
    assert mean_time_between_preemptions(rows, start, end, hosts=4) < rate.mtbf_s
    # rows from before incidents were stamped are grouped by time: still two (5.6 s apart)
    bare = [
        dataclasses.replace(r, data={k: v for k, v in r.data.items() if k != KEY}) for r in rows
    ]
    assert preemption_rate(bare, start, end, hosts=4).interruptions == 2
    # before the first preemption: none seen, no M
    assert mean_time_between_preemptions(rows, start, start + 60, hosts=4) is None


def test_span_and_hosts_must_make_sense() -> None:
    with pytest.raises(ValueError, match="span"):
        preemption_rate([], 10.0, 10.0, hosts=4)
    with pytest.raises(ValueError, match="host"):
        preemption_rate([], 0.0, 10.0, hosts=0)


# -- the advice ------------------------------------------------------------------------------------
def test_advice_in_steps_with_badput_at_both_intervals() -> None:
    advice = advise(cost_s=1.2, mtbf_s=3600, steps_per_s=500, current_steps=2048)
    assert isinstance(advice, Advice)
    assert advice.steps == round(92.153321635 * 500) == 46077
    assert advice.badput_current == pytest.approx(0.2937043056)
    assert advice.badput_advised == pytest.approx(0.0259875161)
    assert advice.render() == (
        "checkpoint every 46077 steps (92.2s of training at 500 steps/s; Young/Daly, C=1.2s, "
        "M=3600s): expected badput at the current interval (2048 steps) 29.4% vs at the "
        "advised interval 2.6%"
    )
    assert advice_env(advice) == {
        "PHANTOM_CHECKPOINT_ADVICE_STEPS": "46077",
        "PHANTOM_CHECKPOINT_ADVICE_REASON": "Young/Daly, C=1.2s, M=3600s",
    }


def test_a_save_longer_than_two_mtbf_advises_m() -> None:
    advice = advise(cost_s=150, mtbf_s=60, steps_per_s=10, current_steps=100)
    assert isinstance(advice, Advice) and advice.interval_s == 60 and advice.steps == 600


@pytest.mark.parametrize(
    ("cost", "mtbf", "rate", "why"),
    [
        (None, 3600, 500, "no checkpoint save measured"),
        (1.2, None, 500, "no preemption seen yet"),
        (1.2, 3600, None, "no training step rate"),
        (1.2, 3600, 0.0, "no training step rate"),
        (0.0, 3600, 500, "a save measured 0 s"),
    ],
)
def test_no_advice_says_why(
    cost: float | None, mtbf: float | None, rate: float | None, why: str
) -> None:
    advice = advise(cost, mtbf, rate, current_steps=2048)
    assert isinstance(advice, NoAdvice)
    assert why in advice.why and advice.render().startswith("no checkpoint advice: ")
    assert advice_env(advice) == {} and advice_env(None) == {}
