"""The cadence rule, as pure functions: intervals, median, rate, clock skew, stalled.

    stalled  <=>  state is running  and  silence > k x median interval + lag

``k`` is ``config.recovery.stall_factor``; ``lag`` is how late data become visible through
the source (wandb-core flushes offline files every 15 s by default; the W&B server ingests
with a similar delay), so a healthy run is never flagged just because it is read in batches.
A run needs two rows before it has a median; with one row it is never called stalled.

Clock skew: intervals come from the writer's own ``_timestamp`` values (one clock, so skew
cancels). Silence needs "now" on *our* clock, so each row's time is bounded by when we saw it:
a row first seen at poll ``t1`` that was not there at the previous poll ``t0`` was written in
``[t0 - lag, t1]``. Intersecting those windows over polls bounds the writer's skew
(``skew_window``/``skew_estimate``); timestamps are corrected only when clocks disagree. A
writer clock an hour ahead or behind therefore neither hides a stall nor invents one.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Sequence

from console.services.cadence.wandb_files import HistoryPoint
from console.services.model import RunCadence

WINDOW = 100  # intervals kept per run for the median and the rate
SPARK_LEN = 30  # recent intervals published for a sparkline
RUNNING_STATES = frozenset({"running", "preempting", ""})


def intervals(points: Sequence[HistoryPoint], stride: float = 1.0) -> list[float]:
    """Seconds between consecutive rows (divided by ``stride`` rows per point).

    Non-positive gaps (a duplicate row, the writer's clock stepping back) carry no cadence
    information and are dropped rather than dragging the median towards zero.
    """
    stride = stride if stride > 1.0 else 1.0
    out = []
    for a, b in itertools.pairwise(points):
        gap = b.timestamp - a.timestamp
        if gap > 0 and math.isfinite(gap):
            out.append(gap / stride)
    return out


def median(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


def steps_per_minute(points: Sequence[HistoryPoint]) -> float | None:
    """Rate over the window: steps advanced per minute of the writer's clock."""
    if len(points) < 2:
        return None
    first, last = points[0], points[-1]
    dt = last.timestamp - first.timestamp
    if dt <= 0:
        return None
    return max(0, last.step - first.step) / dt * 60.0


Window = tuple[float, float]


def skew_window(
    newest_ts: float,
    oldest_new_ts: float,
    seen_at: float,
    prev_poll_at: float | None,
    lag_s: float,
) -> Window:
    """Bounds on the writer's clock skew (writer clock minus ours) from one poll.

    Rows first visible at ``seen_at`` and absent at ``prev_poll_at`` were written (on our
    clock) in ``[prev_poll_at - lag_s, seen_at]``: the newest row gives the lower bound, the
    oldest new row the upper one. With no previous poll (backfill) there is no upper bound.
    """
    lo = newest_ts - seen_at
    hi = math.inf if prev_poll_at is None else oldest_new_ts - (prev_poll_at - lag_s)
    return (lo, max(lo, hi))


def merge_windows(old: Window | None, new: Window) -> Window:
    """Intersect successive bounds; if they contradict (the writer's clock jumped), restart."""
    if old is None:
        return new
    lo, hi = max(old[0], new[0]), min(old[1], new[1])
    return (lo, hi) if lo <= hi else new


def skew_estimate(window: Window | None) -> float:
    """0 when our observations are consistent with synchronized clocks (the common case, and
    then the writer's timestamps are exact); otherwise the smallest skew the observations
    allow, i.e. assume the fastest observation saw its row at once. That errs towards a
    shorter silence: a skewed writer can delay a stall verdict by one poll, never invent one.
    """
    if window is None or window[0] <= 0.0 <= window[1]:
        return 0.0
    return window[0]


def stall_threshold(
    median_interval_s: float | None, stall_factor: float, lag_s: float
) -> float | None:
    if median_interval_s is None or median_interval_s <= 0:
        return None
    return stall_factor * median_interval_s + max(0.0, lag_s)


def is_stalled(
    silence_s: float | None,
    median_interval_s: float | None,
    stall_factor: float,
    *,
    lag_s: float = 0.0,
    state: str = "running",
) -> bool:
    """The stall rule. Only a running run can stall; one row (no median) never does."""
    if state not in RUNNING_STATES or silence_s is None:
        return False
    limit = stall_threshold(median_interval_s, stall_factor, lag_s)
    return limit is not None and silence_s > limit


def compute_cadence(
    run_id: str,
    name: str,
    source: str,
    points: Sequence[HistoryPoint],
    *,
    now: float,
    stall_factor: float,
    state: str = "running",
    stride: float = 1.0,
    lag_s: float = 0.0,
    last_anchor: float | None = None,
) -> RunCadence:
    """One run's cadence from its recent rows (oldest first). Pure: no I/O, no clock."""
    if not points:
        return RunCadence(
            run_id=run_id,
            name=name,
            source=source,
            last_step=None,
            last_at=None,
            seconds_since=None,
            median_interval_s=None,
            steps_per_min=None,
            state=state,
        )
    last = points[-1]
    anchor = last_anchor if last_anchor is not None else min(last.timestamp, now)
    silence = max(0.0, now - anchor)
    gaps = intervals(points, stride)[-WINDOW:]
    med = median(gaps)
    return RunCadence(
        run_id=run_id,
        name=name,
        source=source,
        last_step=last.step,
        last_at=last.timestamp,
        seconds_since=silence,
        median_interval_s=med,
        steps_per_min=steps_per_minute(points[-(WINDOW + 1) :]),
        recent_intervals=tuple(gaps[-SPARK_LEN:]),
        stalled=is_stalled(silence, med, stall_factor, lag_s=lag_s, state=state),
        state=state,
    )


# -- sources -------------------------------------------------------------------------------------
