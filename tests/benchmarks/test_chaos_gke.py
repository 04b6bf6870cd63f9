"""The GKE chaos drill (``benchmarks.chaos_gke``): its plan and its stitching of the
workload's attempts (fast), and one small seeded drill in CI's slow run on the GKE emulator
under the real `phantom watch` alone: 8 disruptions of all five kinds, 2 of them
overlapping, the watcher SIGKILLed once mid-recovery and started again; the drill's checks
are the assertions."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.chaos_gke import DrillSettings, run_drill
from benchmarks.chaos_gke_plan import (
    COORDINATOR,
    CRASH,
    EVICT,
    FAMILIES,
    KINDS,
    NODE_FAILURE,
    NODE_LEVEL,
    OOM,
    POD_LEVEL,
    PREEMPT_ABRUPT,
    PREEMPT_GRACE,
    SLICE,
    WORKER,
    Attempt,
    Shot,
    plan,
    stitch,
)


def test_the_plan_is_seeded_and_holds_every_kind_in_each_six() -> None:
    assert plan(3, 12) == plan(3, 12) and plan(3, 12) != plan(4, 12)
    shots = plan(3, 12)
    assert sorted(s.kind for s in shots[:6]) == sorted(KINDS)
    assert sorted(s.kind for s in shots[6:]) == sorted(KINDS)
    for s in shots:
        assert (s.target == SLICE) == s.kind.startswith("preempt")
        assert 0.1 <= s.cycle <= 0.9


def test_overlaps_follow_a_pod_level_disruption_and_kills_land_in_a_recovery() -> None:
    shots = plan(2, 10, overlaps=3, kills=2)
    disruptions = [d for s in shots for d in s.disruptions()]
    assert len(disruptions) == 10 and [d.index for d in disruptions] == list(range(1, 11))
    pairs = [s for s in shots if s.overlap is not None]
    assert len(pairs) == 3
    for s in pairs:
        assert s.kind in POD_LEVEL and s.overlap is not None and s.overlap.kind in NODE_LEVEL
        assert 2.0 <= s.overlap_after <= 8.0
    killed = [s for s in shots if s.kill_after is not None]
    assert len(killed) == 2
    for s in killed:
        assert s.kind in NODE_LEVEL or (s.overlap is not None and s.overlap.kind in NODE_LEVEL)
        assert 1.0 <= (s.kill_after or 0) <= 6.0 and 0.0 <= s.restart_after <= 3.0
    assert {d.family for d in plan(2, 12, overlaps=2)[0].disruptions()} <= set(FAMILIES)


def test_only_an_event_that_denies_the_coordinator_its_grace_may_lose_steps() -> None:
    def shot(kind: str, target: str) -> Shot:
        return Shot(1, kind, target, 0.5)

    assert shot(PREEMPT_GRACE, SLICE).graceful
    assert not shot(PREEMPT_ABRUPT, SLICE).graceful
    for kind in (NODE_FAILURE, CRASH, OOM):
        assert not shot(kind, COORDINATOR).graceful
        assert shot(kind, WORKER).graceful
    # a drain evicts through the API: every pod gets its grace, the coordinator too
    assert shot(EVICT, COORDINATOR).graceful and shot(EVICT, WORKER).graceful


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
@pytest.mark.timeout(420)
async def test_a_gke_chaos_drill_under_phantom_watch_loses_nothing(tmp_path: Path) -> None:
    settings = DrillSettings(seed=2, count=8, overlaps=2, kills=1, period=5, step_time=0.2)
    result = await run_drill(settings, tmp_path / "drill", say=print)
    print(result.table)
    print(json.dumps(result.figures))
    assert not result.problems, "\n".join(result.problems)
    figs = result.figures
    assert figs["disruptions"] == 8 and all(figs["by_kind"][k] >= 1 for k in FAMILIES)
    assert figs["overlaps"] == 2 and figs["watcher_kills"] == 1 and figs["watcher_lives"] == 2
    assert figs["workload_completed"] and figs["final_step"] == figs["total_steps"]
    assert figs["steps_lost_past_checkpoint"] == 0
    assert figs["journal_rows_lost"] == 0 and figs["incidents_left_open"] == 0
    assert figs["counters"] == figs["counters_expected"]
    # both sides measured: a drill where nothing could redo a step proves nothing
    assert figs["steps_redone"]["n"] >= 6 and 0 < figs["steps_redone"]["max"] <= settings.period
