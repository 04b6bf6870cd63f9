"""The cadence rule as pure functions: intervals, median, rate, skew, stalled."""

from __future__ import annotations

import pytest

from console.services.cadence.rules import (
    compute_cadence,
    intervals,
    is_stalled,
    median,
    merge_windows,
    skew_estimate,
    skew_window,
    steps_per_minute,
)
from tests.services.cadence.conftest import pts


def test_intervals_drop_duplicates_and_clock_steps_back() -> None:
    p = pts((0, 100.0), (1, 102.0), (2, 102.0), (3, 101.0), (4, 104.0))
    assert intervals(p) == [2.0, 3.0]
    assert intervals(pts((0, 0.0), (10, 40.0)), stride=4.0) == [10.0]


def test_median_and_rate() -> None:
    assert median([]) is None
    assert median([3.0, 1.0, 2.0]) == 2.0
    assert steps_per_minute(pts((0, 0.0), (30, 60.0))) == 30.0
    assert steps_per_minute(pts((5, 10.0))) is None
    assert steps_per_minute(pts((5, 10.0), (6, 10.0))) is None


def test_one_step_only_has_no_median_and_never_stalls() -> None:
    cad = compute_cadence("r", "n", "offline", pts((7, 1000.0)), now=5000.0, stall_factor=5)
    assert cad.last_step == 7
    assert cad.seconds_since == 4000.0
    assert cad.median_interval_s is None and cad.steps_per_min is None
    assert not cad.stalled


def test_no_rows_yet() -> None:
    cad = compute_cadence("r", "n", "offline", [], now=10.0, stall_factor=5)
    assert cad.last_step is None and cad.seconds_since is None and not cad.stalled


def test_stall_rule_is_k_times_median_plus_lag() -> None:
    rows = pts(*[(i, 1000.0 + 2.0 * i) for i in range(10)])  # every 2 s, last at 1018
    ok = compute_cadence("r", "n", "offline", rows, now=1018 + 10.0, stall_factor=5)
    assert ok.median_interval_s == 2.0 and not ok.stalled
    late = compute_cadence("r", "n", "offline", rows, now=1018 + 10.5, stall_factor=5)
    assert late.stalled
    lagged = compute_cadence("r", "n", "offline", rows, now=1018 + 20.0, stall_factor=5, lag_s=15)
    assert not lagged.stalled
    assert is_stalled(26.0, 2.0, 5, lag_s=15)
    assert late.steps_per_min == pytest.approx(30.0)
    assert late.recent_intervals == (2.0,) * 9


def test_finished_or_failed_runs_never_stall() -> None:
    rows = pts((0, 0.0), (1, 1.0), (2, 2.0))
    for state in ("finished", "failed", "crashed"):
        assert not compute_cadence(
            "r", "n", "o", rows, now=1e6, stall_factor=2, state=state
        ).stalled
    assert compute_cadence("r", "n", "o", rows, now=1e6, stall_factor=2, state="running").stalled


def test_skew_estimate_from_what_we_observed() -> None:
    # Rows written between polls at 104 and 110 (lag 2): synchronized clocks fit -> no skew.
    w = skew_window(109.0, 105.0, seen_at=110.0, prev_poll_at=104.0, lag_s=2.0)
    assert w == (-1.0, 3.0) and skew_estimate(w) == 0.0
    # Writer an hour ahead: skew is at least 3600 - 1.
    ahead = skew_window(3709.0, 3705.0, seen_at=110.0, prev_poll_at=104.0, lag_s=2.0)
    assert skew_estimate(ahead) == 3599.0
    # Writer an hour behind: the smallest skew the observations allow.
    behind = skew_window(-3491.0, -3495.0, seen_at=110.0, prev_poll_at=104.0, lag_s=2.0)
    assert skew_estimate(behind) == -3601.0
    # Successive polls narrow the window; a contradiction (clock jump) restarts it.
    assert merge_windows((-5.0, 5.0), (-1.0, 9.0)) == (-1.0, 5.0)
    assert merge_windows((-5.0, 5.0), (100.0, 110.0)) == (100.0, 110.0)
    # Backfill: no previous poll, no upper bound; an old row is trusted as is.
    old = skew_window(10.0, 0.0, seen_at=10_000.0, prev_poll_at=None, lag_s=2.0)
    assert old[1] == float("inf") and skew_estimate(old) == 0.0
    assert skew_estimate(None) == 0.0
