"""What the console shows: the latest published data, held by the app, read by screens.

The app is the only writer (on its event loop); screens read it when they are shown or when
a kind they watch changes (``versions``). Logs live in per-job ring buffers so a job that
prints for days cannot grow the process: the view keeps a bounded window, like ``less``.
No Textual here: this is plain data plus the formatting helpers every screen shares.
"""

from __future__ import annotations

import itertools
import time
from collections import Counter, deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from console.commands.kit.told import duration
from console.services.ledger.book import Book
from console.services.ledger.fleet import FleetBook
from console.services.model import (
    Event,
    JobInfo,
    LogLine,
    LogStreamClosed,
    PodSnapshot,
    RecoveryStatus,
    RunCadence,
    RunMetrics,
)

DEFAULT_LOG_RING = 10_000
DEFAULT_EVENT_RING = 2_000


class LogRing:
    """The newest ``maxlen`` lines of one job, plus how many lines ever arrived.

    ``total`` is a sequence number: a view remembers the total it has shown and asks for
    ``since(seen)``, so it appends only new lines and knows when it fell off the ring.
    """

    def __init__(self, maxlen: int = DEFAULT_LOG_RING) -> None:
        self._lines: deque[str] = deque(maxlen=maxlen)
        self.total = 0

    def __len__(self) -> int:
        return len(self._lines)

    @property
    def maxlen(self) -> int:
        return self._lines.maxlen or 0

    def extend(self, texts: Sequence[str]) -> None:
        self._lines.extend(texts)
        self.total += len(texts)

    def lines(self) -> list[str]:
        return list(self._lines)

    def since(self, seen: int) -> tuple[list[str], bool]:
        """Lines after sequence number ``seen``; True when some were already dropped."""
        new = self.total - seen
        if new <= 0:
            return [], False
        if new > len(self._lines):
            return list(self._lines), True
        start = len(self._lines) - new
        return list(itertools.islice(self._lines, start, None)), False


def _event_key(event: Event) -> object:
    if event.id is not None:
        return event.id
    return (event.at, event.kind, event.host, event.message)


@dataclass
class ConsoleState:
    """Latest values per kind; ``versions[kind]`` bumps on every change of that kind."""

    log_ring: int = DEFAULT_LOG_RING
    event_ring: int = DEFAULT_EVENT_RING
    pod: PodSnapshot | None = None
    recovery: RecoveryStatus = field(default_factory=lambda: RecoveryStatus(False, True))
    jobs: dict[str, JobInfo] = field(default_factory=dict)
    jobs_note: str = ""  # why the jobs cannot be listed now (Ray not up), when they cannot
    logs: dict[str, LogRing] = field(default_factory=dict)
    closed: dict[str, LogStreamClosed] = field(default_factory=dict)
    runs: dict[str, RunCadence] = field(default_factory=dict)
    metrics: dict[str, RunMetrics] = field(default_factory=dict)  # by run id, as published
    events: deque[Event] = field(default_factory=deque)
    ledger: Book | None = None  # the journal's ledger, as of the last read (``ledger.book``)
    # A fleet of several: every cluster's ledger and their total (``ledger.fleet``)
    fleet_ledger: FleetBook | None = None
    versions: Counter[str] = field(default_factory=Counter)
    _event_keys: set[object] = field(default_factory=set)

    def bump(self, kind: str) -> None:
        self.versions[kind] += 1

    def set_ledger(self, book: Book, fleet: FleetBook | None = None) -> None:
        self.ledger = book
        self.fleet_ledger = fleet
        self.bump("ledger")

    def set_pod(self, snapshot: PodSnapshot) -> None:
        self.pod = snapshot
        self.bump("pod")

    def set_recovery(self, status: RecoveryStatus) -> None:
        self.recovery = status
        self.bump("recovery")

    def set_job(self, job: JobInfo) -> None:
        self.jobs[job.job_id] = job
        self.bump("jobs")

    def set_jobs_note(self, note: str) -> None:
        if note != self.jobs_note:
            self.jobs_note = note
            self.bump("jobs")

    def set_jobs(self, jobs: Iterable[JobInfo]) -> None:
        for job in jobs:
            self.jobs[job.job_id] = job
        self.bump("jobs")

    def set_run(self, run: RunCadence) -> None:
        self.runs[run.run_id] = run
        self.bump("cadence")

    def set_runs(self, runs: Iterable[RunCadence]) -> None:
        for run in runs:
            self.runs[run.run_id] = run
        self.bump("cadence")

    def set_metrics(self, metrics: RunMetrics) -> None:
        self.metrics[metrics.run_id] = metrics
        self.bump("metrics")

    def add_events(self, events: Iterable[Event]) -> int:
        added = 0
        for event in events:
            key = _event_key(event)
            if key in self._event_keys:
                continue
            if len(self.events) >= self.event_ring:
                self._event_keys.discard(_event_key(self.events.popleft()))
            self.events.append(event)
            self._event_keys.add(key)
            added += 1
        if added:
            self.bump("events")
        return added

    def ring(self, job_id: str) -> LogRing:
        ring = self.logs.get(job_id)
        if ring is None:
            ring = self.logs[job_id] = LogRing(self.log_ring)
        return ring

    def add_lines(self, lines: Sequence[LogLine]) -> set[str]:
        """Append lines to their jobs' rings; returns the jobs that got lines."""
        by_job: dict[str, list[str]] = {}
        for line in lines:
            by_job.setdefault(line.job_id, []).append(line.text)
        for job_id, texts in by_job.items():
            self.ring(job_id).extend(texts)
        if by_job:
            self.bump("logs")
        return set(by_job)

    def set_closed(self, closed: LogStreamClosed) -> None:
        self.closed[closed.job_id] = closed
        self.bump("logs")


# formatting ------------------------------------------------------------------------------


def ago(now: float, then: float | None) -> str:
    """Compact age for tables: 4s, 12m, 3h05m, 2d4h ("-" when never)."""
    if then is None:
        return "-"
    return duration(max(0.0, now - then), compact=True)


def clock_time(at: float | None) -> str:
    """Wall-clock time of day in the local zone (tests pin TZ=UTC)."""
    if at is None:
        return "--:--:--"
    return time.strftime("%H:%M:%S", time.localtime(at))


def middle_ellipsis(text: str, width: int) -> str:
    """``text`` whole when it fits in ``width``, else its start and end around "…": the end
    of a GKE node or pool name is what tells it apart from its neighbours."""
    if len(text) <= width:
        return text
    keep = width - 1
    return text[: (keep + 1) // 2] + "…" + text[len(text) - keep // 2 :]


def short_host(name: str, node_name: str) -> str:
    """`phantom-pod-w3` -> `w3`: the pod name is on the summary line already."""
    prefix = node_name + "-"
    return name[len(prefix) :] if node_name and name.startswith(prefix) else name


SPARK_BLOCKS = "▁▂▃▄▅▆▇█"


def spark(values: Sequence[float], width: int) -> str:
    """A text sparkline of the last ``width`` values (for table cells)."""
    data = list(values)[-width:]
    if not data:
        return ""
    lo, hi = min(data), max(data)
    span = hi - lo
    top = len(SPARK_BLOCKS) - 1
    return "".join(SPARK_BLOCKS[0 if span <= 0 else round((v - lo) / span * top)] for v in data)


def resources_text(resources: Mapping[str, float]) -> str:
    """{"TPU": 8, "CPU": 2} -> "TPU8 CPU2" (stable order: TPU, CPU, then by name)."""
    items = dict(resources)
    order = sorted(items, key=lambda k: (k != "TPU", k != "CPU", k))
    parts = []
    for key in order:
        value = items[key]
        number = int(value) if float(value).is_integer() else round(float(value), 1)
        parts.append(f"{key}{number}")
    return " ".join(parts)
