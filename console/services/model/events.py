"""Journal rows: event kinds, and what caused an incident and how it ended."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class EventKind(StrEnum):
    """What a journal row is about: the one list of the words, each made and matched by name.

    Rows read back from the journal carry the same words as plain strings, which compare
    equal (a StrEnum), so a reader matches ``event.kind == EventKind.PREEMPTED`` either way.
    """

    # a host or node, as detection sees it
    PREEMPTION_NOTICE = "preemption_notice"
    PREEMPTED = "preempted"
    # a host maintenance coming (metadata maintenance-event): a live migration, which the VM
    # survives (a terminating one is a notice), or its end
    MAINTENANCE = "maintenance"
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
    cluster: str = ""  # the fleet's name of the cluster it is about ('' in rows from before)

    def to_json(self) -> dict[str, Any]:
        out = {"kind": self.kind, "host": self.host, "at": self.at, "message": self.message}
        if self.actor:
            out["actor"] = self.actor
        out.update(self.data)
        return out
