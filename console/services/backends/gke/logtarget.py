"""Whose log a workload's is, read from the watch caches (no request).

A workload's log is its coordinator's: worker 0 of slice 0 (xpk's standard template), the
Pathways head, or a conversion Job's pod; a pod's is its own, and then its replacement's in
the same slot. ``log_target`` answers which pod that is *now* (``logs.follow`` asks again
when a pod is replaced); ``log_backlog`` the coordinator pods that ended before it, so a
follow shows the workload's log from its start as far as the cluster keeps those pods.
"""

from __future__ import annotations

from collections.abc import Callable

from console.services.backends.gke import status as S
from console.services.backends.gke.kube import Obj
from console.services.backends.gke.logs import PodTarget
from console.services.backends.gke.manifests import coordinator_slot
from console.services.backends.gke.observe import Caches
from console.services.model import PodStatus


def log_backlog(caches: Caches, ref: str) -> list[PodTarget]:
    """A workload's ended coordinator pods before the current one (a Job's failed pod
    its replacement followed), oldest first (none for a pod ``ref``)."""
    if caches.pods.get(ref) is not None:
        return []
    current = log_target(caches, ref)()
    slot = coordinator_slot(caches.jobsets.get(ref))
    ended = [
        (p.restart_attempt, p.phase != "Failed", p.created_at or 0.0, raw)
        for raw in caches.pods.values()
        if (p := S.pod_status(raw)).workload == ref
        and is_coordinator(p, slot)
        and S.pod_terminal(raw)
    ]
    ended.sort(key=lambda c: c[:3])
    return [
        target(raw) for *_, raw in ended if current is None or S.meta(raw).get("uid") != current.uid
    ]


def log_target(caches: Caches, ref: str) -> Callable[[], PodTarget | None]:
    """Which pod's log is ``ref``'s now: a workload's coordinator (worker 0 of slice 0,
    the Pathways head, the conversion's pod), or a pod and then its replacement."""
    pod = caches.pods.get(ref)
    slot = None
    coordinator = coordinator_slot(caches.jobsets.get(ref)) if pod is None else None
    if pod is not None:
        p = S.pod_status(pod)
        if p.workload:
            slot = (p.workload, p.replicated_job, p.job_index, p.completion_index)

    def pick() -> PodTarget | None:
        if slot is None and pod is not None:
            current = caches.pods.get(ref)
            return target(current) if current is not None else None
        candidates = []
        for raw in caches.pods.values():
            p = S.pod_status(raw)
            if slot is not None:
                ok = (p.workload, p.replicated_job, p.job_index, p.completion_index) == slot
            else:
                ok = p.workload == ref and is_coordinator(p, coordinator)
            if ok:
                # The newest attempt; then a pod not being deleted; then one that did not
                # fail (a Job replaces a failed pod, within the same second of
                # creationTimestamp's resolution); then the newest.
                candidates.append(
                    (
                        p.restart_attempt,
                        not S.meta(raw).get("deletionTimestamp"),
                        p.phase != "Failed",
                        p.created_at or 0.0,
                        raw,
                    )
                )
        if not candidates:
            return None
        return target(max(candidates, key=lambda c: c[:4])[4])

    return pick


def target(raw: Obj) -> PodTarget:
    name, restarts, started = S.main_container(raw)
    return PodTarget(
        name=str(S.meta(raw).get("name", "")),
        uid=str(S.meta(raw).get("uid", "")),
        container=name,
        restarts=restarts,
        started=started,
        terminal=S.pod_terminal(raw),
    )


def is_coordinator(p: PodStatus, slot: tuple[str, int, int] | None = None) -> bool:
    """Whose log is a workload's: the JobSet's coordinator ``slot`` (``coordinator_slot``
    of its JobSet) when known; else worker 0 of slice 0, the Pathways head, a Job's pod."""
    if slot is not None and p.replicated_job:
        return (p.replicated_job, p.job_index, p.completion_index) == slot
    if p.replicated_job == "pathways-head":
        return True
    if p.replicated_job:
        return p.replicated_job != "worker" and p.job_index == 0 and p.completion_index == 0
    return True  # a standalone Job's pod
