"""The watch caches -> one ``Observation`` (no request: every poll only reads the caches).

Hosts are the TPU slices' nodes: Ready -> READY, NotReady because it is shutting down ->
PREEMPTED, deleted -> DELETED (a node seen once and gone is remembered until its node pool
has as many nodes again, so a preempted slice stays visible while GKE recreates it). Jobs
are the workloads this console created; ``workloads`` and ``pods`` hold every JobSet,
standalone Job and pod of the namespace, as the screens list them.

The memory that one set of objects cannot give: which pod filled each Pathways worker slot
(a new pod in a slot while the JobSet's ``restarts`` stayed put is a worker replaced behind
the JobSet's back), and how many replacements each workload has had.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from console.services.backends.gke import status as S
from console.services.backends.gke.informer import Informer
from console.services.backends.gke.kube import Obj, WatchType
from console.services.backends.gke.manifests import (
    RUN_LABEL,
    TEMPLATE_LABEL,
    ClusterRef,
    coordinator_slot,
    logs_url,
    run_location,
    workload_url,
)
from console.services.backends.gke.registry import RecordedWorkload
from console.services.model import (
    LOST_STATES,
    HostState,
    JobInfo,
    JobStatus,
    PodStatus,
    SubmissionState,
    WorkloadStatus,
)
from console.services.observation import HostObservation, Observation

HEAD_JOB = "pathways-head"
WORKER_JOB = "worker"
_BAD_HEAD = ("CrashLoopBackOff", "Error", "OOMKilled", "ContainerStatusUnknown")
HELD_AFTER_S = 10.0  # a deleted pod, its containers gone, still there this long: held
MAX_POD_FAILURES = 512  # pod failures remembered for the detector (it journals each once)


@dataclass
class Caches:
    """The informers the backend keeps (one list+watch each)."""

    pods: Informer
    nodes: Informer
    events: Informer
    jobs: Informer
    jobsets: Informer

    def all(self) -> tuple[Informer, ...]:
        return (self.pods, self.nodes, self.events, self.jobs, self.jobsets)

    def synced(self) -> bool:
        return all(i.synced.is_set() for i in self.all())

    def error(self) -> str:
        return "; ".join(i.error for i in self.all() if i.error)


@dataclass
class _GoneNode:
    pool: str
    ip: str
    since: float | None
    preempted: bool = False  # it was shutting down (a spot reclaim) before it went


@dataclass
class _Memory:
    seen_nodes: dict[str, _GoneNode] = field(default_factory=dict)
    pool_peak: dict[str, int] = field(default_factory=dict)
    worker_slots: dict[tuple[str, str, int, int], tuple[str, int]] = field(default_factory=dict)
    replacements: dict[str, int] = field(default_factory=dict)
    pod_failures: dict[tuple[str, str, int], PodStatus] = field(default_factory=dict)


class GkeObserver:
    def __init__(
        self,
        caches: Caches,
        ref: ClusterRef,
        *,
        recorded: Callable[[], Mapping[str, RecordedWorkload]],
        accelerator: str = "",
    ) -> None:
        self.caches = caches
        self.ref = ref
        self._recorded = recorded
        self.accelerator = accelerator
        self._mem = _Memory()
        self._now = 0.0  # the observation's time, for a pod's time held
        # Every node event, also between two polls: a slice whose pods exit at once on
        # SIGTERM is deleted within a poll, and its shutdown notice must not be missed.
        caches.nodes.add_listener(self._on_node)
        # Likewise every pod's failure: a JobSet restart deletes a crashed pod within a poll.
        caches.pods.add_listener(self._on_pod)

    def _on_pod(self, kind: str, raw: Obj) -> None:
        pod = S.pod_status(raw)
        if not pod.failure:
            return
        failures = self._mem.pod_failures
        failures.setdefault((pod.uid or pod.name, pod.failure, pod.restarts), self._retries(pod))
        while len(failures) > MAX_POD_FAILURES:  # the oldest first: dicts keep their order
            del failures[next(iter(failures))]

    def _on_node(self, kind: str, node: Obj) -> None:
        if not S.is_tpu_node(node):
            return
        name = str(S.meta(node).get("name", ""))
        state, _, since = S.node_state(node)
        known = self._mem.seen_nodes.get(name)
        if known is None:
            known = self._mem.seen_nodes[name] = _GoneNode(S.node_pool(node), S.node_ip(node), None)
        if state == HostState.PREEMPTED:
            known.preempted = True
            known.since = known.since or since
        elif state == HostState.READY and kind != WatchType.DELETED:
            known.preempted, known.since = False, None

    def observe(self, at: float) -> Observation:
        c = self.caches
        error = "" if c.synced() else "GKE API: watch caches not synced yet"
        if c.error():
            error = f"GKE API: {c.error()}"
        hosts = self._hosts(at)
        raw_pods = c.pods.values()
        pods = sorted((self._retries(S.pod_status(p)) for p in raw_pods), key=lambda p: p.name)
        recorded = self._recorded()
        workloads = self._workloads(raw_pods, pods, recorded, at)
        jobs = self._jobs(workloads, recorded)
        states = {h.tpu_state for h in hosts}
        node_state: HostState
        if not hosts:
            node_state = HostState.NOT_FOUND if c.synced() else HostState.UNKNOWN
        elif states == {HostState.READY}:
            node_state = HostState.READY
        elif states & LOST_STATES:
            node_state = HostState.PREEMPTED
        else:
            node_state = sorted(states - {HostState.READY})[0]
        return Observation(
            at=at,
            hosts=tuple(hosts),
            head="",
            jobs=tuple(jobs),
            error=error,
            node_state=node_state,
            health="" if node_state == HostState.READY else _health(hosts),
            accelerator_type=self.accelerator,
            # The cluster's location: a zone for a zonal cluster (GKE TPU slices are zonal).
            zone=self.ref.location,
            jobs_owned=True,
            workloads=tuple(workloads),
            pods=tuple(pods),
            pod_failures=tuple(self._mem.pod_failures.values()),
        )

    def _retries(self, pod: PodStatus) -> PodStatus:
        """A failed pod the container's restart policy does not retry: whether its workload
        does (its JobSet has restarts left, its Job failures left under its backoffLimit)."""
        if not pod.failure or pod.restartable is not None or not pod.workload:
            return pod
        js = self.caches.jobsets.get(pod.workload)
        if js is not None:
            limit = int(((js.get("spec") or {}).get("failurePolicy") or {}).get("maxRestarts", 0))
            done = int((js.get("status") or {}).get("restarts", 0) or 0)
            return replace(pod, restartable=done < limit)
        job = self.caches.jobs.get(pod.workload)
        if job is not None:
            limit = int((job.get("spec") or {}).get("backoffLimit", 6))
            failed = int((job.get("status") or {}).get("failed", 0) or 0)
            return replace(pod, restartable=failed < limit)
        return pod

    # -- nodes ---------------------------------------------------------------------------------
    def _hosts(self, at: float) -> list[HostObservation]:
        mem = self._mem
        live = [n for n in self.caches.nodes.values() if S.is_tpu_node(n)]
        per_pool: dict[str, int] = {}
        for n in live:
            per_pool[S.node_pool(n)] = per_pool.get(S.node_pool(n), 0) + 1
        for pool, count in per_pool.items():
            mem.pool_peak[pool] = max(mem.pool_peak.get(pool, 0), count)
        rows: list[tuple[str, str, HostObservation]] = []
        live_names = set()
        for n in live:
            name, pool = str(S.meta(n).get("name", "")), S.node_pool(n)
            live_names.add(name)
            state, health, since = S.node_state(n)
            prev = mem.seen_nodes.get(name)
            lost_since = since if state in LOST_STATES else None
            mem.seen_nodes[name] = _GoneNode(
                pool,
                S.node_ip(n),
                lost_since or (prev.since if prev and state != HostState.READY else None),
                preempted=state == HostState.PREEMPTED
                or (prev is not None and prev.preempted and state != HostState.READY),
            )
            rows.append(
                (
                    pool,
                    name,
                    HostObservation(
                        name=name,
                        ip=S.node_ip(n),
                        tpu_state=state,
                        health=health,
                        preempted_at=lost_since,
                        last_seen=at if state == HostState.READY else None,
                        pool=pool,
                        resources=_tpu_capacity(n),
                    ),
                )
            )
        for name, gone in list(mem.seen_nodes.items()):
            if name in live_names:
                continue
            if per_pool.get(gone.pool, 0) >= mem.pool_peak.get(gone.pool, 0):
                del mem.seen_nodes[name]  # the pool is whole again (under new node names)
                continue
            if gone.since is None:
                gone.since = at
            rows.append(
                (
                    gone.pool,
                    name,
                    HostObservation(
                        name=name,
                        ip=gone.ip,
                        # A spot reclaim stays one: the node went after its shutdown notice.
                        tpu_state=HostState.PREEMPTED if gone.preempted else HostState.DELETED,
                        health="deleted after its shutdown" if gone.preempted else "deleted",
                        preempted_at=gone.since,
                        pool=gone.pool,
                    ),
                )
            )
        rows.sort(key=lambda r: (r[0], r[1]))
        return [replace(h, index=i) for i, (_, _, h) in enumerate(rows)]

    # -- workloads -----------------------------------------------------------------------------
    def _workloads(
        self,
        raw_pods: list[Obj],
        pods: list[PodStatus],
        recorded: Mapping[str, RecordedWorkload],
        at: float,
    ) -> list[WorkloadStatus]:
        self._now = at
        by_workload: dict[str, list[PodStatus]] = {}
        raw_by_name = {str(S.meta(p).get("name", "")): p for p in raw_pods}
        for p in pods:
            by_workload.setdefault(p.workload, []).append(p)
        out: list[WorkloadStatus] = []
        for js in self.caches.jobsets.values():
            name = str(S.meta(js).get("name", ""))
            mine = by_workload.get(name, [])
            status, reason, message = S.jobset_status(js, mine)
            st = js.get("status") or {}
            restarts = int(st.get("restarts", 0) or 0)
            completed = S.condition(js, "Completed")
            template = self._template(name, js, recorded)
            self._track_workers(name, template, restarts, mine, raw_by_name)
            out.append(
                self._status(
                    name,
                    "JobSet",
                    template,
                    status,
                    reason,
                    message,
                    mine,
                    recorded,
                    terminal_state=str(st.get("terminalState") or ""),
                    restarts=restarts,
                    completed=str(completed.get("status", "")) if completed else "",
                    suspended=bool((js.get("spec") or {}).get("suspend")),
                    created_at=S.ts(S.meta(js).get("creationTimestamp")),
                    run_name=S.labels(js).get(RUN_LABEL, "") or _run_name(js),
                )
            )
        for job in self.caches.jobs.values():
            lab = S.labels(job)
            if S.P + "jobset-name" in lab:
                continue  # a JobSet's child: shown through its JobSet
            name = str(S.meta(job).get("name", ""))
            mine = by_workload.get(name, [])
            status, reason, message = S.job_status(job, mine)
            out.append(
                self._status(
                    name,
                    "Job",
                    self._template(name, job, recorded),
                    status,
                    reason,
                    message,
                    mine,
                    recorded,
                    terminal_state=(
                        "Completed"
                        if status == JobStatus.SUCCEEDED
                        else "Failed"
                        if status == JobStatus.FAILED
                        else ""
                    ),
                    completed="True" if status == JobStatus.SUCCEEDED else "",
                    suspended=bool((job.get("spec") or {}).get("suspend")),
                    created_at=S.ts(S.meta(job).get("creationTimestamp")),
                    run_name=lab.get(RUN_LABEL, ""),
                )
            )
        out.sort(key=lambda w: w.name)
        return out

    def _template(self, name: str, obj: Obj, recorded: Mapping[str, RecordedWorkload]) -> str:
        rec = recorded.get(name)
        if rec is not None:
            return rec.spec.template
        lab = S.labels(obj).get(TEMPLATE_LABEL, "")
        if lab:
            return lab
        jobs = {rj.get("name") for rj in (obj.get("spec") or {}).get("replicatedJobs") or []}
        if HEAD_JOB in jobs:
            return "pathways"
        return "standard" if obj.get("kind") == "JobSet" else "convert"

    def _status(
        self,
        name: str,
        kind: str,
        template: str,
        status: JobStatus,
        reason: str,
        message: str,
        pods: list[PodStatus],
        recorded: Mapping[str, RecordedWorkload],
        **fields: Any,
    ) -> WorkloadStatus:
        restarts = fields.get("restarts", 0)
        current = [p for p in pods if p.restart_attempt == restarts] if kind == "JobSet" else pods
        live = [p for p in current if p.phase not in ("Succeeded", "Failed")]
        unschedulable = [p for p in live if p.phase == "Pending" and _unschedulable(p)]
        since = [t for t in (self._unsched_since(p) for p in unschedulable) if t is not None]
        rec = recorded.get(name)
        jobset = self.caches.jobsets.get(name) if kind == "JobSet" else None
        held = tuple(h for h in (self._held(p) for p in pods) if h)
        return WorkloadStatus(
            name=name,
            status=status,
            kind=kind,
            template=template,
            pods_total=len(live),
            pods_running=sum(1 for p in live if p.phase == "Running"),
            pods_pending=sum(1 for p in live if p.phase == "Pending"),
            pods_succeeded=sum(1 for p in current if p.phase == "Succeeded"),
            unschedulable=len(unschedulable),
            unschedulable_since=min(since) if since else None,
            scheduler_message=unschedulable[0].message if unschedulable else "",
            disrupted=sum(1 for p in current if p.disrupted),
            worker_replacements=self._mem.replacements.get(name, 0),
            head_failed=_head_failed(template, current, coordinator_slot(jobset)),
            failed_reason=reason,
            message=message,
            owned=rec is not None,
            held=held,
            console_url=workload_url(name, template, self.ref),
            logs_url=logs_url(name, template, self.ref, jobset),
            **fields,
        )

    def _held(self, p: PodStatus) -> str:
        """ "pod (finalizer, ...)" when the pod is held Terminating: deleted, its containers
        gone (a terminal phase), finalizers still on, all that for more than ``HELD_AFTER_S``.
        The Job controller's own tracking finalizer goes within a second of its count; one
        still there, or another's (a log shipper's, a webhook's), holds the pod for ever
        and with it the Job's foreground deletion: the JobSet cannot recreate that Job."""
        raw = self.caches.pods.get(p.name)
        if raw is None or p.phase not in ("Succeeded", "Failed"):
            return ""
        since = S.held_since(raw)
        finalizers = [str(f) for f in S.meta(raw).get("finalizers") or []]
        if since is None or not finalizers or self._now - since < HELD_AFTER_S:
            return ""
        return f"{p.name} ({', '.join(finalizers)})"

    def _unsched_since(self, p: PodStatus) -> float | None:
        raw = self.caches.pods.get(p.name)
        cond = S.condition(raw, "PodScheduled") if raw is not None else None
        return S.ts(cond.get("lastTransitionTime")) if cond else None

    def _track_workers(
        self,
        workload: str,
        template: str,
        restarts: int,
        pods: list[PodStatus],
        raw: Mapping[str, Obj],
    ) -> None:
        """Count Pathways workers replaced by their Job while the JobSet kept its attempt."""
        if template != "pathways":
            return
        mem = self._mem
        for p in pods:
            if p.replicated_job != WORKER_JOB or p.phase in ("Succeeded", "Failed"):
                continue
            uid = str(S.meta(raw.get(p.name) or {}).get("uid", ""))
            slot = (workload, p.replicated_job, p.job_index, p.completion_index)
            before = mem.worker_slots.get(slot)
            if before is not None and before[0] != uid and before[1] == p.restart_attempt:
                mem.replacements[workload] = mem.replacements.get(workload, 0) + 1
            mem.worker_slots[slot] = (uid, p.restart_attempt)

    def _jobs(
        self, workloads: list[WorkloadStatus], recorded: Mapping[str, RecordedWorkload]
    ) -> list[JobInfo]:
        """The console's own workloads as jobs (deleted or not yet created ones too)."""
        by_name = {w.name: w for w in workloads}
        out = []
        for name, rec in recorded.items():
            w = by_name.get(name)
            if w is not None:
                out.append(job_info(w, rec))
            elif rec.state == SubmissionState.DELETED:
                out.append(_absent(rec, JobStatus.STOPPED, "deleted"))
            elif rec.state == SubmissionState.PENDING:
                out.append(_absent(rec, JobStatus.PENDING, "being created"))
            else:
                out.append(_absent(rec, JobStatus.LOST, "no longer on the cluster"))
        return out


def job_info(w: WorkloadStatus, rec: RecordedWorkload | None = None) -> JobInfo:
    meta = {
        "phantom.kind": w.kind,
        "phantom.template": w.template,
        "phantom.run_name": w.run_name or (rec.spec.effective_run_name if rec else ""),
        "restarts": str(w.restarts),
        "terminal_state": w.terminal_state,
    }
    if w.failed_reason:
        meta["failed_reason"] = w.failed_reason
    return JobInfo(
        job_id=w.name,
        status=w.status,
        entrypoint=rec.spec.command if rec is not None else "",
        start_time=w.created_at,
        message=w.message,
        metadata=meta,
    )


def _absent(rec: RecordedWorkload, status: JobStatus, why: str) -> JobInfo:
    return JobInfo(
        job_id=rec.name,
        status=status,
        entrypoint=rec.spec.command,
        start_time=rec.created_at,
        message=why,
        metadata={"phantom.template": rec.spec.template},
    )


def _run_name(jobset: Obj) -> str:
    found = run_location(jobset)
    return found[0] if found else ""


def _unschedulable(p: PodStatus) -> bool:
    return bool(p.message) and not p.node


def _head_failed(
    template: str, pods: list[PodStatus], slot: tuple[str, int, int] | None = None
) -> str:
    """The coordinator's failure: the JobSet's ``slot`` when known, whatever its names."""
    if slot is not None and template != "convert":
        heads = [p for p in pods if (p.replicated_job, p.job_index, p.completion_index) == slot]
    elif template == "pathways":
        heads = [p for p in pods if p.replicated_job == HEAD_JOB]
    elif template == "standard":
        heads = [p for p in pods if p.job_index == 0 and p.completion_index == 0]
    else:
        return ""
    for p in heads:
        if p.disrupted:
            continue
        if p.phase == "Failed" or p.status in _BAD_HEAD or "CrashLoopBackOff" in p.status:
            return f"{p.name}: {p.status}" + (f" ({p.message})" if p.message else "")
    return ""


def _health(hosts: list[HostObservation]) -> str:
    bad = [h for h in hosts if h.tpu_state != HostState.READY]
    pools = sorted({h.pool for h in bad})
    return f"{len(bad)}/{len(hosts)} nodes not Ready ({', '.join(pools)})"


def _tpu_capacity(node: Obj) -> dict[str, float]:
    cap = (node.get("status") or {}).get("allocatable") or {}
    try:
        return {"TPU": float(cap.get("google.com/tpu", 0))}
    except (TypeError, ValueError):
        return {}
