"""Metric cadence per W&B run: is each run still logging at its usual pace?

For every run: time since the last logged step, the median interval between logged rows,
steps per minute, the recent intervals (sparkline-ready) and a *stalled* flag. The rule (seed
000's "are metrics arriving in W&B at steady cadence?"):

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

Sources (blocking; ``CadenceTracker.poll`` runs them, call it via ``apoll`` from the loop):
* ``OfflineRunSource``: W&B's own offline run files, read incrementally (``wandb_files``).
* ``OnlineRunSource``: the W&B public API (``wandb.Api().runs`` + ``run.history``); wandb is
  imported lazily, in the polling thread.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import math
import os
import statistics
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from console.services.model import Event, RunCadence
from console.services.wandb_files import (
    DEFAULT_FLUSH_INTERVAL_S,
    HistoryPoint,
    OfflineRun,
    WandbFileError,
    run_files,
)

log = logging.getLogger(__name__)

WINDOW = 100  # intervals kept per run for the median and the rate
SPARK_LEN = 30  # recent intervals published for a sparkline
RUNNING_STATES = frozenset({"running", "preempting", ""})


# -- pure logic --------------------------------------------------------------------------------
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
@dataclass(frozen=True)
class RunObservation:
    """What a source saw of one run in one poll.

    ``points`` are rows new since the source's previous poll, or, with ``replace``, the
    source's whole current window (the online API returns a window each time). ``stride`` is
    how many logged rows each point stands for (sampled online history), ``lag_s`` how late
    rows become visible through this source.
    """

    run_id: str
    name: str
    source: str
    state: str = "running"
    points: tuple[HistoryPoint, ...] = ()
    replace: bool = False
    stride: float = 1.0
    lag_s: float = 0.0


class CadenceSource(Protocol):
    kind: str  # "offline" or "online"

    def poll(self) -> list[RunObservation]:
        """Every run the source currently knows (blocking; runs in a worker thread)."""
        ...


class CadenceSourceError(Exception):
    """A source cannot be read (names the source and the fix)."""


class OfflineRunSource:
    """Offline run files under a WANDB_DIR (``config.wandb.dir``), read incrementally.

    Only the newest ``max_runs`` files are followed. ``flush_interval_s`` is the writers'
    ``x_transaction_log_flush_interval`` (15 s unless the engine lowers it).
    """

    kind = "offline"

    def __init__(
        self,
        wandb_dir: str | os.PathLike[str],
        *,
        flush_interval_s: float = DEFAULT_FLUSH_INTERVAL_S,
        max_runs: int = 50,
    ) -> None:
        self.wandb_dir = Path(wandb_dir).expanduser()
        self.flush_interval_s = flush_interval_s
        self.max_runs = max_runs
        self._runs: dict[Path, OfflineRun] = {}

    def poll(self) -> list[RunObservation]:
        files = run_files(self.wandb_dir)[-self.max_runs :]
        live = set(files)
        for gone in set(self._runs) - live:
            del self._runs[gone]
        out = []
        for path in files:
            run = self._runs.get(path)
            if run is None:
                run = self._runs[path] = OfflineRun(path)
            try:
                points = run.poll()
            except WandbFileError as exc:
                log.warning("cadence: %s", exc)
                continue
            except OSError as exc:
                log.warning("cadence: cannot read %s: %s", path, exc)
                continue
            out.append(
                RunObservation(
                    run_id=run.run_id,
                    name=run.name or run.run_id,
                    source=self.kind,
                    state=run.state,
                    points=tuple(points),
                    lag_s=self.flush_interval_s,
                )
            )
        return out


class OnlineRunSource:
    """Runs of one W&B project through the public API (``wandb.Api``), newest first.

    Per poll: ``api.runs(path, order="-created_at")`` (the API caches runs, so it is flushed
    first) and, for each running run (and once more when a run stops), ``run.history(keys=
    ["_timestamp"], samples=N, pandas=False)``: the server's sampled history of ``_step`` and
    ``_timestamp``. When a run has more rows than ``samples`` the sampled points are further
    apart; ``stride`` (rows per point, from ``historyLineCount``) rescales the intervals.
    ``base_url`` (or ``WANDB_BASE_URL``) points it at another server, e.g. a local one in tests.
    """

    kind = "online"

    def __init__(
        self,
        project: str,
        entity: str = "",
        *,
        base_url: str | None = None,
        api_key_env: str = "WANDB_API_KEY",
        max_runs: int = 20,
        samples: int = 500,
        lag_s: float = DEFAULT_FLUSH_INTERVAL_S,
        timeout_s: int = 20,
        environ: Mapping[str, str] | None = None,
        api_factory: Callable[[], Any] | None = None,
    ) -> None:
        if not project:
            raise CadenceSourceError("online cadence: wandb.project is empty; set it in [wandb]")
        self.project = project
        self.entity = entity
        self.base_url = base_url
        self.api_key_env = api_key_env
        self.max_runs = max_runs
        self.samples = samples
        self.lag_s = lag_s
        self.timeout_s = timeout_s
        self._environ = environ
        self._api_factory = api_factory
        self._api: Any = None
        self._was_running: set[str] = set()

    @property
    def path(self) -> str:
        return f"{self.entity}/{self.project}" if self.entity else self.project

    def _make_api(self) -> Any:
        if self._api_factory is not None:
            return self._api_factory()
        environ = os.environ if self._environ is None else self._environ
        key = environ.get(self.api_key_env, "")
        if not key:
            raise CadenceSourceError(
                f"online cadence: ${self.api_key_env} is not set (wandb.api_key_env); export "
                'your W&B API key or use wandb.mode = "offline"'
            )
        base_url = self.base_url or environ.get("WANDB_BASE_URL") or None
        import wandb  # lazy: heavy, and only the online path needs it

        overrides = {"base_url": base_url} if base_url else None
        try:
            return wandb.Api(overrides=overrides, api_key=key, timeout=self.timeout_s)
        except Exception as exc:
            where = base_url or "the W&B server"
            raise CadenceSourceError(
                f"online cadence: cannot log in to {where}: {_scrub(str(exc), key)}"
            ) from None

    def poll(self) -> list[RunObservation]:
        if self._api is None:
            self._api = self._make_api()
        api = self._api
        try:
            api.flush()
            runs = list(
                itertools.islice(
                    api.runs(self.path, order="-created_at", per_page=self.max_runs),
                    self.max_runs,
                )
            )
        except Exception as exc:
            self._api = None  # re-login next time (server back, key rotated)
            raise CadenceSourceError(
                f"online cadence: listing runs of {self.path!r} failed: {exc}"
            ) from None
        out = []
        for run in runs:
            run_id = str(run.id)
            state = str(getattr(run, "state", "") or "")
            name = str(getattr(run, "name", "") or run_id)
            fetch = state == "running" or run_id in self._was_running
            if state == "running":
                self._was_running.add(run_id)
            else:
                self._was_running.discard(run_id)
            if not fetch:
                out.append(RunObservation(run_id=run_id, name=name, source=self.kind, state=state))
                continue
            try:
                rows = run.history(keys=["_timestamp"], samples=self.samples, pandas=False)
            except Exception as exc:
                log.warning("cadence: history of %s/%s failed: %s", self.path, run_id, exc)
                out.append(RunObservation(run_id=run_id, name=name, source=self.kind, state=state))
                continue
            points = _rows_to_points(rows)
            line_count = _attr(run, "historyLineCount")
            stride = 1.0
            if isinstance(line_count, int) and len(points) > 1 and line_count > len(points):
                stride = (line_count - 1) / (len(points) - 1)
            out.append(
                RunObservation(
                    run_id=run_id,
                    name=name,
                    source=self.kind,
                    state=state,
                    points=tuple(points),
                    replace=True,
                    stride=stride,
                    lag_s=self.lag_s,
                )
            )
        return out


def _attr(run: Any, key: str) -> Any:
    attrs = getattr(run, "_attrs", None)
    return attrs.get(key) if isinstance(attrs, Mapping) else None


def _rows_to_points(rows: Any) -> list[HistoryPoint]:
    points = []
    for row in rows or ():
        if not isinstance(row, Mapping):
            continue
        step, ts = row.get("_step"), row.get("_timestamp")
        if isinstance(step, int | float) and isinstance(ts, int | float) and math.isfinite(ts):
            points.append(HistoryPoint(step=int(step), timestamp=float(ts)))
    points.sort(key=lambda p: (p.step, p.timestamp))
    return points


def _scrub(text: str, secret: str) -> str:
    return text.replace(secret, "••••••") if secret else text


# -- tracker ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class StallTransition:
    """A run started or stopped stalling (for the journal and the watchdog)."""

    run_id: str
    name: str
    source: str
    stalled: bool
    at: float
    silence_s: float | None
    median_interval_s: float | None
    threshold_s: float | None

    def to_event(self) -> Event:
        data = {
            "run_id": self.run_id,
            "source": self.source,
            "silence_s": _round(self.silence_s),
            "median_interval_s": _round(self.median_interval_s),
            "threshold_s": _round(self.threshold_s),
        }
        if self.stalled:
            msg = (
                f"run {self.name} ({self.run_id}) stalled: no metrics for "
                f"{_fmt(self.silence_s)} (median interval {_fmt(self.median_interval_s)}, "
                f"limit {_fmt(self.threshold_s)})"
            )
            return Event(at=self.at, kind="stalled", message=msg, data=data)
        msg = f"run {self.name} ({self.run_id}) logging again"
        return Event(at=self.at, kind="cadence_resumed", message=msg, data=data)


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 3)


def _fmt(x: float | None) -> str:
    return "?" if x is None else f"{x:.1f}s"


@dataclass
class _RunState:
    run_id: str
    name: str
    source: str
    state: str = "running"
    points: deque[HistoryPoint] = field(default_factory=lambda: deque(maxlen=WINDOW + 1))
    stride: float = 1.0
    lag_s: float = 0.0
    anchor: float | None = None  # our-clock time of the newest row
    skew: Window | None = None  # bounds on the writer's clock minus ours
    stalled: bool = False


class CadenceTracker:
    """Polls the sources, keeps each run's recent rows, publishes ``RunCadence`` values.

    ``poll()`` is blocking (file reads, HTTP): call ``await apoll()`` from the event loop.
    ``take_transitions()`` returns stall start/stop transitions since its last call.
    A failing source keeps its runs' last values, is reported in ``errors``, and cannot flip
    a run to stalled (no data is not evidence of silence). Thread-safe.
    """

    def __init__(
        self,
        sources: Sequence[CadenceSource],
        stall_factor: float,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if stall_factor <= 1:
            raise ValueError(
                f"recovery.stall_factor = {stall_factor!r}: must be greater than 1 "
                "(k x the median interval)"
            )
        self.sources = list(sources)
        self.stall_factor = stall_factor
        self._clock = clock
        self._runs: dict[tuple[str, str], _RunState] = {}
        self._prev_poll: dict[str, float] = {}
        self._transitions: list[StallTransition] = []
        self._latest: list[RunCadence] = []
        self.errors: dict[str, str] = {}
        self._lock = threading.Lock()  # state
        self._poll_lock = threading.Lock()  # one poll at a time

    async def apoll(self) -> list[RunCadence]:
        return await asyncio.to_thread(self.poll)

    def poll(self) -> list[RunCadence]:
        with self._poll_lock:
            failing: set[str] = set()
            for source in self.sources:
                started = self._clock()
                try:
                    observations = source.poll()
                except Exception as exc:  # one broken source must not blind the others
                    failing.add(source.kind)
                    msg = str(exc) if isinstance(exc, CadenceSourceError) else repr(exc)
                    if self.errors.get(source.kind) != msg:
                        log.warning("cadence source %s: %s", source.kind, msg)
                    self.errors[source.kind] = msg
                    continue
                self.errors.pop(source.kind, None)
                seen_at = self._clock()  # rows read in this poll existed by now...
                with self._lock:
                    self._apply(source.kind, observations, seen_at)
                self._prev_poll[source.kind] = started  # ...and new ones were absent then
            now = self._clock()
            with self._lock:
                self._latest = self._compute(now, failing)
                return list(self._latest)

    def _apply(self, kind: str, observations: Sequence[RunObservation], seen_at: float) -> None:
        prev_poll = self._prev_poll.get(kind)
        reported = set()
        for obs in observations:
            key = (obs.source or kind, obs.run_id)
            reported.add(key)
            st = self._runs.get(key)
            if st is None:
                st = self._runs[key] = _RunState(run_id=obs.run_id, name=obs.name, source=key[0])
            st.name = obs.name or st.name
            st.state = obs.state
            st.stride = obs.stride
            st.lag_s = obs.lag_s
            if not obs.points:
                continue
            newest_before = st.points[-1] if st.points else None
            if obs.replace:
                st.points.clear()
            st.points.extend(obs.points)
            new_rows = [
                p
                for p in obs.points
                if newest_before is None
                or not obs.replace
                or (p.step, p.timestamp) > (newest_before.step, newest_before.timestamp)
            ]
            if not new_rows:
                continue  # an online window that did not move
            # Rows not visible at this source's previous poll were written after it (minus
            # lag); on the source's first poll there is no such bound (backfill).
            window = skew_window(
                new_rows[-1].timestamp, new_rows[0].timestamp, seen_at, prev_poll, obs.lag_s
            )
            st.skew = merge_windows(st.skew, window)
            st.anchor = st.points[-1].timestamp - skew_estimate(st.skew)
        for key in [k for k in self._runs if k[0] == kind and k not in reported]:
            del self._runs[key]  # the run's file or listing is gone

    def _compute(self, now: float, failing: set[str]) -> list[RunCadence]:
        out = []
        for st in self._runs.values():
            cad = compute_cadence(
                st.run_id,
                st.name,
                st.source,
                list(st.points),
                now=now,
                stall_factor=self.stall_factor,
                state=st.state,
                stride=st.stride,
                lag_s=st.lag_s,
                last_anchor=st.anchor,
            )
            if st.source in failing and cad.stalled != st.stalled:
                cad = _with_stalled(cad, st.stalled)  # hold the last verdict while blind
            if cad.stalled != st.stalled:
                self._transitions.append(
                    StallTransition(
                        run_id=st.run_id,
                        name=st.name,
                        source=st.source,
                        stalled=cad.stalled,
                        at=now,
                        silence_s=cad.seconds_since,
                        median_interval_s=cad.median_interval_s,
                        threshold_s=stall_threshold(
                            cad.median_interval_s, self.stall_factor, st.lag_s
                        ),
                    )
                )
                st.stalled = cad.stalled
            out.append(cad)
        out.sort(key=lambda c: (c.source, c.name, c.run_id))
        return out

    def take_transitions(self) -> list[StallTransition]:
        with self._lock:
            out, self._transitions = self._transitions, []
        return out

    def latest(self) -> list[RunCadence]:
        """The values from the last poll (no I/O)."""
        with self._lock:
            return list(self._latest)


def _with_stalled(cad: RunCadence, stalled: bool) -> RunCadence:
    return replace(cad, stalled=stalled)


def sources_from_config(
    wandb_cfg: Any, *, environ: Mapping[str, str] | None = None
) -> list[CadenceSource]:
    """The sources for a ``WandbConfig``: offline files always (when the dir exists or is
    configured), plus the public API when ``mode = "online"``."""
    environ = os.environ if environ is None else environ
    wandb_dir = wandb_cfg.dir or environ.get("WANDB_DIR") or "."
    sources: list[CadenceSource] = []
    if wandb_cfg.mode != "disabled":
        sources.append(OfflineRunSource(wandb_dir))
    if wandb_cfg.mode == "online":
        sources.append(
            OnlineRunSource(
                wandb_cfg.project,
                wandb_cfg.entity,
                api_key_env=wandb_cfg.api_key_env,
                environ=environ,
            )
        )
    return sources
