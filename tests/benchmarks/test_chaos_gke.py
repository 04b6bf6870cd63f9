"""The GKE chaos drill (``benchmarks.chaos_gke``): its plan and its stitching of the
workload's attempts (fast), and one small seeded drill in CI's slow run on the GKE emulator
with the console's watchdog, each kind of event once (seed 2: a preemption without grace,
the coordinator's node failing, a worker crashing, a preemption with the pods' grace); the
drill's checks are the assertions."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.chaos_gke import DrillSettings, run_drill
from benchmarks.chaos_gke_plan import (
    COORDINATOR,
    CRASH,
    KINDS,
    NODE_FAILURE,
    PREEMPT_ABRUPT,
    PREEMPT_GRACE,
    SLICE,
    WORKER,
    Attempt,
    Shot,
    plan,
    stitch,
)


def test_the_plan_is_seeded_and_holds_every_kind_in_each_four() -> None:
    assert plan(3, 8) == plan(3, 8) and plan(3, 8) != plan(4, 8)
    shots = plan(3, 8)
    assert sorted(s.kind for s in shots[:4]) == sorted(KINDS)
    assert sorted(s.kind for s in shots[4:]) == sorted(KINDS)
    for s in shots:
        assert (s.target == SLICE) == s.kind.startswith("preempt")
        assert 0.1 <= s.cycle <= 0.9


def test_only_an_event_that_denies_the_coordinator_its_grace_may_lose_steps() -> None:
    def shot(kind: str, target: str) -> Shot:
        return Shot(1, kind, target, 0.5)

    assert shot(PREEMPT_GRACE, SLICE).graceful
    assert not shot(PREEMPT_ABRUPT, SLICE).graceful
    for kind in (NODE_FAILURE, CRASH):
        assert not shot(kind, COORDINATOR).graceful
        assert shot(kind, WORKER).graceful


def test_stitching_keeps_each_step_once_and_names_a_gap() -> None:
    attempts = [Attempt("a", "1", 0, 27), Attempt("b", "2", 20, 33), Attempt("c", "3", 33, 50)]
    steps, problems = stitch(attempts)
    assert steps == list(range(1, 51)) and problems == []
    gap = [Attempt("a", "1", 0, 17), Attempt("b", "2", 20, 30)]
    steps, problems = stitch(gap)
    assert problems == [
        "attempt 2 resumed at step 20, past 17 where attempt 1 stopped: steps 18..20 never ran"
    ]


@pytest.mark.slow
@pytest.mark.timeout(300)
async def test_a_small_gke_chaos_drill_loses_no_step_it_need_not(tmp_path: Path) -> None:
    settings = DrillSettings(seed=2, count=4, period=5, step_time=0.2)
    result = await run_drill(settings, tmp_path / "drill", say=print)
    print(result.table)
    print(json.dumps(result.figures))
    assert not result.problems, "\n".join(result.problems)
    figs = result.figures
    assert figs["by_kind"] == dict.fromkeys(KINDS, 1)
    assert figs["preemptions_survived"] == figs["preemptions"] == 2
    assert figs["final_step"] == figs["total_steps"] and figs["workload"] == "SUCCEEDED"
    # both sides measured: a drill where nothing could lose a step proves nothing
    assert figs["steps_lost_with_grace"]["n"] >= 1 and figs["steps_lost_without_grace"]["n"] >= 1
    assert figs["steps_lost_with_grace"]["max"] == 0
    assert 0 < figs["steps_lost_without_grace"]["max"] <= settings.period
