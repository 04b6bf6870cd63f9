"""The cluster as observed: node and host states, pods and workloads (GKE), and the
snapshot a poll publishes."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from functools import cached_property
from operator import attrgetter

from console.services.model.jobs import JobStatus


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
    # Pods of the current attempt that exited 0: the program is ending (the processes of one
    # JAX program end together), so its metrics stop without it being stalled.
    pods_succeeded: int = 0
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
