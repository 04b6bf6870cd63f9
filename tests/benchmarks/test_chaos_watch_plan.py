"""The watch drill's plans and figures (``benchmarks.chaos_watch_plan``): no pod, no Ray."""

from __future__ import annotations

import random

import pytest

from benchmarks import chaos_watch_plan as wp
from benchmarks.chaos_watch import WatchDrillSettings, schedule
from benchmarks.chaos_watch_plan import HEAD, SLICE, TUNE, WANDB, WORKER, Kill


@pytest.mark.parametrize("seed", range(1, 21))
def test_the_wandb_plan_has_the_head_and_a_worker_and_the_watcher_killed_in_a_heads_recovery(
    seed: int,
) -> None:
    plan = wp.wandb_plan(seed, kills=4, overlaps=1, watcher_kills=1)
    kinds = [k for k, _, _ in plan]
    assert len(plan) == 4 and HEAD in kinds and WORKER in kinds and SLICE not in kinds
    assert sum(o for _, o, _ in plan) == 1
    assert [k for k, _, w in plan if w] == [HEAD]  # the recovery that relaunches the agents
    assert wp.wandb_plan(seed, 4, 1, 1) == plan  # seeded


def test_more_watcher_kills_than_heads_go_to_the_other_kills() -> None:
    plan = wp.draw(random.Random(3), 3, 0, 3, fixed=(HEAD,), watcher_first=HEAD)
    assert sum(w for _, _, w in plan) == 3


def test_the_tune_plan_keeps_its_slices_and_counts() -> None:
    plan = schedule(WatchDrillSettings(seed=1, kills=8, overlaps=2, watcher_kills=1, slices=3))
    assert [k for k, _, _ in plan].count(SLICE) == 3
    assert sum(o for _, o, _ in plan) == 2 and sum(w for _, _, w in plan) == 1


def _kill(i: int, kind: str, at: float, phase: str = TUNE, **kw: object) -> Kill:
    hosts = ["h0", "h1", "h2", "h3"] if kind == SLICE else [f"h{i}"]
    return Kill(i, kind, hosts, at, phase=phase, **kw)  # type: ignore[arg-type]


KILLS = [
    _kill(1, SLICE, 10.0),
    _kill(2, WORKER, 100.0, watcher_killed=True),
    _kill(3, HEAD, 200.0, phase=WANDB, watcher_killed=True),
    _kill(4, WORKER, 205.0, phase=WANDB, overlap_of=3),
    _kill(5, WORKER, 300.0, phase=WANDB),
]
# (started_at, ended_at, mttr_s): the head's recovery (kill 3) was cut by the watcher's
# SIGKILL (no end) and started again after the overlapping worker loss (kill 4) came
RECOVERIES: list[tuple[float, float | None, float | None]] = [
    (11.0, 90.0, 80.0),
    (101.0, 113.0, 12.0),
    (201.0, None, None),
    (206.0, 290.0, 90.0),
    (301.0, 310.0, None),  # failed: the next recovery is the kill's
    (311.0, 325.0, 14.0),
]


def test_kill_counts() -> None:
    assert wp.kill_counts(KILLS) == {
        "kills": 5,
        "kills_by_kind": {WORKER: 3, HEAD: 1, SLICE: 1},
        "overlaps": 1,
        "watcher_kills": 2,
        "hosts_killed": 8,
    }


def test_a_recovery_counts_for_the_kill_that_opened_it_not_an_overlap_that_joined_it() -> None:
    assert wp.mttr_by_kind(RECOVERIES, KILLS) == {
        SLICE: {"n": 1, "median": 80.0, "max": 80.0},
        WORKER: {"n": 2, "median": 14.0, "max": 14.0},  # the upper of two
        HEAD: {"n": 1, "median": 90.0, "max": 90.0},
    }
    assert wp.mttr_by_kind(RECOVERIES, KILLS, WANDB) == {
        HEAD: {"n": 1, "median": 90.0, "max": 90.0},
        WORKER: {"n": 1, "median": 14.0, "max": 14.0},
    }
    assert wp.mttr_by_kind([(5.0, 6.0, 1.0)], KILLS) == {}  # before any kill: not the drill's


def test_a_phases_figures_carry_its_prefix_and_only_its_kills() -> None:
    figs = wp.phase_figures("wandb_", KILLS, RECOVERIES, WANDB)
    assert figs["wandb_kills"] == 3 and figs["wandb_overlaps"] == 1
    assert figs["wandb_kills_by_kind"] == {WORKER: 2, HEAD: 1, SLICE: 0}
    assert figs["wandb_watcher_kills"] == 1 and figs["wandb_hosts_killed"] == 3
    assert set(figs["wandb_mttr_s_by_kind"]) == {HEAD, WORKER}


def test_steps_lost_past_a_checkpoint() -> None:
    # (resumed from, last checkpoint) of each attempt, in order
    assert wp.lost_past_checkpoint([[(0, 2048), (2048, 4096), (4096, 8192)]]) == 0
    # the third attempt resumed at 2048 though 4096 was saved: 2048 redone past a checkpoint
    assert wp.lost_past_checkpoint([[(0, 2048), (2048, 4096), (2048, 6144)]]) == 2048
    # a restart from step 0 after a checkpoint loses it all; runs add up
    assert wp.lost_past_checkpoint([[(0, 1024), (0, 3072)], [(0, 0), (0, 1024)]]) == 1024
    assert wp.lost_past_checkpoint([]) == 0
