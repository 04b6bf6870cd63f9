"""Typed, immutable data the services publish and the front ends (TUI, --script) consume.

Data flows one way: services poll or stream the cluster and publish these values on an
``UpdateBus``; the TUI turns them into Textual messages, ``--script`` into JSON lines.
Times are epoch seconds (float) taken from an injected clock, never read at render time.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from functools import cached_property
from operator import attrgetter
from typing import Any

log = logging.getLogger(__name__)


class HostState(StrEnum):
    """A node's or host's TPU-level state: ``google.cloud.tpu_v2.Node.State`` names, plus
    NOT_FOUND (ours: the node does not exist) and UNKNOWN (the API did not answer)."""

    CREATING = "CREATING"
    READY = "READY"
    RESTARTING = "RESTARTING"
    REIMAGING = "REIMAGING"
    REPAIRING = "REPAIRING"
    STARTING = "STARTING"
    STOPPING = "STOPPING"
    STOPPED = "STOPPED"
    PREEMPTING = "PREEMPTING"  # ours: the VM got its preemption notice and is shutting down
    PREEMPTED = "PREEMPTED"
    TERMINATED = "TERMINATED"
    DELETING = "DELETING"
    DELETED = "DELETED"
    HIDING = "HIDING"
    HIDDEN = "HIDDEN"
    UNHIDING = "UNHIDING"
    NOT_FOUND = "NOT_FOUND"
    UNKNOWN = "UNKNOWN"

    @classmethod
    def of(cls, name: str) -> HostState:
        """The state an API names; UNKNOWN for one this console does not know (a newer API
        version's), rather than an error in the middle of a poll."""
        try:
            return cls(name)
        except ValueError:
            return cls.UNKNOWN


# What the states mean to recovery: the VM is gone (recreate it), or it is on its way up.
LOST_STATES = frozenset(
    {HostState.PREEMPTED, HostState.TERMINATED, HostState.DELETED, HostState.DELETING}
)
TRANSITIONAL_STATES = frozenset(
    {HostState.CREATING, HostState.REPAIRING, HostState.RESTARTING, HostState.STARTING}
)


class JobStatus(StrEnum):
    """A job's status: Ray's ``JobStatus`` names, plus LOST (the cluster no longer knows
    the job: its head was replaced), PREEMPTED (Ray says FAILED, but the entrypoint exited
    with the engine's "preempted, resumable" code: it wrote a checkpoint on the preemption
    notice, and its resubmission resumes at the step it reached) and UNKNOWN (the jobs API
    could not be asked)."""

    PENDING = "PENDING"
    RUNNING = "RUNNING"
    STOPPED = "STOPPED"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    PREEMPTED = "PREEMPTED"
    LOST = "LOST"
    UNKNOWN = "UNKNOWN"

    @classmethod
    def of(cls, name: str) -> JobStatus:
        """The status a cluster names; UNKNOWN for one this console does not know."""
        try:
            return cls(name)
        except ValueError:
            return cls.UNKNOWN

    @property
    def active(self) -> bool:
        return self in ACTIVE_JOBS

    @property
    def terminal(self) -> bool:
        return self in TERMINAL_JOBS


ACTIVE_JOBS = frozenset({JobStatus.PENDING, JobStatus.RUNNING})
TERMINAL_JOBS = frozenset(
    {JobStatus.STOPPED, JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.PREEMPTED}
)


class SubmissionState(StrEnum):
    """Where this console's own record of a submission stands (not the cluster's status,
    which is a ``JobStatus``): recorded but not yet accepted by the cluster, accepted, or
    withdrawn by a user's delete. The values are the journal's stored words."""

    PENDING = "pending"
    SUBMITTED = "submitted"
    DELETED = "deleted"


class Reachability(StrEnum):
    """A host over SSH: answered, did not, or not asked yet."""

    OK = "ok"
    DOWN = "down"
    UNKNOWN = "unknown"


class RayState(StrEnum):
    """A host's Ray node as the head's GCS lists it; NONE ("-") when no node is known on
    the host's IP (Ray not started there, or no head to ask)."""

    ALIVE = "ALIVE"
    DEAD = "DEAD"
    NONE = "-"


@dataclass(frozen=True)
class HostStatus:
    index: int
    name: str
    ip: str
    tpu_state: HostState = HostState.UNKNOWN
    health: str = ""
    ray_state: RayState = RayState.NONE
    ray_nodes: int = 0  # Ray nodes on this IP (2+ is a duplicate: the seed's checklist)
    ssh: Reachability = Reachability.UNKNOWN
    resources: Mapping[str, float] = field(default_factory=dict)
    last_seen: float | None = None  # last time SSH or Ray saw it alive
    pool: str = ""  # GKE: the node pool (one TPU slice) the node belongs to


@dataclass(frozen=True)
class PodStatus:
    """One Kubernetes pod, as `kubectl get pods` shows it (GKE backend).

    ``status`` is kubectl's STATUS column (Running, Pending, ContainerCreating, Terminating,
    Completed, Error, CrashLoopBackOff, ...); ``ready`` its READY column ("8/8"). Times are
    epoch seconds: a screen computes AGE from ``created_at`` with its own clock.
    """

    name: str
    phase: str  # Pending / Running / Succeeded / Failed / Unknown
    status: str
    ready: str = "0/0"
    restarts: int = 0
    node: str = ""
    created_at: float | None = None
    workload: str = ""  # the JobSet (or Job) it belongs to
    replicated_job: str = ""  # jobset.sigs.k8s.io/replicatedjob-name
    job_index: int = 0  # the replicated job's index (the slice, for xpk workloads)
    completion_index: int = 0  # the worker within its job
    restart_attempt: int = 0  # jobset.sigs.k8s.io/restart-attempt
    ip: str = ""
    message: str = ""  # why it is not running: a waiting reason, the scheduler, a disruption
    disrupted: bool = False  # DisruptionTarget=True: the node is being preempted
    containers: tuple[str, ...] = ()  # container names, for `logs -c`
    # Why it failed, as its status says (a PodFailure; "" while it has not), the exit code
    # of the container that did, and whether the workload retries it (in place or by a
    # restart of its JobSet; None: unknown). ``failed_at`` dates the failure.
    failure: str = ""
    exit_code: int | None = None
    restartable: bool | None = None
    failed_at: float | None = None
    uid: str = ""


class PodFailure(StrEnum):
    """A pod's failure by the cause its status gives (GKE)."""

    CRASH = "crash"  # a container terminated with a non-zero exit code
    OOM_KILLED = "oom_killed"  # terminated, reason OOMKilled
    EVICTED = "evicted"  # status.reason Evicted, or DisruptionTarget by eviction/preemption
    NODE_FAILURE = "node_failure"  # its node died (DeletionByPodGC / DeletionByTaintManager)
    PREEMPTED = "preempted"  # its node shut down for a spot reclaim (TerminationByKubelet)


@dataclass(frozen=True)
class WorkloadStatus:
    """One workload (an xpk JobSet, or a conversion Job), as `kubectl get jobset` shows it
    (TERMINALSTATE RESTARTS COMPLETED SUSPENDED AGE), plus what recovery needs to know."""

    name: str
    status: JobStatus  # PENDING / RUNNING / SUCCEEDED / FAILED / STOPPED
    kind: str = "JobSet"  # or "Job" (the HF <-> MaxText conversion)
    template: str = ""  # standard / pathways / convert; "" when this console did not create it
    terminal_state: str = ""  # Completed / Failed (the JobSet's status.terminalState)
    restarts: int = 0
    completed: str = ""  # the Completed condition's status ("True", "False" or "")
    suspended: bool = False
    created_at: float | None = None
    pods_total: int = 0
    pods_running: int = 0
    pods_pending: int = 0
    unschedulable: int = 0  # Pending pods the scheduler cannot place
    unschedulable_since: float | None = None
    scheduler_message: str = ""  # the latest FailedScheduling message
    disrupted: int = 0  # pods with DisruptionTarget (their node is going away)
    worker_replacements: int = 0  # Pathways workers replaced while restarts stayed put
    head_failed: str = ""  # Pathways head (or coordinator) failing: its reason, else ""
    failed_reason: str = ""  # e.g. ReachedMaxRestarts
    message: str = ""
    owned: bool = False  # created by this console (it resubmits it when it fails)
    # Pods of an earlier attempt stuck Terminating past their grace, their containers gone,
    # held by finalizers: each "pod (finalizer, ...)". A JobSet cannot recreate its Jobs
    # until they go (the recovery's "release" step takes their finalizers off).
    held: tuple[str, ...] = ()
    run_name: str = ""
    console_url: str = ""  # Cloud Console workload page (shown, never opened)
    logs_url: str = ""  # Cloud Logging query of the coordinator's logs

    def __post_init__(self) -> None:
        if not isinstance(self.status, JobStatus):  # read back from JSON
            object.__setattr__(self, "status", JobStatus.of(str(self.status)))


_RAY_STATE = attrgetter("ray_state")
_TPU_STATE = attrgetter("tpu_state")


@dataclass(frozen=True)
class PodSnapshot:
    at: float
    provider: str
    node_name: str
    accelerator_type: str = ""
    tpu_state: HostState = HostState.UNKNOWN
    health: str = ""
    hosts: tuple[HostStatus, ...] = ()
    tunnel_up: bool = False
    dashboard_url: str = ""
    warnings: tuple[str, ...] = ()
    pods: tuple[PodStatus, ...] = ()  # GKE: the namespace's pods
    workloads: tuple[WorkloadStatus, ...] = ()  # GKE: JobSets and conversion Jobs
    zone: str = ""  # the zone the node was found in (a failover moves it)

    # Counted once per snapshot (a snapshot never changes), in C (list.count): the status
    # bar and the overview ask on each update, and a generator over 10,000 hosts cost
    # 1.6 ms a pass (0.4 ms now), six passes an update: close to half the TUI's time under
    # a pod changing 20 times a second (benchmarks/tui.py).
    @cached_property
    def ray_alive(self) -> int:
        return list(map(_RAY_STATE, self.hosts)).count(RayState.ALIVE)

    @cached_property
    def ready_hosts(self) -> int:
        return list(map(_TPU_STATE, self.hosts)).count(HostState.READY)


@dataclass(frozen=True)
class HostResult:
    """One host's share of a fan-out action."""

    host: str
    ok: bool
    exit_status: int | None = None
    elapsed_s: float = 0.0
    stdout_tail: str = ""
    stderr_tail: str = ""
    error: str = ""  # a one-line reason when not ok (timeout, refused, host key mismatch...)


class Verdict(StrEnum):
    OK = "ok"
    REFUSED = "refused"  # nothing was run
    FAILED = "failed"  # it ran and did not reach its goal


class Reason(StrEnum):
    """Why a call ended as it did: a front end acts on this, never on the message's words."""

    DONE = "done"
    UNKNOWN_ACTION = "unknown_action"
    BAD_INPUT = "bad_input"  # an argument missing, of the wrong type or out of range
    BAD_CONFIG = "bad_config"  # the config, found wrong only when the services were built
    UNSUPPORTED = "unsupported"  # this cluster's backend cannot (its capabilities)
    NOT_ALLOWED = "not_allowed"  # this front end was not allowed to act (MCP's --allow)
    STEP_FAILED = "step_failed"  # the action ran and failed (the service said why)
    ERROR = "error"  # an unexpected error


# Reasons for which nothing was run: the call was refused, not failed.
REFUSALS = frozenset(
    {
        Reason.UNKNOWN_ACTION,
        Reason.BAD_INPUT,
        Reason.BAD_CONFIG,
        Reason.UNSUPPORTED,
        Reason.NOT_ALLOWED,
    }
)


@dataclass(frozen=True)
class ActionResult:
    """What became of one action, the same for every front end (TUI, script, watch, MCP):
    ``verdict`` ok, refused or failed, ``reason`` why (what a front end acts on), ``message``
    the sentence for people; a fan-out's ``per_host`` results and ``data`` (JSON-able; also a
    failed one's partial result)."""

    action: str
    ok: bool
    elapsed_s: float = 0.0
    per_host: Mapping[str, HostResult] = field(default_factory=dict)
    message: str = ""
    data: Mapping[str, Any] = field(default_factory=dict)
    reason: Reason = Reason.DONE
    """DONE when ok; a failure given no reason is STEP_FAILED (the service said why)."""

    def __post_init__(self) -> None:
        reason = Reason(self.reason)
        if not self.ok and reason is Reason.DONE:
            reason = Reason.STEP_FAILED
        elif self.ok and reason is not Reason.DONE:
            raise ValueError(f"{self.action}: an ok result has reason done, not {reason}")
        object.__setattr__(self, "reason", reason)

    @property
    def verdict(self) -> Verdict:
        if self.ok:
            return Verdict.OK
        return Verdict.REFUSED if self.reason in REFUSALS else Verdict.FAILED

    @classmethod
    def done(cls, action: str, message: str, data: Mapping[str, Any]) -> ActionResult:
        return cls(action, True, message=message, data=data)

    @classmethod
    def refused(
        cls, action: str, reason: Reason, message: str, data: Mapping[str, Any] | None = None
    ) -> ActionResult:
        if reason not in REFUSALS:
            raise ValueError(f"{action}: {reason} is not a refusal")
        return cls(action, False, message=message, data=data or {}, reason=reason)

    @classmethod
    def failed(
        cls, action: str, reason: Reason, message: str, data: Mapping[str, Any] | None = None
    ) -> ActionResult:
        if reason in REFUSALS or reason is Reason.DONE:
            raise ValueError(f"{action}: {reason} is not a failure")
        return cls(action, False, message=message, data=data or {}, reason=reason)


@dataclass(frozen=True)
class JobInfo:
    job_id: str
    status: JobStatus
    entrypoint: str = ""
    start_time: float | None = None
    end_time: float | None = None
    message: str = ""
    metadata: Mapping[str, str] = field(default_factory=dict)
    # The job's runtime env vars as the cluster reports them, secret values masked.
    env: Mapping[str, str] = field(default_factory=dict)
    # What the console expected in ``env`` and did not find (empty: nothing amiss).
    env_problems: tuple[str, ...] = ()
    # Its resubmission chain (``jobs.budget``): ended with an error, in a row, and preempted.
    errors_in_row: int = 0
    preemptions: int = 0
    # A sweep this console submitted: its id (the spec's, or learned from the job) and, on
    # the W&B backend, its page on the W&B server ("" when unknown).
    sweep_id: str = ""
    sweep_url: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.status, JobStatus):  # read back from JSON (journal, jobs.json)
            object.__setattr__(self, "status", JobStatus.of(str(self.status)))


@dataclass(frozen=True)
class LogLine:
    job_id: str
    text: str
    at: float


@dataclass(frozen=True)
class LogStreamClosed:
    """The log stream ended. ``job_status`` says whether the job really finished.

    Besides Ray's statuses it can be LOST (the job is gone with its head) or UNKNOWN (the
    dashboard is unreachable, so the job may well run on).
    """

    job_id: str
    job_status: JobStatus
    at: float

    def __post_init__(self) -> None:
        if not isinstance(self.job_status, JobStatus):
            object.__setattr__(self, "job_status", JobStatus.of(str(self.job_status)))

    @property
    def early(self) -> bool:
        return self.job_status in (*ACTIVE_JOBS, JobStatus.UNKNOWN)


class CadenceVerdict(StrEnum):
    """What a run's cadence says: ``ok`` (logging at its usual pace, or not running),
    ``stalled`` (running and silent past the rule in ``cadence.rules``), ``stale`` (its
    source did not answer in time or could not be read: the numbers are not current)."""

    OK = "ok"
    STALLED = "stalled"
    STALE = "stale"


@dataclass(frozen=True)
class RunCadence:
    run_id: str
    name: str
    source: str  # "offline", "online" or "tensorboard"
    last_step: int | None
    last_at: float | None
    seconds_since: float | None
    median_interval_s: float | None
    steps_per_min: float | None
    recent_intervals: tuple[float, ...] = ()
    stalled: bool = False
    state: str = ""  # running / finished / crashed when known
    job: str = ""  # the console's job or workload the run belongs to, when known
    stale: str = ""  # why these numbers are not current (empty: they are)
    # Derived from ``stale`` and ``stalled`` (so ``replace`` cannot leave it behind).
    verdict: CadenceVerdict = field(init=False, default=CadenceVerdict.OK)

    def __post_init__(self) -> None:
        verdict = (
            CadenceVerdict.STALE
            if self.stale
            else CadenceVerdict.STALLED
            if self.stalled
            else CadenceVerdict.OK
        )
        object.__setattr__(self, "verdict", verdict)


@dataclass(frozen=True)
class RunMetrics:
    """A run's metric values for sparklines (GKE: the six Tunix metrics by their doc names,
    rewards/mean, score/mean, rollout_time, completions/mean_length, actor_dequeue_time,
    step_time_sec). ``series`` holds the newest (step, value) pairs per metric, one value per
    step (a step logged again after a restart keeps its newest value)."""

    run_id: str
    name: str
    series: Mapping[str, tuple[tuple[int, float], ...]] = field(default_factory=dict)
    last_step: int | None = None
    at: float | None = None  # the writer's time of the newest value


class EventKind(StrEnum):
    """What a journal row is about: the one list of the words, each made and matched by name.

    Rows read back from the journal carry the same words as plain strings, which compare
    equal (a StrEnum), so a reader matches ``event.kind == EventKind.PREEMPTED`` either way.
    """

    # a host or node, as detection sees it
    PREEMPTION_NOTICE = "preemption_notice"
    PREEMPTED = "preempted"
    HOST_LOST = "host_lost"
    HOST_UNREACHABLE = "host_unreachable"
    HOST_UNKNOWN = "host_unknown"
    NOT_READY = "not_ready"
    SSH_DOWN = "ssh_down"
    RAY_NODE_DOWN = "ray_node_down"
    DUPLICATE_RAY_NODE = "duplicate_ray_node"
    STATE_CHANGE = "state_change"  # a slice's nodes changed TPU state (GKE)
    HEAD_LOST = "head_lost"
    TUNNEL_UP = "tunnel_up"
    TUNNEL_DOWN = "tunnel_down"
    HOST_KEY = "host_key"
    CAPACITY = "capacity"  # one try for TPU capacity (a zone, an attempt, its reason)
    # GKE workloads
    QUOTA_PENDING = "quota_pending"
    JOBSET_RESTARTED = "jobset_restarted"
    JOBSET_FAILED = "jobset_failed"
    WORKER_REPLACED = "worker_replaced"
    HEAD_FAILED = "head_failed"
    # a GKE pod failed, by the cause its status gives (node failure and spot preemption
    # are the slice's rows: host_lost and preempted / state_change)
    POD_CRASHED = "pod_crashed"  # a container exited non-zero (data: exit_code, restartable)
    POD_OOM_KILLED = "pod_oom_killed"  # the kernel's OOM killer (OOMKilled, exit 137)
    POD_EVICTED = "pod_evicted"  # the kubelet or the API evicted it (or a higher priority)
    # jobs and their metrics
    JOB_STATE = "job_state"
    JOB_ENV = "job_env"
    JOB_RESUBMITTED = "job_resubmitted"
    STALLED = "stalled"
    CADENCE_RESUMED = "cadence_resumed"
    # recovery
    RECOVERY_REQUESTED = "recovery_requested"
    RECOVERY_STARTED = "recovery_started"
    RECOVERED = "recovered"
    RECOVERY_FAILED = "recovery_failed"
    WATCHDOG = "watchdog"
    INCIDENT = "incident"  # one preemption and its recovery, summed up
    # what was done, and told
    RETRY_BUDGET_SPENT = "retry_budget_spent"  # a resubmission the retry budget stopped
    NOTICE_NOT_HONOURED = "notice_not_honoured"  # a notice no checkpoint followed
    ACTION = "action"
    ALERT = "alert"


class IncidentCause(StrEnum):
    """What an incident was, from the row that opened it (its summary's ``cause``)."""

    PREEMPTION = "preemption"  # a notice, a VM or a slice reclaimed
    NODE_FAILURE = "node_failure"  # a host lost, a worker replaced
    HEAD_LOSS = "head_loss"  # the head host gone, the cluster with it
    CRASH = "crash"  # a workload's head or JobSet failed, a container exited non-zero
    OOM_KILLED = "oom_killed"  # a container killed by the OOM killer
    EVICTION = "eviction"  # a pod evicted (node pressure, the eviction API, a higher priority)
    RAY_FAILURE = "ray_failure"  # a Ray node down or doubled on one host
    UNREACHABLE = "unreachable"  # SSH or the host out of reach
    STALL = "stall"  # metrics stopped arriving
    REQUESTED = "requested"  # a recovery someone asked for, nothing seen lost
    OTHER = "other"


class IncidentOutcome(StrEnum):
    """How an incident ended (its summary's ``outcome``; ``failed_step`` says where a
    failed one stopped)."""

    RECOVERING = "recovering"
    NO_RECOVERY = "no recovery"  # trouble no recovery followed (yet)
    RECOVERED = "recovered"
    NOTHING_TO_RECOVER = "nothing to recover"
    FAILED = "failed"


# The row that opened an incident -> what the incident was (``IncidentCause.OTHER`` else; a
# TPU state change counts as a preemption when it went to PREEMPTED, the only one that opens).
CAUSE_OF_KIND: Mapping[str, IncidentCause] = {
    EventKind.PREEMPTION_NOTICE: IncidentCause.PREEMPTION,
    EventKind.PREEMPTED: IncidentCause.PREEMPTION,
    EventKind.STATE_CHANGE: IncidentCause.PREEMPTION,
    EventKind.HOST_LOST: IncidentCause.NODE_FAILURE,
    EventKind.WORKER_REPLACED: IncidentCause.NODE_FAILURE,
    EventKind.HEAD_LOST: IncidentCause.HEAD_LOSS,
    EventKind.HEAD_FAILED: IncidentCause.CRASH,
    EventKind.JOBSET_FAILED: IncidentCause.CRASH,
    EventKind.POD_CRASHED: IncidentCause.CRASH,
    EventKind.POD_OOM_KILLED: IncidentCause.OOM_KILLED,
    EventKind.POD_EVICTED: IncidentCause.EVICTION,
    EventKind.RAY_NODE_DOWN: IncidentCause.RAY_FAILURE,
    EventKind.DUPLICATE_RAY_NODE: IncidentCause.RAY_FAILURE,
    EventKind.HOST_UNREACHABLE: IncidentCause.UNREACHABLE,
    EventKind.SSH_DOWN: IncidentCause.UNREACHABLE,
    EventKind.STALLED: IncidentCause.STALL,
    EventKind.RECOVERY_STARTED: IncidentCause.REQUESTED,
}


@dataclass(frozen=True)
class Event:
    """A journal row: something observed or done. ``actor`` is who started an action."""

    at: float
    kind: str  # an EventKind (a plain str when read back from the journal)
    message: str
    host: str = ""
    actor: str = ""
    data: Mapping[str, Any] = field(default_factory=dict)
    id: int | None = None

    def to_json(self) -> dict[str, Any]:
        out = {"kind": self.kind, "host": self.host, "at": self.at, "message": self.message}
        if self.actor:
            out["actor"] = self.actor
        out.update(self.data)
        return out


class StepState(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    OK = "ok"
    FAILED = "failed"
    SKIPPED = "skipped"  # not needed this time (e.g. no host to recreate) — shown, never silent


@dataclass(frozen=True)
class RecoveryStep:
    name: str
    state: str = StepState.PENDING
    started_at: float | None = None
    elapsed_s: float = 0.0
    attempts: int = 0
    hosts: Mapping[str, str] = field(default_factory=dict)  # host -> pending/running/ok/failed
    message: str = ""


class RecoveryOutcome(StrEnum):
    """How a recovery ended (``RecoveryStatus.outcome``; None while one runs, or before any)."""

    OK = "ok"
    FAILED = "failed"  # ``failed_step`` says where ("cancelled": it was cancelled)
    INTERRUPTED = "interrupted"  # its process stopped; the next one to watch finishes it


@dataclass(frozen=True)
class RecoveryStatus:
    active: bool
    auto: bool
    steps: tuple[RecoveryStep, ...] = ()
    trigger: str = ""
    started_at: float | None = None
    detected_at: float | None = None
    detect_s: float | None = None
    mttr_s: float | None = None
    outcome: RecoveryOutcome | None = None  # None while running / never run
    failed_step: str = ""  # a failed one: the step it stopped at
    owner: str = ""  # who runs recovery for this pod when it is another process ("pid 7 on h")

    @property
    def ok(self) -> bool:
        return self.outcome is RecoveryOutcome.OK

    @property
    def result_text(self) -> str:
        """The outcome for people: "ok", "failed: <step>" or "interrupted" ("" while one runs
        or before any). Shown, never parsed: decisions read ``outcome``."""
        if self.outcome is RecoveryOutcome.FAILED:
            return f"failed: {self.failed_step or '?'}"
        return "" if self.outcome is None else str(self.outcome)


@dataclass(frozen=True)
class Progress:
    """A step of the services coming up, before there is a journal to write to: shown, never
    journaled (an ``Event`` is a journal row, and every one enters through the sink)."""

    at: float
    message: str


# The recovery's resubmit step: the job ids to run again -> the step's result (a backend
# makes it; the retry budget and the ended-job filter wrap it).
Resubmit = Callable[[Sequence[str]], Awaitable[ActionResult]]


Update = (
    PodSnapshot
    | JobInfo
    | LogLine
    | LogStreamClosed
    | RunCadence
    | RunMetrics
    | Event
    | RecoveryStatus
    | Progress
)


class UpdateBus:
    """Fan-out of published updates to subscribers (thread-safe, never blocks a publisher).

    The TUI subscribes with a callback that posts a Textual message; ``--script`` with one
    that writes a JSON line. A subscriber that raises is logged and kept; one bad front end
    cannot stall the services or the other subscribers.
    """

    def __init__(self) -> None:
        self._subs: list[Callable[[Update], None]] = []
        self._lock = threading.Lock()

    def subscribe(self, callback: Callable[[Update], None]) -> Callable[[], None]:
        with self._lock:
            self._subs.append(callback)

        def unsubscribe() -> None:
            with self._lock:
                if callback in self._subs:
                    self._subs.remove(callback)

        return unsubscribe

    def publish(self, update: Update) -> None:
        with self._lock:
            subs = list(self._subs)
        for cb in subs:
            try:
                cb(update)
            except Exception:  # a broken subscriber must not stop publishing to the others
                log.exception("update subscriber %r failed", cb)


def to_jsonable(value: Any) -> Any:
    """Dataclass/tuple/mapping tree -> plain JSON-able values (for --script and status)."""
    if hasattr(value, "__dataclass_fields__"):
        return to_jsonable(asdict(value))
    if isinstance(value, Mapping):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_jsonable(v) for v in value]
    if isinstance(value, StrEnum):
        return str(value)
    return value


def recovery_json(status: RecoveryStatus) -> dict[str, Any]:
    """``status`` as the script and ``status --json`` print it: its fields (``outcome``,
    ``failed_step``), and ``result``, the outcome in words for people."""
    out: dict[str, Any] = to_jsonable(status)
    out["result"] = status.result_text
    return out
