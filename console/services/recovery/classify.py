"""Observation -> Diagnosis: what is wrong and where, as typed values. Pure, and no words:
``diagnosis`` is the one place the result is worded (for the screens, the journal and
``phantom status``).

Host conditions, from the layers of one poll:

* NOTICE: the VM got its preemption notice (its metadata says so, its processes have
  SIGTERM): it is still up, for its grace period, and then LOST;
* LOST: the TPU state says the VM is gone (PREEMPTED/TERMINATED/DELETED/DELETING);
* NOT_READY: the API says it is on its way up (CREATING, REPAIRING...);
* UNREACHABLE: READY, but SSH fails and no Ray node lives on it;
* SSH_DOWN: READY and its Ray node alive, but SSH fails (a hung sshd): shown, not recovered
  (its jobs run on; recreating the VM would kill them);
* RAY_DOWN: VM fine, no live Ray node on its IP (while the GCS answers);
* DUPLICATE: two or more live Ray nodes on one IP (the seed's checklist);
* UNKNOWN: the API did not answer for it.

LOST and NOTICE are hard (the provider says so); UNREACHABLE/RAY_DOWN/DUPLICATE are soft: they could be a
slow SSH handshake or a state query racing a registration, so auto recovery waits for them
to persist (``detector``).

On GKE the hosts are a TPU slice's nodes (``HostObservation.pool`` names the slice); the
workloads (JobSets) have conditions of their own:

* FAILED: a JobSet this console created is Failed (e.g. ReachedMaxRestarts): recovery
  resubmits it under the same run name, so it resumes from its checkpoints (hard);
* CAPACITY: its pods stayed unschedulable longer than ``Observation.capacity_wait_s``: no
  TPU capacity or quota; no step can fix that, so it is reported with the fix;
* HEAD_FAILED: the Pathways head (or the coordinator pod) is failing;
* RESTARTING: the JobSet is restarting itself (what a slice preemption leads to).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from console.services.model import (
    LOST_STATES,
    TRANSITIONAL_STATES,
    EventKind,
    HostState,
    JobStatus,
    WorkloadStatus,
)
from console.services.observation import HostObservation, Observation


class HostCondition(StrEnum):
    OK = "ok"
    NOTICE = "notice"
    LOST = "lost"
    NOT_READY = EventKind.NOT_READY
    UNREACHABLE = "unreachable"
    RAY_DOWN = "ray_down"
    DUPLICATE = "duplicate"
    SSH_DOWN = EventKind.SSH_DOWN
    UNKNOWN = "unknown"


HARD_CONDITIONS = frozenset({HostCondition.LOST, HostCondition.NOTICE})
SOFT_CONDITIONS = frozenset(
    {HostCondition.UNREACHABLE, HostCondition.RAY_DOWN, HostCondition.DUPLICATE}
)
# The journal's event kind for a host entering a condition (see ``event_kind``).
_CONDITION_EVENTS = {
    HostCondition.NOTICE: EventKind.PREEMPTION_NOTICE,
    HostCondition.UNREACHABLE: EventKind.HOST_UNREACHABLE,
    HostCondition.RAY_DOWN: EventKind.RAY_NODE_DOWN,
    HostCondition.DUPLICATE: EventKind.DUPLICATE_RAY_NODE,
    HostCondition.SSH_DOWN: EventKind.SSH_DOWN,
    HostCondition.UNKNOWN: EventKind.HOST_UNKNOWN,
}


class WorkloadCondition(StrEnum):
    OK = "ok"
    RESTARTING = "restarting"
    FAILED = "failed"
    CAPACITY = "capacity"
    HEAD_FAILED = EventKind.HEAD_FAILED
    HELD = "held"  # its restart held by pods stuck Terminating (finalizers)


class HeadLoss(StrEnum):
    """Why the Ray head counts as lost (NONE: it does not, or there is no Ray head)."""

    NONE = ""
    HOST = "host"  # its host is lost, noticed, not ready or unreachable
    GCS_SILENT = "gcs_silent"  # the Ray GCS on it does not answer
    RAY_DOWN = "ray_down"  # no live Ray node on its host


_HEAD_HOST_GONE = frozenset(
    {HostCondition.LOST, HostCondition.NOTICE, HostCondition.NOT_READY, HostCondition.UNREACHABLE}
)


@dataclass(frozen=True)
class Diagnosis:
    conditions: Mapping[str, HostCondition]
    head: str
    head_loss: HeadLoss
    head_condition: HostCondition  # the head host's own condition
    tunnel_down: bool
    stalled_runs: tuple[str, ...] = ()
    workloads: Mapping[str, WorkloadCondition] = field(default_factory=dict)
    # The wording's lines for this diagnosis (``diagnosis.diagnose`` fills them; classify
    # leaves them empty).
    symptoms: tuple[str, ...] = ()

    @property
    def head_lost(self) -> bool:
        return self.head_loss is not HeadLoss.NONE

    def workloads_in(self, *conds: WorkloadCondition) -> tuple[str, ...]:
        return tuple(w for w, c in self.workloads.items() if c in conds)

    @property
    def to_resubmit(self) -> tuple[str, ...]:
        """Failed workloads of this console: resubmitted by recovery."""
        return self.workloads_in(WorkloadCondition.FAILED)

    @property
    def to_release(self) -> tuple[str, ...]:
        """Workloads of this console whose restart pods stuck Terminating hold."""
        return self.workloads_in(WorkloadCondition.HELD)

    @property
    def blocked(self) -> tuple[str, ...]:
        """Workloads waiting for capacity no recovery step can create."""
        return self.workloads_in(WorkloadCondition.CAPACITY)

    def hosts_in(self, *conds: HostCondition) -> tuple[str, ...]:
        return tuple(h for h, c in self.conditions.items() if c in conds)

    @property
    def to_recreate(self) -> tuple[str, ...]:
        return self.hosts_in(HostCondition.LOST, HostCondition.NOTICE, HostCondition.UNREACHABLE)

    @property
    def needs_recovery(self) -> bool:
        """Something a recovery step can fix (a stall alone is reported, not "fixed")."""
        bad = {HostCondition.LOST, HostCondition.NOTICE, HostCondition.NOT_READY} | SOFT_CONDITIONS
        return (
            self.head_lost
            or self.tunnel_down
            or any(c in bad for c in self.conditions.values())
            or bool(self.to_resubmit)
            or bool(self.to_release)
        )

    @property
    def hard(self) -> bool:
        """The provider says so: a VM or node is gone, or a JobSet has Failed."""
        return any(c in HARD_CONDITIONS for c in self.conditions.values()) or bool(self.to_resubmit)

    @property
    def healthy(self) -> bool:
        return not self.needs_recovery and not self.stalled_runs

    def summary(self) -> str:
        return "; ".join(self.symptoms) if self.symptoms else "healthy"


def classify_host(h: HostObservation, ray_reachable: bool) -> HostCondition:
    state = str(h.tpu_state)
    if state in LOST_STATES:
        return HostCondition.LOST
    if h.notice_at is not None:
        return HostCondition.NOTICE
    if state in TRANSITIONAL_STATES:
        return HostCondition.NOT_READY
    if state != HostState.READY:
        return HostCondition.UNKNOWN
    if h.ssh_ok is False and h.ray_alive == 0:
        return HostCondition.UNREACHABLE
    if ray_reachable and h.ray_alive == 0:
        return HostCondition.RAY_DOWN
    if h.ray_alive > 1:
        return HostCondition.DUPLICATE
    if h.ssh_ok is False:
        return HostCondition.SSH_DOWN
    return HostCondition.OK


def classify(obs: Observation) -> Diagnosis:
    """Every layer of one observation -> what is wrong and where (no words)."""
    conditions = {h.name: classify_host(h, obs.ray_reachable) for h in obs.hosts}
    head_cond = conditions.get(obs.head, HostCondition.UNKNOWN)
    loss = HeadLoss.NONE
    if not obs.head:
        pass  # a backend without a Ray head
    elif head_cond in _HEAD_HOST_GONE:
        loss = HeadLoss.HOST
    elif not obs.ray_reachable and head_cond is not HostCondition.UNKNOWN:
        loss = HeadLoss.GCS_SILENT
    elif head_cond is HostCondition.RAY_DOWN:
        loss = HeadLoss.RAY_DOWN
    return Diagnosis(
        conditions=conditions,
        head=obs.head,
        head_loss=loss,
        head_condition=head_cond,
        tunnel_down=obs.tunnel_up is False and loss is HeadLoss.NONE,
        stalled_runs=tuple(obs.stalled_runs),
        workloads={w.name: classify_workload(w, obs) for w in obs.workloads},
    )


def classify_workload(w: WorkloadStatus, obs: Observation) -> WorkloadCondition:
    if w.status == JobStatus.FAILED:
        return WorkloadCondition.FAILED if w.owned else WorkloadCondition.OK
    if w.status in (JobStatus.SUCCEEDED, JobStatus.STOPPED):
        return WorkloadCondition.OK
    if (
        w.unschedulable
        and w.unschedulable_since is not None
        and obs.at - w.unschedulable_since > obs.capacity_wait_s
    ):
        return WorkloadCondition.CAPACITY
    if w.held and w.owned:
        return WorkloadCondition.HELD
    if w.head_failed:
        return WorkloadCondition.HEAD_FAILED
    if w.status == JobStatus.PENDING and w.restarts > 0 and w.message == "restarting":
        return WorkloadCondition.RESTARTING
    return WorkloadCondition.OK


def event_kind(cond: HostCondition, h: HostObservation) -> str:
    """The journal's kind for a host entering ``cond`` (a preemption is ``preempted``)."""
    if cond is HostCondition.LOST:
        return (
            EventKind.PREEMPTED if str(h.tpu_state) == HostState.PREEMPTED else EventKind.HOST_LOST
        )
    return _CONDITION_EVENTS.get(cond, str(cond))


def ray_alive_hosts(obs: Observation) -> int:
    return sum(1 for h in obs.hosts if h.ray_alive >= 1)


def fully_formed(obs: Observation) -> bool:
    """Ray up with exactly one live node on every host; a backend without a Ray head (GKE):
    every node Ready."""
    if not obs.head:
        return bool(obs.hosts) and all(h.tpu_state == HostState.READY for h in obs.hosts)
    return bool(obs.hosts) and obs.ray_reachable and all(h.ray_alive == 1 for h in obs.hosts)
