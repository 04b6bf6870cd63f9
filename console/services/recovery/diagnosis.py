"""Observation -> Diagnosis: what is wrong and where. Pure, and the ONE place it is worded.

Every sentence a user reads about the state of the cluster is made here: the symptoms that
trigger and explain a recovery, the warnings on the overview and in ``phantom status``, the
unmet criteria while a recovery verifies, and the per-host text of detection events. Two
front ends and the journal show the same words for the same observation.

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

On GKE the hosts are a TPU slice's nodes (``HostObservation.pool`` names the slice) and are
worded per slice; the workloads (JobSets) have conditions of their own:

* FAILED: a JobSet this console created is Failed (e.g. ReachedMaxRestarts): recovery
  resubmits it under the same run name, so it resumes from its checkpoints (hard);
* CAPACITY: its pods stayed unschedulable longer than ``Observation.capacity_wait_s``: no
  TPU capacity or quota; no step can fix that, so it is reported with the fix;
* HEAD_FAILED: the Pathways head (or the coordinator pod) is failing;
* RESTARTING: the JobSet is restarting itself (what a slice preemption leads to).
"""

from __future__ import annotations

import time
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


@dataclass(frozen=True)
class Diagnosis:
    conditions: Mapping[str, HostCondition]
    head: str
    head_lost: bool
    head_reason: str
    tunnel_down: bool
    stalled_runs: tuple[str, ...] = ()
    symptoms: tuple[str, ...] = ()
    workloads: Mapping[str, WorkloadCondition] = field(default_factory=dict)

    def workloads_in(self, *conds: WorkloadCondition) -> tuple[str, ...]:
        return tuple(w for w, c in self.workloads.items() if c in conds)

    @property
    def to_resubmit(self) -> tuple[str, ...]:
        """Failed workloads of this console: resubmitted by recovery."""
        return self.workloads_in(WorkloadCondition.FAILED)

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


def diagnose(obs: Observation) -> Diagnosis:
    """Every layer of one observation -> what is wrong and where."""
    conditions = {h.name: classify_host(h, obs.ray_reachable) for h in obs.hosts}
    symptoms: list[str] = []
    pooled: dict[tuple[str, HostCondition], list[HostObservation]] = {}
    for h in obs.hosts:
        cond = conditions[h.name]
        if cond is HostCondition.OK:
            continue
        if h.pool:  # a slice's nodes go together: one line per slice
            pooled.setdefault((h.pool, cond), []).append(h)
            continue
        extra = f" [{', '.join(h.symptoms)}]" if h.symptoms else ""
        symptoms.append(f"{h.name}: {condition_text(cond, h)}{extra}")
    for (pool, cond), hosts in pooled.items():
        size = sum(1 for h in obs.hosts if h.pool == pool)
        symptoms.append(slice_text(pool, cond, hosts, size))
    workloads = {w.name: classify_workload(w, obs) for w in obs.workloads}
    for w in obs.workloads:
        if workloads[w.name] is not WorkloadCondition.OK:
            symptoms.append(workload_text(workloads[w.name], w, obs))
    head_cond = conditions.get(obs.head, HostCondition.UNKNOWN)
    head_lost, head_reason = False, ""
    if not obs.head:
        pass  # a backend without a Ray head
    elif head_cond in (
        HostCondition.LOST,
        HostCondition.NOTICE,
        HostCondition.NOT_READY,
        HostCondition.UNREACHABLE,
    ):
        head_lost, head_reason = True, f"head host {obs.head} is {head_cond}"
    elif not obs.ray_reachable and head_cond is not HostCondition.UNKNOWN:
        head_lost, head_reason = True, "Ray GCS on the head does not answer"
    elif head_cond is HostCondition.RAY_DOWN:
        head_lost, head_reason = True, f"no live Ray node on head host {obs.head}"
    if head_lost:
        symptoms.append(f"head lost: {head_reason}")
    tunnel_down = obs.tunnel_up is False and not head_lost
    if tunnel_down:
        symptoms.append("dashboard tunnel down")
    if obs.stalled_runs:
        symptoms.append(f"metrics stalled: {', '.join(_run_names(obs, obs.stalled_runs))}")
    return Diagnosis(
        conditions=conditions,
        head=obs.head,
        head_lost=head_lost,
        head_reason=head_reason,
        tunnel_down=tunnel_down,
        stalled_runs=tuple(obs.stalled_runs),
        symptoms=tuple(symptoms),
        workloads=workloads,
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
    if w.head_failed:
        return WorkloadCondition.HEAD_FAILED
    if w.status == JobStatus.PENDING and w.restarts > 0 and w.message == "restarting":
        return WorkloadCondition.RESTARTING
    return WorkloadCondition.OK


def workload_text(cond: WorkloadCondition, w: WorkloadStatus, obs: Observation) -> str:
    """What a workload's condition means, with what to do about it."""
    name = f"workload {w.name}"
    if cond is WorkloadCondition.FAILED:
        why = f" ({w.failed_reason})" if w.failed_reason else ""
        return (
            f"{name}: JobSet Failed{why} after {w.restarts} restart(s); recovery resubmits it "
            f"as run {w.run_name or w.name} (it resumes from its last checkpoint)"
        )
    if cond is WorkloadCondition.CAPACITY:
        waited = obs.at - (w.unschedulable_since or obs.at)
        return (
            f"{name}: {w.unschedulable} pod(s) Pending for {waited:.0f}s, unschedulable "
            f"({w.scheduler_message or 'no node fits'}): no TPU capacity for it (spot "
            "capacity or TPU quota exhausted); the console cannot fix this: wait for "
            "capacity, raise the TPU quota (IAM & Admin > Quotas), use on-demand or a "
            "reservation (spot = false), or resubmit with fewer slices"
        )
    if cond is WorkloadCondition.HEAD_FAILED:
        return f"{name}: head failing: {w.head_failed}"
    if cond is WorkloadCondition.RESTARTING:
        return (
            f"{name}: JobSet restarting itself (restart {w.restarts}, "
            f"{w.pods_running}/{w.pods_total} pods Running)"
        )
    return f"{name}: ok"


def workload_event(kind: str, w: WorkloadStatus, before: WorkloadStatus, obs: Observation) -> str:
    """The journal's message for a workload event (``detector``)."""
    name = f"workload {w.name}"
    if kind == EventKind.JOBSET_RESTARTED:
        why = f" ({w.disrupted} pod(s) disrupted: slice preempted)" if w.disrupted else ""
        return f"{name}: JobSet restarted ({before.restarts} -> {w.restarts}){why}"
    if kind == EventKind.JOBSET_FAILED:
        why = f" ({w.failed_reason})" if w.failed_reason else ""
        return f"{name}: JobSet Failed{why}: {w.message}".rstrip(": ")
    if kind == EventKind.QUOTA_PENDING:
        return workload_text(WorkloadCondition.CAPACITY, w, obs)
    if kind == EventKind.WORKER_REPLACED:
        n = w.worker_replacements - before.worker_replacements
        return (
            f"{name}: {n} Pathways worker pod(s) replaced by their Job while the JobSet "
            f"reports no restart (restarts still {w.restarts})"
        )
    if kind == EventKind.HEAD_FAILED:
        return f"{name}: head failing: {w.head_failed}"
    return f"{name}: {kind}"


def slice_text(pool: str, cond: HostCondition, hosts: list[HostObservation], size: int) -> str:
    """One slice's nodes in one condition, in one line."""
    n = f"{len(hosts)}/{size} nodes"
    if cond is HostCondition.LOST:
        states = sorted({str(h.tpu_state) for h in hosts})
        when = min((h.preempted_at for h in hosts if h.preempted_at), default=None)
        at = f" at {_clock(when)}" if when else ""
        what = (
            "preempted (spot capacity reclaimed; GKE recreates the nodes)"
            if HostState.PREEMPTED in states
            else "nodes deleted, waiting for GKE to recreate them"
        )
        return f"slice {pool}: {n} lost, {what}{at}"
    if cond is HostCondition.NOT_READY:
        return f"slice {pool}: {n} not Ready yet ({hosts[0].health or hosts[0].tpu_state})"
    return f"slice {pool}: {n} {cond} ({hosts[0].health or hosts[0].tpu_state})"


def slice_state_text(pool: str, before: str, after: str, n: int) -> str:
    return f"slice {pool}: {n} node(s) {before} -> {after}"


def condition_text(cond: HostCondition, h: HostObservation) -> str:
    """What a host's condition means, in the words every screen and event uses."""
    if h.pool:
        return slice_text(h.pool, cond, [h], 1).split(": ", 1)[1]
    if cond is HostCondition.LOST:
        when = f" at {_clock(h.preempted_at)}" if h.preempted_at else ""
        return f"VM lost ({h.ip}, TPU state {h.tpu_state}{when})"
    if cond is HostCondition.NOTICE:
        return (
            f"preemption notice at {_clock(h.notice_at)} ({h.ip}): shutting down within "
            "its grace period, jobs checkpointing"
        )
    seen = f" ({h.ssh_error})" if h.ssh_error else ""
    return {
        HostCondition.OK: "ok",
        HostCondition.NOT_READY: f"TPU state {h.tpu_state}",
        HostCondition.UNREACHABLE: (
            f"unreachable over SSH{seen} and no live Ray node (TPU state {h.tpu_state})"
        ),
        HostCondition.SSH_DOWN: f"SSH does not answer{seen}; its Ray node is alive",
        HostCondition.RAY_DOWN: "Ray node down (VM fine)",
        HostCondition.DUPLICATE: f"{h.ray_alive} live Ray nodes on {h.ip}: duplicate",
        HostCondition.UNKNOWN: f"TPU state {h.tpu_state}",
    }[cond]


def event_kind(cond: HostCondition, h: HostObservation) -> str:
    """The journal's kind for a host entering ``cond`` (a preemption is ``preempted``)."""
    if cond is HostCondition.LOST:
        return (
            EventKind.PREEMPTED if str(h.tpu_state) == HostState.PREEMPTED else EventKind.HOST_LOST
        )
    return _CONDITION_EVENTS.get(cond, str(cond))


def warnings(obs: Observation, diag: Diagnosis, *, ray_expected: bool) -> tuple[str, ...]:
    """The overview's and ``phantom status``'s warning lines for this observation.

    ``ray_expected``: Ray was formed and should be up (the watchdog is armed). Before that, a
    silent GCS is the expected state of a fresh pod (the overview says how to start Ray),
    not a warning.
    """
    out: list[str] = [obs.error] if obs.error else []
    for line in diag.symptoms:
        if line.startswith("head lost: ") and not (ray_expected or diag.hard):
            continue
        if line == "dashboard tunnel down":
            line = f"dashboard tunnel down ({obs.tunnel_error or 'not connected'})"
        out.append(line)
    return tuple(out)


def unmet(
    obs: Observation,
    n_hosts: int,
    resubmitted: Mapping[str, str],
    stalled_before: set[str],
) -> list[str]:
    """What still keeps a recovery from being verified (empty: the cluster is back)."""
    out: list[str] = []
    not_ready = [h for h in obs.hosts if str(h.tpu_state) != HostState.READY]
    pools = sorted({h.pool for h in not_ready if h.pool})
    for pool in pools:
        n = sum(1 for h in not_ready if h.pool == pool)
        out.append(f"slice {pool}: {n} node(s) not Ready")
    if any(not h.pool for h in not_ready):
        out.append(f"not READY: {', '.join(h.name for h in not_ready if not h.pool)}")
    unreachable = [h.name for h in obs.hosts if h.ssh_ok is False]
    if unreachable:
        out.append(f"SSH down: {', '.join(unreachable)}")
    if obs.head and not obs.ray_reachable:
        out.append("Ray GCS not answering")
    elif obs.head:
        alive = ray_alive_hosts(obs)
        if alive < n_hosts:
            missing = [h.name for h in obs.hosts if h.ray_alive == 0]
            out.append(f"{alive}/{n_hosts} Ray nodes alive (missing {', '.join(missing)})")
        dup = [h.name for h in obs.hosts if h.ray_alive > 1]
        if dup:
            out.append(f"duplicate Ray nodes on {', '.join(dup)}")
    if obs.tunnel_up is False:
        out.append("tunnel down")
    status = {j.job_id: j.status for j in obs.jobs}
    for old, new in resubmitted.items():
        st = status.get(new, JobStatus.UNKNOWN)
        if st in (JobStatus.FAILED, JobStatus.PREEMPTED, JobStatus.STOPPED):
            out.append(f"resubmitted job {new} (was {old}) is {st}")
        elif st not in (JobStatus.RUNNING, JobStatus.SUCCEEDED):
            out.append(f"resubmitted job {new} is {st}")
    for w in obs.workloads:
        if w.owned and w.status == JobStatus.PENDING and w.name not in resubmitted:
            out.append(f"workload {w.name}: {w.pods_running}/{w.pods_total} pods Running")
    new_stalls = sorted(set(obs.stalled_runs) - stalled_before)
    if new_stalls:
        out.append(f"metrics stalled: {', '.join(_run_names(obs, new_stalls))}")
    return out


def verified_text(
    obs: Observation, n_hosts: int, resubmitted: Mapping[str, str], stalled_before: set[str]
) -> str:
    """What a verified recovery reports."""
    if obs.head:
        msg = f"{ray_alive_hosts(obs)}/{n_hosts} Ray nodes alive"
    elif any(h.pool for h in obs.hosts):
        ready = sum(1 for h in obs.hosts if h.tpu_state == HostState.READY)
        running = sum(1 for w in obs.workloads if w.owned and w.status == JobStatus.RUNNING)
        msg = f"{ready}/{len(obs.hosts)} nodes Ready, {running} workload(s) Running"
    else:
        msg = "cluster up"
    if obs.tunnel_up:
        msg += ", tunnel up"
    if resubmitted:
        msg += f", {len(resubmitted)} job(s) running again"
    silent = sorted(set(obs.stalled_runs) & stalled_before)
    if silent:
        msg += f"; still silent (superseded by resubmission): {', '.join(silent)}"
    return msg


def job_env_problems(env: Mapping[str, str], expected: Mapping[str, str | None]) -> tuple[str, ...]:
    """What a job's runtime env lacks of what the console expected (the seed's checklist: "did
    the job start with the expected env vars?"). An expected value of None (a secret, or a
    ``$NAME`` reference) must be set and non-empty; its value is never compared or shown."""
    out: list[str] = []
    for name, want in expected.items():
        got = env.get(name)
        if got is None:
            out.append(f"{name} not set")
        elif want is None:
            if not got:
                out.append(f"{name} is empty")
        elif got != want:
            out.append(f"{name}={got!r}, expected {want!r}")
    return tuple(out)


def job_env_text(job_id: str, problems: tuple[str, ...] | list[str]) -> str:
    """The journal's and the screens' sentence for a job started without the expected env."""
    return f"job {job_id} started without the expected env: {'; '.join(problems)}"


def ray_alive_hosts(obs: Observation) -> int:
    return sum(1 for h in obs.hosts if h.ray_alive >= 1)


def fully_formed(obs: Observation) -> bool:
    """Ray up with exactly one live node on every host; a backend without a Ray head (GKE):
    every node Ready."""
    if not obs.head:
        return bool(obs.hosts) and all(h.tpu_state == HostState.READY for h in obs.hosts)
    return bool(obs.hosts) and obs.ray_reachable and all(h.ray_alive == 1 for h in obs.hosts)


def resubmitted_text(old: str, new: str) -> str:
    """The journal's line for a job the recovery submitted again."""
    if old == new:
        return f"workload {old} failed, resubmitted under the same run name (resumes from its checkpoints)"
    return f"job {old} lost with the head, resubmitted as {new}"


def _run_names(obs: Observation, run_ids: tuple[str, ...] | list[str]) -> list[str]:
    return [obs.run_names.get(r) or r for r in run_ids]


def _clock(at: float | None) -> str:
    return time.strftime("%H:%M:%S", time.localtime(at)) if at else ""
