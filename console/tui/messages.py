"""Published updates as Textual messages, and the bridge that posts them.

Services call their subscribers from any thread or loop; ``UpdateBridge`` turns each update
into a ``Message`` and posts it with ``post_message`` (thread-safe). High-rate kinds
collapse instead of queueing: a newer pod snapshot supersedes an older one still waiting
(``can_replace``), and log lines go into a ``LogInbox`` with a single doorbell message
outstanding, so 10,000 lines/s cost one message per frame, not 10,000.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

from textual.message import Message
from textual.message_pump import MessagePump

from console.services.model import (
    Event,
    JobInfo,
    LogLine,
    LogStreamClosed,
    PodSnapshot,
    RecoveryStatus,
    RunCadence,
    RunMetrics,
    Update,
)


@dataclass
class PodUpdated(Message):
    """A new pod snapshot; a newer one waiting in the queue supersedes this one."""

    snapshot: PodSnapshot

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, PodUpdated)


@dataclass
class RecoveryUpdated(Message):
    status: RecoveryStatus

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, RecoveryUpdated)


@dataclass
class JobUpdated(Message):
    job: JobInfo

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, JobUpdated) and message.job.job_id == self.job.job_id


@dataclass
class CadenceUpdated(Message):
    run: RunCadence

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, CadenceUpdated) and message.run.run_id == self.run.run_id


@dataclass
class MetricsUpdated(Message):
    """A run's metric series (the newest supersedes a waiting one of the same run)."""

    metrics: RunMetrics

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, MetricsUpdated) and message.metrics.run_id == self.metrics.run_id


@dataclass
class EventLogged(Message):
    """A journal row, as stored (never collapsed: every event is kept)."""

    event: Event


@dataclass
class LogsArrived(Message):
    """Doorbell: lines are waiting in the app's ``LogInbox``; drain them all."""

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, LogsArrived)


@dataclass
class LogClosed(Message):
    closed: LogStreamClosed


class LogInbox:
    """Lines from any thread, drained in batches on the UI loop.

    ``put`` returns True only for the first line after a drain: the caller then posts one
    ``LogsArrived``. ``cap`` bounds memory if the UI stalls; the oldest lines go first,
    which the per-job ring buffers would have dropped anyway (``dropped`` counts them).
    """

    def __init__(self, cap: int = 200_000) -> None:
        self._lock = threading.Lock()
        self._items: list[LogLine] = []
        self._armed = False
        self.cap = cap
        self.dropped = 0

    def put(self, line: LogLine) -> bool:
        with self._lock:
            self._items.append(line)
            if len(self._items) > self.cap:
                extra = len(self._items) - self.cap
                del self._items[:extra]
                self.dropped += extra
            if self._armed:
                return False
            self._armed = True
            return True

    def drain(self) -> list[LogLine]:
        with self._lock:
            items, self._items = self._items, []
            self._armed = False
            return items


class LatestPod:
    """The newest pod snapshot not yet applied, and one doorbell for it.

    Snapshots supersede each other, but Textual collapses only *adjacent* queued messages,
    and at 10k log lines/s a ``LogsArrived`` sits between any two ``PodUpdated``: a UI that
    fell behind applied every queued snapshot of 10,000 hosts in turn (a backlog of 300 ms
    measured by ``python -m benchmarks.tui``). Here the handler takes the newest, once.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._snapshot: PodSnapshot | None = None
        self.superseded = 0  # snapshots replaced before the UI took them

    def put(self, snapshot: PodSnapshot) -> bool:
        """Keep ``snapshot``; True when no doorbell is pending (post one)."""
        with self._lock:
            pending = self._snapshot is not None
            self.superseded += pending
            self._snapshot = snapshot
            return not pending

    def take(self) -> PodSnapshot | None:
        with self._lock:
            snapshot, self._snapshot = self._snapshot, None
            return snapshot


class UpdateBridge:
    """The services' subscriber: each ``Update`` becomes a message posted to ``target``.

    ``skip_line(job_id)`` drops bus log lines of a job the app already follows through
    ``follow_logs`` (the same lines would otherwise show twice).
    """

    def __init__(
        self,
        target: MessagePump,
        inbox: LogInbox,
        skip_line: Callable[[str], bool] = lambda job_id: False,
        pods: LatestPod | None = None,
    ) -> None:
        self._target = target
        self._inbox = inbox
        self._skip_line = skip_line
        self._pods = pods

    def __call__(self, update: Update) -> None:
        if isinstance(update, LogLine):
            if not self._skip_line(update.job_id) and self._inbox.put(update):
                self._target.post_message(LogsArrived())
            return
        if self._pods is not None and isinstance(update, PodSnapshot):
            if self._pods.put(update):
                self._target.post_message(PodUpdated(update))
            return
        message = to_message(update)
        if message is not None:
            self._target.post_message(message)


def to_message(update: Update) -> Message | None:
    if isinstance(update, PodSnapshot):
        return PodUpdated(update)
    if isinstance(update, RecoveryStatus):
        return RecoveryUpdated(update)
    if isinstance(update, JobInfo):
        return JobUpdated(update)
    if isinstance(update, RunCadence):
        return CadenceUpdated(update)
    if isinstance(update, RunMetrics):
        return MetricsUpdated(update)
    if isinstance(update, Event):
        return EventLogged(update)
    if isinstance(update, LogStreamClosed):
        return LogClosed(update)
    return None


# A fleet: every cluster's updates, for the Fleet screen's rows ---------------------------


@dataclass
class ClusterPolled(Message):
    """Doorbell: ``cluster`` published a pod snapshot, the watchdog's status or cadence;
    the handler reads its services' latest (no I/O). One is outstanding per cluster."""

    cluster: str


@dataclass
class ClusterRecorded(Message):
    """A journal row or a job of ``cluster`` (every one kept: they are counted)."""

    cluster: str
    update: Event | JobInfo


class ClusterBridge:
    """One cluster's subscriber in a fleet: what its Fleet row shows, posted to ``target``.

    Snapshots collapse to one doorbell per cluster until the app rings it off
    (``answered``): ten clusters of 256 hosts polling cost one message per cluster per
    frame, not one per snapshot. Log lines are the current cluster's alone (its own
    ``UpdateBridge``)."""

    def __init__(self, target: MessagePump, cluster: str) -> None:
        self._target = target
        self.cluster = cluster
        self._lock = threading.Lock()
        self._armed = False

    def __call__(self, update: Update) -> None:
        if isinstance(update, PodSnapshot | RecoveryStatus | RunCadence):
            with self._lock:
                if self._armed:
                    return
                self._armed = True
            self._target.post_message(ClusterPolled(self.cluster))
        elif isinstance(update, Event | JobInfo):
            self._target.post_message(ClusterRecorded(self.cluster, update))

    def answered(self) -> None:
        """The app is reading the cluster's latest now: the next update rings again."""
        with self._lock:
            self._armed = False
