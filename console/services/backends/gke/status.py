"""Kubernetes objects -> the console's model: pods as `kubectl get pods` shows them, nodes as
hosts, JobSets and Jobs as workloads (pure functions over the API's JSON).

A pod's READY, STATUS and RESTARTS are kubectl's printPod, from ``kubeprint`` (the one home
of those rules, shared with the GKE emulator's server-side printing).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from console.services.backends.gke.kube import Obj
from console.services.model import HostState, JobStatus, PodFailure, PodStatus
from kubeprint.pod import print_pod

P = "jobset.sigs.k8s.io/"
TPU_LABEL = "cloud.google.com/gke-tpu-accelerator"
POOL_LABEL = "cloud.google.com/gke-nodepool"
SHUTDOWN_TAINTS = ("cloud.google.com/impending-node-termination",)


def ts(value: Any) -> float | None:
    """Epoch seconds of an RFC 3339 time (None when absent or unreadable)."""
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def meta(obj: Obj) -> Obj:
    m: Obj = obj.get("metadata") or {}
    return m


def labels(obj: Obj) -> dict[str, str]:
    return dict(meta(obj).get("labels") or {})


def condition(obj: Obj, type_: str) -> Obj | None:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == type_:
            cond: Obj = c
            return cond
    return None


def condition_true(obj: Obj, type_: str) -> bool:
    c = condition(obj, type_)
    return c is not None and c.get("status") == "True"


# -- pods ----------------------------------------------------------------------------------------
def pod_status_text(pod: Obj) -> tuple[str, int, int, int]:
    """(STATUS, ready, total, restarts) as kubectl prints them."""
    p = print_pod(pod)
    return p.status, p.ready, p.total, p.restarts


def _why(pod: Obj) -> str:
    """The most telling reason a pod is not simply running."""
    st = pod.get("status") or {}
    dt = condition(pod, "DisruptionTarget")
    if dt is not None and dt.get("status") == "True":
        return f"{dt.get('reason', '')}: {dt.get('message', '')}".strip(": ")
    sched = condition(pod, "PodScheduled")
    if sched is not None and sched.get("status") == "False":
        return str(sched.get("message") or sched.get("reason") or "")
    for cs in (st.get("initContainerStatuses") or []) + (st.get("containerStatuses") or []):
        wait = (cs.get("state") or {}).get("waiting") or {}
        if wait.get("message"):
            return str(wait["message"])
    return str(st.get("message") or "")


# DisruptionTarget reasons -> the failure they are (Kubernetes' pod disruption conditions).
_DISRUPTIONS = {
    "EvictionByEvictionAPI": PodFailure.EVICTED,
    "PreemptionByScheduler": PodFailure.EVICTED,
    "DeletionByPodGC": PodFailure.NODE_FAILURE,
    "DeletionByTaintManager": PodFailure.NODE_FAILURE,
    "TerminationByKubelet": PodFailure.PREEMPTED,
}


def pod_failure(pod: Obj) -> tuple[str, int | None, float | None]:
    """(PodFailure or "", exit code, when) of a pod, from what its status says: evicted
    (``status.reason`` Evicted, or a DisruptionTarget by eviction or preemption), its node
    gone (DeletionByPodGC / DeletionByTaintManager), its node shut down (TerminationByKubelet:
    a spot reclaim, or the slice's repair: the slice's row says which), else a container
    terminated non-zero, now or before its last restart (OOMKilled or a crash), unless it
    stopped only once the pod was deleted (no failure of its own)."""
    st = pod.get("status") or {}
    exit_code: int | None = None
    failed_at: float | None = None
    crashed = ""
    for cs in st.get("containerStatuses") or []:
        term = (cs.get("state") or {}).get("terminated") or (cs.get("lastState") or {}).get(
            "terminated"
        )
        if not term or not term.get("exitCode"):
            continue
        exit_code, failed_at = _int(term.get("exitCode")), ts(term.get("finishedAt"))
        oom = term.get("reason") == "OOMKilled"
        crashed = PodFailure.OOM_KILLED if oom else PodFailure.CRASH
        break
    if st.get("reason") == "Evicted":
        return PodFailure.EVICTED, exit_code, failed_at
    dt = condition(pod, "DisruptionTarget")
    if dt is not None and dt.get("status") == "True":
        found = _DISRUPTIONS.get(str(dt.get("reason", "")))
        if found is not None:
            return found, exit_code, ts(dt.get("lastTransitionTime")) or failed_at
    deleted = ts((pod.get("metadata") or {}).get("deletionTimestamp"))
    if crashed and deleted is not None and (failed_at is None or failed_at >= deleted):
        # Stopped because it was deleted (its JobSet restarting, a user's kubectl delete):
        # the kubelet gives it its terminal phase and SIGTERM's exit code, no crash of its own.
        return "", exit_code, failed_at
    return crashed, exit_code, failed_at


def pod_status(pod: Obj) -> PodStatus:
    m, spec, st = meta(pod), pod.get("spec") or {}, pod.get("status") or {}
    lab = labels(pod)
    text, ready, total, restarts = pod_status_text(pod)
    failure, exit_code, failed_at = pod_failure(pod)
    return PodStatus(
        name=str(m.get("name", "")),
        phase=str(st.get("phase") or "Pending"),
        status=text,
        ready=f"{ready}/{total}",
        restarts=restarts,
        node=str(spec.get("nodeName") or ""),
        created_at=ts(m.get("creationTimestamp")),
        workload=lab.get(P + "jobset-name") or lab.get("job-name") or "",
        replicated_job=lab.get(P + "replicatedjob-name", ""),
        job_index=_int(lab.get(P + "job-index")),
        completion_index=_int(
            lab.get("batch.kubernetes.io/job-completion-index")
            or (m.get("annotations") or {}).get("batch.kubernetes.io/job-completion-index")
        ),
        restart_attempt=_int(lab.get(P + "restart-attempt")),
        ip=str(st.get("podIP") or ""),
        message=_why(pod),
        disrupted=condition_true(pod, "DisruptionTarget"),
        containers=tuple(str(c.get("name", "")) for c in spec.get("containers") or []),
        failure=failure,
        exit_code=exit_code,
        failed_at=failed_at,
        # A container restarted in place; else the JobSet's rules (the observer knows them).
        restartable=True if spec.get("restartPolicy") in ("Always", "OnFailure") else None,
        uid=str(m.get("uid", "")),
    )


def _int(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def held_since(pod: Obj) -> float | None:
    """Since when a deleted pod has been waiting only on its finalizers: the later of its
    deletion and its last container's end (a pod slow to stop is not held while it stops;
    the moment it ends, the Job controller's tracking finalizer still on is no hold yet).
    None: not deleted."""
    deleted = ts(meta(pod).get("deletionTimestamp"))
    if deleted is None:
        return None
    st = pod.get("status") or {}
    since = deleted
    for cs in (st.get("initContainerStatuses") or []) + (st.get("containerStatuses") or []):
        ended = ts(((cs.get("state") or {}).get("terminated") or {}).get("finishedAt"))
        if ended is not None:
            since = max(since, ended)
    return since


def main_container(pod: Obj) -> tuple[str, int, bool]:
    """(name, restartCount, started) of the pod's first container: whose log is the pod's."""
    spec, st = pod.get("spec") or {}, pod.get("status") or {}
    containers = spec.get("containers") or []
    name = str(containers[0].get("name", "")) if containers else ""
    for cs in st.get("containerStatuses") or []:
        if cs.get("name") == name:
            state = cs.get("state") or {}
            started = (
                "running" in state or "terminated" in state or int(cs.get("restartCount", 0)) > 0
            )
            return name, int(cs.get("restartCount", 0)), started
    return name, 0, False


def pod_terminal(pod: Obj) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


# -- nodes ---------------------------------------------------------------------------------------
def is_tpu_node(node: Obj) -> bool:
    return TPU_LABEL in labels(node)


def node_pool(node: Obj) -> str:
    return labels(node).get(POOL_LABEL, "")


def node_ip(node: Obj) -> str:
    for a in (node.get("status") or {}).get("addresses") or []:
        if a.get("type") == "InternalIP":
            return str(a.get("address", ""))
    return ""


def node_state(node: Obj) -> tuple[HostState, str, float | None]:
    """(HostState, health text, since) of a node: Ready -> READY; NotReady because it is
    shutting down (the preemption notice: the kubelet's message, GKE's impending-termination
    taint) -> PREEMPTED; NotReady otherwise -> REPAIRING (GKE auto-repairs it); no Ready
    condition yet -> CREATING."""
    ready = condition(node, "Ready")
    if ready is None:
        return HostState.CREATING, "", None
    since = ts(ready.get("lastTransitionTime"))
    if ready.get("status") == "True":
        return HostState.READY, "", since
    message = str(ready.get("message") or ready.get("reason") or "NotReady")
    taints = {t.get("key") for t in (node.get("spec") or {}).get("taints") or []}
    if taints & set(SHUTDOWN_TAINTS):
        # Only a spot reclaim carries GKE's impending-termination taint; a node shutting
        # down without it is deleted on purpose (the auto-repair of a failed slice, an
        # upgrade): not a preemption.
        return HostState.PREEMPTED, f"NotReady: {message}", since
    if "shutting down" in message:
        return HostState.DELETING, f"NotReady: {message}", since
    if ready.get("status") == "Unknown":
        return HostState.UNKNOWN, f"NotReady: {message}", since
    return HostState.REPAIRING, f"NotReady: {message}", since


# -- workloads -----------------------------------------------------------------------------------
def expected_pods(jobset: Obj) -> int:
    total = 0
    for rj in (jobset.get("spec") or {}).get("replicatedJobs") or []:
        jspec = (rj.get("template") or {}).get("spec") or {}
        total += int(rj.get("replicas", 1)) * int(jspec.get("parallelism", 1))
    return total


def jobset_status(jobset: Obj, pods: Iterable[PodStatus]) -> tuple[JobStatus, str, str]:
    """(JobStatus, failed reason, message) of a JobSet from its status and its current
    attempt's pods: RUNNING once every expected pod of the attempt runs."""
    st = jobset.get("status") or {}
    terminal = st.get("terminalState") or ""
    if terminal == "Completed" or condition_true(jobset, "Completed"):
        c = condition(jobset, "Completed") or {}
        return JobStatus.SUCCEEDED, "", str(c.get("message") or "")
    if terminal == "Failed" or condition_true(jobset, "Failed"):
        c = condition(jobset, "Failed") or {}
        return JobStatus.FAILED, str(c.get("reason") or ""), str(c.get("message") or "")
    if (jobset.get("spec") or {}).get("suspend") or condition_true(jobset, "Suspended"):
        return JobStatus.PENDING, "", "suspended"
    attempt = int(st.get("restarts", 0) or 0)
    current = [p for p in pods if p.restart_attempt == attempt]
    active = [p for p in current if p.phase != "Succeeded"]
    running = [p for p in active if p.phase == "Running" and not p.disrupted]
    done = len(current) - len(active)
    if active and len(running) == len(active) and len(running) + done >= expected_pods(jobset):
        return JobStatus.RUNNING, "", ""
    restarting = condition_true(jobset, "RestartingJobSet") or (attempt > 0 and not running)
    return JobStatus.PENDING, "", "restarting" if restarting else ""


def job_status(job: Obj, pods: Iterable[PodStatus]) -> tuple[JobStatus, str, str]:
    """(JobStatus, failed reason, message) of a batch Job."""
    for type_, status in (("Complete", JobStatus.SUCCEEDED), ("Failed", JobStatus.FAILED)):
        c = condition(job, type_)
        if c is not None and c.get("status") == "True":
            reason = str(c.get("reason") or "") if status == JobStatus.FAILED else ""
            return status, reason, str(c.get("message") or "")
    if (job.get("spec") or {}).get("suspend"):
        return JobStatus.PENDING, "", "suspended"
    if any(p.phase == "Running" for p in pods):
        return JobStatus.RUNNING, "", ""
    return JobStatus.PENDING, "", ""
