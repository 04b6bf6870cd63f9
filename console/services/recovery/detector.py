"""Edges -> events: what changed since the last observation, journaled once per change.

The detector keeps the memory that a single ``diagnose`` cannot have: each host's previous
TPU state and condition (a preemption is journaled once, when it is first seen), when the
cluster was last healthy, when the current trouble started, how many polls it has lasted
(soft conditions must persist over ``confirm_polls``), whether Ray was ever formed
(``armed``: a cluster never formed, or torn down on purpose, has no Ray to lose) and which
jobs were active on the last live head (what a head loss would take with it).

Time to detect is measured from the provider's preemption time when it reports one (the TPU
API does, per worker symptom; GKE dates a node's NotReady), otherwise from the last healthy
poll (an upper bound).

A GKE slice's nodes (hosts with a ``pool``) change together: their transitions are one row
per slice, not one per node. Workloads (JobSets) have edges of their own, each journaled
once: ``jobset_restarted`` (status.restarts grew), ``jobset_failed`` (e.g.
ReachedMaxRestarts), ``quota_pending`` (pods unschedulable beyond the capacity wait),
``worker_replaced`` (a Pathways worker replaced while the JobSet reports no restart) and
``head_failed``. A pod's own failure is a row by its cause (``pod_crashed`` with the exit code
and whether it is retried, ``pod_oom_killed``, ``pod_evicted``), once per failure (a pod
restarted in place fails again under a new restart count); pods that a node failure or a
spot reclaim took are counted in their slice's row instead.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from console.services.model import (
    ACTIVE_JOBS,
    Event,
    EventKind,
    JobInfo,
    JobStatus,
    PodFailure,
    WorkloadStatus,
)
from console.services.observation import HostObservation, Observation
from console.services.record.sink import EventSink
from console.services.recovery.classify import (
    SOFT_CONDITIONS,
    Diagnosis,
    HeadLoss,
    HostCondition,
    WorkloadCondition,
    event_kind,
    fully_formed,
)
from console.services.recovery.diagnosis import (
    condition_text,
    diagnose,
    head_text,
    pod_failure_text,
    slice_state_text,
    slice_text,
    workload_event,
)


@dataclass(frozen=True)
class Verdict:
    """What one observation means for recovery."""

    diagnosis: Diagnosis
    trouble: bool  # something a recovery could fix
    confirmed: bool  # hard, or persisted over confirm_polls: auto recovery may act


@dataclass
class _SliceLoss:
    """A slice's loss journaled and not over: the nodes it had when the loss began, and those
    lost since. More of ``members`` lost is the same loss; a node lost again (recreated under
    its name) or a new one (under a new name) is another."""

    members: frozenset[str]
    lost: set[str]


class Detector:
    def __init__(
        self,
        sink: EventSink,
        *,
        clock: Callable[[], float],
        confirm_polls: int = 2,
        emit_stall_events: bool = True,
    ) -> None:
        self._sink = sink
        self._clock = clock
        self.confirm_polls = max(1, confirm_polls)
        # The cadence tracker journals stalls itself (with silence and threshold); then the
        # detector only uses them, so each stall is one journal row.
        self.emit_stall_events = emit_stall_events
        self.armed = False
        self.held = 0  # user actions in progress: no arming from their transient polls
        self.disarmed_at = float("-inf")
        self.last_healthy_at: float | None = None
        self.unhealthy_since: float | None = None
        self.detect_s: float | None = None
        self.first_loss_at: float | None = None  # the provider's time of the first loss
        self.unhealthy_polls = 0
        self.active_jobs: dict[str, JobInfo] = {}
        self.last_diagnosis: Diagnosis | None = None
        self._conditions: dict[str, HostCondition] = {}
        self._tpu_states: dict[str, str] = {}
        self._workloads: dict[str, WorkloadStatus] = {}
        self._blocked: set[str] = set()
        self._head_lost = False
        self._gcs_silent_polls = 0  # consecutive polls whose head's Ray GCS did not answer
        self._tunnel_down = False
        self._stalled: set[str] = set()
        self._pod_failures: set[tuple[str, str, int]] | None = None  # None: no baseline yet
        self._slice_losses: dict[str, _SliceLoss] = {}  # a loss row's slice, until it is back

    # -- arming ---------------------------------------------------------------------------------
    def arm(self) -> None:
        """Start treating deviations as failures (after the cluster was formed once)."""
        self.armed = True

    def disarm(self) -> None:
        """Teardown or a user action reshaping the cluster: don't "recover" what is intended."""
        self.armed = False
        self.disarmed_at = self._clock()
        self.unhealthy_since = None
        self.unhealthy_polls = 0
        self.active_jobs = {}  # their cluster is gone on purpose: nothing to resubmit

    # -- one observation ----------------------------------------------------------------------
    async def update(
        self,
        obs: Observation,
        diag: Diagnosis | None = None,
        *,
        recovering: bool = False,
        silent: bool = False,
    ) -> Verdict:
        """Feed one observation: journal what changed and keep the detection bookkeeping.

        While a recovery runs it owns the bookkeeping until it is verified (a poll racing a
        new head, which knows no jobs yet, must not erase the list of jobs to resubmit);
        transitions are still journaled. ``silent``: another process journals for this pod;
        keep the memory (so taking over later repeats nothing) but journal nothing.
        ``diag``: the observation's diagnosis when the caller made it (one per observation).
        """
        diag = diagnose(obs) if diag is None else diag
        self.last_diagnosis = diag
        await self._emit_transitions(obs, diag, silent=silent)
        if recovering:
            return Verdict(diag, diag.needs_recovery, False)
        if obs.ray_reachable and obs.jobs_read and not diag.head_lost:
            self.active_jobs = {j.job_id: j for j in obs.jobs if j.status in ACTIVE_JOBS}
        if not diag.needs_recovery:
            self.mark_healthy(obs)
            if fully_formed(obs) and not self.held and obs.at > self.disarmed_at:
                # Ray is fully up (a console restarted over a running cluster): guard it. Not
                # while a user action runs (a teardown's first polls still see Ray up), nor
                # from a poll that began before the last disarm.
                self.armed = True
            return Verdict(diag, False, False)
        if self.unhealthy_since is None:
            self.unhealthy_since = obs.at
            self.detect_s = self.detect_delay(obs, diag)
        elif diag.hard and self.detect_s is None:
            self.detect_s = self.detect_delay(obs, diag)
        self.unhealthy_polls += 1
        # A head whose VM is gone (hard) acts at once; a head that only looks lost (GCS
        # silent, no Ray node, SSH failing on a READY VM) may be a slow poll on a loaded
        # box, and restarting the whole cluster kills every job: confirm it first.
        # Nor while a host that just dropped its connection is still READY (``settling``):
        # the API calls a reclaimed VM PREEMPTED once its processes are gone (a loaded box
        # takes seconds), and a recovery that recreated it first would leave the journal no
        # preemption, only an unreachable host. The backend bounds that wait.
        confirmed = diag.hard or (self.unhealthy_polls >= self.confirm_polls and not obs.settling)
        return Verdict(diag, True, confirmed)

    def mark_healthy(self, obs: Observation) -> None:
        self.last_healthy_at = obs.at
        self.unhealthy_since = None
        self.detect_s = None
        self.first_loss_at = None
        self.unhealthy_polls = 0

    def detect_delay(self, obs: Observation, diag: Diagnosis) -> float | None:
        """Time to detect: from the provider's event time if known, else the last healthy poll."""
        loss = self.loss_time(obs, diag)
        if loss is not None:
            return max(0.0, obs.at - loss)
        if self.last_healthy_at is not None:
            return max(0.0, obs.at - self.last_healthy_at)
        return None

    def loss_time(self, obs: Observation, diag: Diagnosis) -> float | None:
        """When the provider says the earliest loss in ``obs`` happened (None if it does not)."""
        gone = (HostCondition.LOST, HostCondition.NOTICE)
        times = [
            t
            for h in obs.hosts
            if diag.conditions.get(h.name) in gone
            for t in (h.notice_at, h.preempted_at)
            if t is not None
        ]
        if times:
            first = min(times)
            if self.first_loss_at is None or first < self.first_loss_at:
                self.first_loss_at = first
        return self.first_loss_at

    # -- events ---------------------------------------------------------------------------------
    async def _emit_transitions(
        self, obs: Observation, diag: Diagnosis, *, silent: bool = False
    ) -> None:
        emit: Callable[..., Awaitable[None]] = _nothing if silent else self._event
        await self._emit_slices(obs, diag, emit)
        await self._emit_workloads(obs, diag, emit)
        await self._emit_pods(obs, emit)
        for h in obs.hosts:
            if h.pool:
                continue  # worded per slice (_emit_slices)
            before_state = self._tpu_states.get(h.name)
            if before_state is not None and before_state != h.tpu_state:
                await emit(
                    EventKind.STATE_CHANGE,
                    f"{h.name}: TPU state {before_state} -> {h.tpu_state}",
                    host=h.name,
                    data={"from": before_state, "to": str(h.tpu_state)},
                )
            self._tpu_states[h.name] = str(h.tpu_state)
            cond = diag.conditions[h.name]
            before = self._conditions.get(h.name, HostCondition.OK)
            self._conditions[h.name] = cond
            if before is HostCondition.NOTICE and cond not in (
                HostCondition.NOTICE,
                HostCondition.LOST,
            ):
                # A notice always ends the VM; a recovery that replaced it between two polls
                # left no poll to see it PREEMPTED. Its end is still one row of the journal.
                await emit(
                    EventKind.PREEMPTED,
                    f"{h.name}: preempted after its notice (replaced before a poll saw it go)",
                    host=h.name,
                    data={
                        "tpu_state": str(h.tpu_state),
                        "ip": h.ip,
                        "after_notice": True,
                        **_where(obs),
                    },
                )
            if cond == before or cond in (HostCondition.OK, HostCondition.NOT_READY):
                continue
            if cond in SOFT_CONDITIONS and not self.armed:
                continue  # a cluster never formed (or torn down) has no Ray to lose
            data: dict[str, Any] = {"tpu_state": str(h.tpu_state), "ip": h.ip}
            if h.symptoms:
                data["symptoms"] = list(h.symptoms)
            if cond is HostCondition.NOTICE:
                data["notice_at"] = h.notice_at
                if h.notice_reason:
                    data["reason"] = h.notice_reason
            if cond is HostCondition.LOST:
                delay = self.detect_delay(obs, diag)
                if delay is not None:
                    data["detect_s"] = round(delay, 3)
                if h.preempted_at is not None:
                    data["preempted_at"] = h.preempted_at
                data.update(_where(obs))  # the ledger's rates per zone and accelerator
            if cond is HostCondition.DUPLICATE:
                data["ray_nodes"] = h.ray_alive
            await emit(
                event_kind(cond, h), f"{h.name}: {condition_text(cond, h)}", host=h.name, data=data
            )
        # A head whose host is gone or whose Ray node is down is lost at first sight. A GCS
        # that missed one poll while its host and node are fine is not yet: a busy head can
        # miss one, and its row would open an incident no recovery follows or closes (seen
        # in the watch drill on a loaded box). It is journaled once it stays silent for the
        # polls the watchdog confirms by, so its row comes before the recovery it starts.
        gcs_silent = diag.head_loss is HeadLoss.GCS_SILENT
        self._gcs_silent_polls = self._gcs_silent_polls + 1 if gcs_silent else 0
        head_lost = diag.head_lost and (
            not gcs_silent or self._gcs_silent_polls >= self.confirm_polls
        )
        if head_lost and not self._head_lost and self.armed:
            await emit(EventKind.HEAD_LOST, head_text(diag), host=diag.head)
        self._head_lost = head_lost
        if diag.tunnel_down and not self._tunnel_down and self.armed:
            await emit(EventKind.TUNNEL_DOWN, "dashboard tunnel is down")
        self._tunnel_down = diag.tunnel_down
        if self.emit_stall_events:
            for run in sorted(set(diag.stalled_runs) - self._stalled):
                await emit(EventKind.STALLED, f"run {run}: metrics stalled", data={"run_id": run})
            for run in sorted(self._stalled - set(diag.stalled_runs)):
                await emit(
                    EventKind.CADENCE_RESUMED, f"run {run}: metrics resumed", data={"run_id": run}
                )
        self._stalled = set(diag.stalled_runs)

    async def _emit_slices(
        self, obs: Observation, diag: Diagnosis, emit: Callable[..., Awaitable[None]]
    ) -> None:
        """A slice's nodes: one row per state change and one per condition entered; a slice
        whose loss grows over polls (a reclaim's node events spread past one poll) is one
        loss row, its later nodes said by their state change rows."""
        for pool, earlier in list(self._slice_losses.items()):
            if not any(diag.conditions.get(n) is HostCondition.LOST for n in earlier.lost):
                del self._slice_losses[pool]  # its lost nodes are back (or gone for good)
        changes: dict[tuple[str, str, str], list[str]] = {}
        entered: dict[tuple[str, HostCondition], list[HostObservation]] = {}
        for h in obs.hosts:
            if not h.pool:
                continue
            before_state = self._tpu_states.get(h.name)
            if before_state is not None and before_state != h.tpu_state:
                changes.setdefault((h.pool, before_state, str(h.tpu_state)), []).append(h.name)
            self._tpu_states[h.name] = str(h.tpu_state)
            cond = diag.conditions[h.name]
            before = self._conditions.get(h.name, HostCondition.OK)
            self._conditions[h.name] = cond
            if cond == before or cond in (HostCondition.OK, HostCondition.NOT_READY):
                continue
            entered.setdefault((h.pool, cond), []).append(h)
        for (pool, old, new), names in changes.items():
            pods = _pods_on(obs, names)
            await emit(
                EventKind.STATE_CHANGE,
                slice_state_text(pool, old, new, len(names), len(pods)),
                host=pool,
                data={"from": old, "to": new, "nodes": names, "pods": pods},
            )
        for (pool, cond), hosts in entered.items():
            size = sum(1 for h in obs.hosts if h.pool == pool)
            pods = _pods_on(obs, [h.name for h in hosts])
            data: dict[str, Any] = {"nodes": [h.name for h in hosts], "slice": pool, "pods": pods}
            if cond is HostCondition.LOST:
                newly = {h.name for h in hosts}
                ongoing = self._slice_losses.get(pool)
                if ongoing is not None and newly <= ongoing.members - ongoing.lost:
                    ongoing.lost |= newly  # more of the nodes it had when the loss began
                    continue
                members = frozenset(h.name for h in obs.hosts if h.pool == pool)
                self._slice_losses[pool] = _SliceLoss(members, newly)
                delay = self.detect_delay(obs, diag)
                if delay is not None:
                    data["detect_s"] = round(delay, 3)
                times = [h.preempted_at for h in hosts if h.preempted_at is not None]
                if times:
                    data["preempted_at"] = min(times)
                data.update(_where(obs))  # the ledger's rates per zone and accelerator
            await emit(
                event_kind(cond, hosts[0]),
                slice_text(pool, cond, hosts, size, len(pods)),
                host=pool,
                data=data,
            )

    async def _emit_workloads(
        self, obs: Observation, diag: Diagnosis, emit: Callable[..., Awaitable[None]]
    ) -> None:
        """Workload edges against the previous observation (a first sighting is a baseline)."""
        now = {w.name: w for w in obs.workloads}
        for w in obs.workloads:
            before = self._workloads.get(w.name)
            blocked = diag.workloads.get(w.name) is WorkloadCondition.CAPACITY
            if blocked and w.name not in self._blocked:
                await emit(
                    EventKind.QUOTA_PENDING,
                    workload_event(EventKind.QUOTA_PENDING, w, before or w, obs),
                    host=w.name,
                    data={"workload": w.name, "pods": w.unschedulable},
                )
            if not blocked:
                self._blocked.discard(w.name)
            else:
                self._blocked.add(w.name)
            if before is None:
                continue
            data: dict[str, Any] = {"workload": w.name, "restarts": w.restarts}
            if w.restarts > before.restarts:
                await emit(
                    EventKind.JOBSET_RESTARTED,
                    workload_event(EventKind.JOBSET_RESTARTED, w, before, obs),
                    host=w.name,
                    data={**data, "previous": before.restarts},
                )
            if w.status == JobStatus.FAILED and before.status != JobStatus.FAILED:
                await emit(
                    EventKind.JOBSET_FAILED,
                    workload_event(EventKind.JOBSET_FAILED, w, before, obs),
                    host=w.name,
                    data={**data, "reason": w.failed_reason, "owned": w.owned},
                )
            if w.worker_replacements > before.worker_replacements:
                await emit(
                    EventKind.WORKER_REPLACED,
                    workload_event(EventKind.WORKER_REPLACED, w, before, obs),
                    host=w.name,
                    data={**data, "replaced": w.worker_replacements - before.worker_replacements},
                )
            if w.head_failed and not before.head_failed:
                await emit(
                    EventKind.HEAD_FAILED,
                    workload_event(EventKind.HEAD_FAILED, w, before, obs),
                    host=w.name,
                    data=data,
                )
        self._workloads = now

    async def _emit_pods(self, obs: Observation, emit: Callable[..., Awaitable[None]]) -> None:
        """One row per pod failure by its cause (the first observation is a baseline: a
        console started over old failures journals none of them)."""
        seen: set[tuple[str, str, int]] = set()
        fresh = []
        for p in (*obs.pod_failures, *obs.pods):
            kind = _POD_KINDS.get(p.failure)
            if kind is None:
                continue
            key = (p.uid or p.name, p.failure, p.restarts)
            if key in seen:
                continue
            seen.add(key)
            if self._pod_failures is not None and key not in self._pod_failures:
                fresh.append((kind, p))
        self._pod_failures = seen  # a key gone from both lists never comes back (a pod's uid)
        for kind, p in fresh:
            await emit(
                kind,
                pod_failure_text(p),
                host=p.node or p.workload,
                data={
                    "pod": p.name,
                    "workload": p.workload,
                    "node": p.node,
                    "cause": str(p.failure),
                    "exit_code": p.exit_code,
                    "restartable": p.restartable,
                    "failed_at": p.failed_at,
                    "restarts": p.restarts,
                    "message": p.message,
                },
            )

    async def _event(
        self,
        kind: str,
        message: str,
        *,
        host: str = "",
        data: Mapping[str, Any] | None = None,
    ) -> None:
        await self._sink.emit(
            Event(
                at=self._clock(),
                kind=kind,
                message=message,
                host=host,
                actor="watchdog",
                data=dict(data or {}),
            )
        )


# A pod's own failure -> its row; node failures and spot reclaims are their slice's rows.
_POD_KINDS: Mapping[str, str] = {
    PodFailure.CRASH: EventKind.POD_CRASHED,
    PodFailure.OOM_KILLED: EventKind.POD_OOM_KILLED,
    PodFailure.EVICTED: EventKind.POD_EVICTED,
}


def _pods_on(obs: Observation, nodes: list[str]) -> list[str]:
    """The pods (of the current observation) that ran on ``nodes``."""
    on = set(nodes)
    return sorted(p.name for p in obs.pods if p.node and p.node in on)


def _where(obs: Observation) -> dict[str, str]:
    """Where a lost host was: its zone and accelerator, when the provider says."""
    return {k: v for k, v in (("zone", obs.zone), ("accelerator", obs.accelerator_type)) if v}


async def _nothing(*_: Any, **__: Any) -> None:
    return None
