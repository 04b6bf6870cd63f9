"""Tunix metrics from TensorBoard event files: metric cadence and values, read incrementally.

Tunix writes its RL metrics with TensorBoard under ``{base_output_directory}/{run_name}/
tensorboard/``, one event file per process start. Its logger names each scalar
``<prefix>/<mode>/<name>`` (tunix/sft/metrics_logger.py; a metric without "/" gets the
prefix "global"), so the names the seed's doc uses map to these tags (the emulated trainer,
``emulators/gke/workload/grpo.py``, writes the same ones):

    rewards/mean            -> rewards/train/mean
    score/mean              -> rewards/train/score/mean
    completions/mean_length -> completions/train/mean_length
    actor_dequeue_time      -> global/train/actor_dequeue_time
    step_time_sec           -> perf/train/global_step_time
    rollout_time            -> perf/train/mean/rollout_time

Each file is read with tensorboard's own event-file loader, which keeps its position: a poll
costs what was appended since the last one, not the file's size. After a restart the
resumed run logs some steps again in a new file; (tag, step) keeps the newest value (by the
writer's wall time). Reading is blocking: ``TensorBoardSource.poll`` runs in the cadence
tracker's worker thread.
"""

from __future__ import annotations

import collections
import logging
import math
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from console.services.cadence.sources import RunObservation
from console.services.cadence.wandb_files import HistoryPoint
from console.services.model import JobStatus, RunMetrics

log = logging.getLogger(__name__)

DOC_TAGS: dict[str, str] = {
    "rewards/mean": "rewards/train/mean",
    "score/mean": "rewards/train/score/mean",
    "rollout_time": "perf/train/mean/rollout_time",
    "completions/mean_length": "completions/train/mean_length",
    "actor_dequeue_time": "global/train/actor_dequeue_time",
    "step_time_sec": "perf/train/global_step_time",
}
TAG_DOCS = {tag: doc for doc, tag in DOC_TAGS.items()}
SERIES_LEN = 120  # values per metric published for a sparkline
EVENT_FILE_MARK = "events.out.tfevents."
LAG_WINDOW = 50  # polls whose flush delays are remembered
MAX_FLUSH_LAG_S = 300.0  # beyond tensorboard's default flush period (120 s), with room
# Workload status -> the run state the cadence rule reads: only a running workload stalls.
# A running workload with a pod that exited 0 is finishing: no more steps come, none are due.
FINISHING = "finishing"
RUN_STATES: dict[str, str] = {
    JobStatus.RUNNING: "running",
    JobStatus.PENDING: "restarting",
    JobStatus.SUCCEEDED: "finished",
    JobStatus.FAILED: "failed",
    JobStatus.STOPPED: "killed",
}


@dataclass(frozen=True)
class TbRun:
    """A run to read: its workload (the run id), run name, TensorBoard dir and state."""

    run_id: str
    name: str
    logdir: str  # a local path, or a gs:// URI (tensorboard's gfile reads it through fsspec)
    state: str  # a workload status name (RUNNING, PENDING, SUCCEEDED ...)
    # Some pod of the current attempt exited 0: the run is at its end (its last steps logged,
    # the final save and exit under way) though the JobSet is not Completed yet.
    ending: bool = False


def _gfile() -> Any:
    from tensorboard.compat import tf  # lazy: tensorboard's import is not free

    return tf.io.gfile


def _loader_class() -> Any:
    from tensorboard.backend.event_processing.event_file_loader import LegacyEventFileLoader

    return LegacyEventFileLoader


def _loader(path: str) -> Any:
    return _loader_class()(path)


def _value(v: Any) -> float | None:
    if v.HasField("simple_value"):
        return float(v.simple_value)
    if v.HasField("tensor"):
        from tensorboard.util import tensor_util

        try:
            return float(tensor_util.make_ndarray(v.tensor).item())
        except (ValueError, TypeError):
            return None
    return None


class RunReader:
    """One run's event files; ``poll`` reads what was appended since the last call.

    ``flush_lag_s``: how long the newest steps stay unseen, as observed. A metrics logger
    buffers its events (tensorboard's writer flushes every ``flush_secs``, 120 s by default),
    so the steps of the last flush period are on no disk yet: a healthy run looks silent for
    up to that long, and the stall rule must allow it. Each poll after the first (the first
    reads the backlog) notes the span of writer time its new events cover: a flush brings a
    whole period's steps at once, so the span is the flush period, read on the writer's own
    clock (no skew to our clock enters). The longest of the recent ones is the lag, capped
    at ``MAX_FLUSH_LAG_S``."""

    def __init__(self, logdir: str) -> None:
        self.logdir = logdir
        self._loaders: dict[str, Any] = {}
        self.values: dict[str, dict[int, tuple[float, float]]] = {t: {} for t in TAG_DOCS}
        self.step_at: dict[int, float] = {}  # step -> newest wall time any tag logged it
        self.events_read = 0
        self._polls = 0
        self._spans: collections.deque[float] = collections.deque(maxlen=LAG_WINDOW)

    @property
    def flush_lag_s(self) -> float:
        return min(max(self._spans, default=0.0), MAX_FLUSH_LAG_S)

    def files(self) -> list[str]:
        gfile = _gfile()
        if not gfile.isdir(self.logdir):
            return []
        names = sorted(n for n in gfile.listdir(self.logdir) if EVENT_FILE_MARK in n)
        if "://" in self.logdir:
            return [f"{self.logdir.rstrip('/')}/{n}" for n in names]
        return [os.path.join(self.logdir, n) for n in names]

    def poll(self) -> list[HistoryPoint]:
        """Steps new (or logged again, later) since the last poll, oldest first."""
        fresh: dict[int, float] = {}
        oldest_new, newest_new = math.inf, -math.inf
        for path in self.files():
            loader = self._loaders.get(path)
            if loader is None:
                loader = self._loaders[path] = _loader(path)
            for event in loader.Load():
                self.events_read += 1
                if not event.HasField("summary"):
                    continue
                step, wall = int(event.step), float(event.wall_time)
                oldest_new, newest_new = min(oldest_new, wall), max(newest_new, wall)
                for v in event.summary.value:
                    series = self.values.get(v.tag)
                    if series is None:
                        continue
                    value = _value(v)
                    if value is None:
                        continue
                    old = series.get(step)
                    if old is None or wall >= old[0]:
                        series[step] = (wall, value)
                    if wall > self.step_at.get(step, float("-inf")):
                        self.step_at[step] = wall
                        fresh[step] = wall
        if self._polls and math.isfinite(oldest_new):
            self._spans.append(newest_new - oldest_new)
        self._polls += 1
        return sorted(
            (HistoryPoint(step=s, timestamp=t) for s, t in fresh.items()),
            key=lambda p: (p.timestamp, p.step),
        )

    def series(self, length: int = SERIES_LEN) -> dict[str, tuple[tuple[int, float], ...]]:
        out = {}
        for tag, values in self.values.items():
            steps = sorted(values)[-length:]
            out[TAG_DOCS[tag]] = tuple((s, values[s][1]) for s in steps)
        return out


class TensorBoardSource:
    """``CadenceSource`` over the TensorBoard dirs of the console's workloads, plus their
    metric values (``metrics``). ``runs`` is called from the polling thread: it must return
    an immutable snapshot."""

    kind = "tensorboard"

    def __init__(
        self,
        runs: Callable[[], Sequence[TbRun]],
        *,
        lag_s: float = 30.0,
    ) -> None:
        self._runs = runs
        self.lag_s = lag_s
        self._readers: dict[str, RunReader] = {}
        self._names: dict[str, str] = {}
        self._lock = threading.Lock()

    def poll(self) -> list[RunObservation]:
        out = []
        runs = list(self._runs())
        with self._lock:
            for gone in set(self._readers) - {r.run_id for r in runs}:
                del self._readers[gone]
        for run in runs:
            reader = self._readers.get(run.run_id)
            if reader is None or reader.logdir != run.logdir:
                reader = RunReader(run.logdir)
            try:
                points = reader.poll()
            except Exception as exc:  # an unreadable file must not hide the other runs
                log.warning("metrics of %s (%s): %s", run.run_id, run.logdir, exc)
                points = []
            with self._lock:
                self._readers[run.run_id] = reader
                self._names[run.run_id] = run.name
            # the configured lag, or the writer's own flush lag where it was seen longer
            out.append(_observe(run, points, max(self.lag_s, reader.flush_lag_s)))
        return out

    def prepare(self) -> None:
        """Import tensorboard's reader, so that a one-shot read's deadline measures the
        files, not our own start-up."""
        _gfile()
        _loader_class()

    def split(self) -> list[TbRunPart]:
        """One source per run, each with a fresh reader, for a one-shot read that gives every
        run its own deadline: a slow bucket or a hung mount then holds up only its run."""
        return [TbRunPart(run, lag_s=self.lag_s) for run in self._runs()]

    def metrics(self) -> list[RunMetrics]:
        with self._lock:
            readers = dict(self._readers)
            names = dict(self._names)
        out = []
        for run_id, reader in sorted(readers.items()):
            last = max(reader.step_at, default=None)
            out.append(
                RunMetrics(
                    run_id=run_id,
                    name=names.get(run_id, run_id),
                    series=reader.series(),
                    last_step=last,
                    at=reader.step_at.get(last) if last is not None else None,
                )
            )
        return out


class TbRunPart:
    """One run's TensorBoard dir as a source of its own; unlike ``TensorBoardSource`` it
    raises what stops it reading, so a one-shot read can say why the run is not current."""

    kind = TensorBoardSource.kind

    def __init__(self, run: TbRun, *, lag_s: float) -> None:
        self.run = run
        self.run_id = run.run_id
        self.lag_s = lag_s

    def poll(self) -> list[RunObservation]:
        return [_observe(self.run, RunReader(self.run.logdir).poll(), self.lag_s)]


def _observe(run: TbRun, points: Sequence[HistoryPoint], lag_s: float) -> RunObservation:
    return RunObservation(
        run_id=run.run_id,
        name=run.name,
        source=TensorBoardSource.kind,
        state=FINISHING
        if run.ending and run.state == JobStatus.RUNNING
        else RUN_STATES.get(run.state, ""),
        points=tuple(points),
        lag_s=lag_s,
    )
