"""Metric cadence per W&B run: is each run still logging at its usual pace?

For every run: time since the last logged step, the median interval between logged rows,
steps per minute, the recent intervals (sparkline-ready) and a *stalled* flag, by the rule
in ``rules`` (seed 000's "are metrics arriving in W&B at steady cadence?"), over the
``sources``. ``take_transitions`` turns stall starts and ends into journal events.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field, replace
from typing import Any

from console.services.cadence.rules import (
    RUNNING_STATES,
    WINDOW,
    Window,
    compute_cadence,
    merge_windows,
    skew_estimate,
    skew_window,
    stall_threshold,
)
from console.services.cadence.snapshot import in_daemon_thread, stale_entry
from console.services.cadence.sources import (
    CadenceSource,
    CadenceSourceError,
    OfflineRunSource,
    OnlineRunSource,
    RunObservation,
)
from console.services.cadence.wandb_files import HistoryPoint
from console.services.model import Event, EventKind, RunCadence, RunMetrics

log = logging.getLogger(__name__)


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
    state: str = "running"  # the run's state then: a stall ends by logging again, or by its end

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
            return Event(at=self.at, kind=EventKind.STALLED, message=msg, data=data)
        if self.state not in RUNNING_STATES:  # no row came: the run ended (or restarts)
            msg = f"run {self.name} ({self.run_id}) {self.state}: no longer a stall"
            return Event(at=self.at, kind=EventKind.CADENCE_RESUMED, message=msg, data=data)
        msg = f"run {self.name} ({self.run_id}) logging again"
        return Event(at=self.at, kind=EventKind.CADENCE_RESUMED, message=msg, data=data)


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
        source_deadline_s: float | None = None,
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
        self._metrics: list[RunMetrics] = []
        self.errors: dict[str, str] = {}
        # With a deadline each source is read in a thread of its own: one that hangs (a W&B
        # server that is slow or down, a stuck mount) is reported stale after the deadline
        # instead of holding up the others and the poll; it is not read again until its
        # previous read has returned (sources are not re-entrant), and a read that returns
        # late is used by the next poll (a server slower than the deadline still shows).
        self.source_deadline_s = source_deadline_s
        # kind -> (our clock, monotonic) when its read started, and the read
        self._inflight: dict[int, tuple[float, float, Future[list[RunObservation]]]] = {}
        self._lock = threading.Lock()  # state
        self._poll_lock = threading.Lock()  # one poll at a time

    async def apoll(self) -> list[RunCadence]:
        # A daemon thread, not the loop's pool: a read that never returns (a hung mount, a
        # FIFO) must not hold the process at exit, which joins the pool's threads.
        return await asyncio.wrap_future(in_daemon_thread(self.poll))

    def poll(self) -> list[RunCadence]:
        with self._poll_lock:
            failing: set[str] = set()
            for source, started, read in self._read_all():
                try:
                    observations = read()
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
            metrics = [
                m
                for source in self.sources
                if source.kind not in failing and hasattr(source, "metrics")
                for m in source.metrics()
            ]
            now = self._clock()
            with self._lock:
                self._metrics = metrics
                self._latest = self._compute(now, failing)
                return list(self._latest)

    def _read_all(
        self,
    ) -> list[tuple[CadenceSource, float, Callable[[], list[RunObservation]]]]:
        """Each source with when its read started and a call that gives its rows or raises
        (``SourceLate`` past the deadline)."""
        if self.source_deadline_s is None:
            return [(s, self._clock(), s.poll) for s in self.sources]
        deadline = self.source_deadline_s
        started = self._clock()
        end = time.monotonic() + deadline
        pending = []
        for i, source in enumerate(self.sources):
            busy = self._inflight.get(i)
            if busy is None:  # else a read that overran an earlier poll: its rows, when done
                busy = (started, time.monotonic(), in_daemon_thread(source.poll))
                self._inflight[i] = busy
            pending.append((i, source, *busy))
        out: list[tuple[CadenceSource, float, Callable[[], list[RunObservation]]]] = []
        for i, source, began, began_mono, future in pending:
            try:
                future.result(timeout=max(0.0, end - time.monotonic()))
            except FutureTimeout:
                waited = time.monotonic() - began_mono
                why = SourceLate(f"{source.kind} cadence: no answer for {waited:.0f}s")
                out.append((source, began, functools.partial(_raise, why)))
                continue
            except Exception:
                pass  # raised again by .result below, in the caller's try
            self._inflight.pop(i, None)
            out.append((source, began, functools.partial(future.result, None)))
        return out

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
            if st.state not in RUNNING_STATES and obs.state in RUNNING_STATES and st.points:
                # Running again (a restarted workload): its silence counts from now, not
                # from its last row before the restart.
                st.anchor = max(st.anchor if st.anchor is not None else seen_at, seen_at)
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
            if st.source in failing:
                # Hold the last verdict while blind, and say the numbers are not current.
                cad = replace(cad, stalled=st.stalled, stale=self.errors.get(st.source, ""))
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
                        state=st.state,
                    )
                )
                st.stalled = cad.stalled
            out.append(cad)
        sources_with_runs = {st.source for st in self._runs.values()}
        for kind in sorted(failing - sources_with_runs):
            out.append(stale_entry(kind, "", self.errors.get(kind, "")))
        out.sort(key=lambda c: (c.source, c.name, c.run_id))
        return out

    def take_transitions(self) -> list[StallTransition]:
        with self._lock:
            out, self._transitions = self._transitions, []
        return out

    def metrics(self) -> list[RunMetrics]:
        """Metric values of the sources that keep them (TensorBoard), from the last poll."""
        with self._lock:
            return list(self._metrics)

    def latest(self) -> list[RunCadence]:
        """The values from the last poll (no I/O)."""
        with self._lock:
            return list(self._latest)


class SourceLate(CadenceSourceError):
    """A source did not answer within the tracker's deadline (it is still being read)."""


def _raise(exc: Exception) -> list[RunObservation]:
    raise exc


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
                base_url=wandb_cfg.base_url or None,
                api_key_env=wandb_cfg.api_key_env,
                lag_s=wandb_cfg.online_lag_s,
                environ=environ,
            )
        )
    return sources
