"""The Job controller (batch/v1) and the garbage collector, with the rules xpk relies on:
Indexed completion, backoffLimit (container restarts count under OnFailure),
podFailurePolicy on exit codes and pod conditions, suspend, replacement pods with the
controller's exponential back-off."""

from __future__ import annotations

import copy
import time
from typing import Any

from emulators.gke.events import Recorder, condition, condition_true, set_condition
from emulators.gke.priority import UnknownPriorityClass, resolve_priority
from emulators.gke.store import Obj, Store, now_iso, rand_suffix

TERMINAL = ("Succeeded", "Failed")
INDEX_KEY = "batch.kubernetes.io/job-completion-index"


def apply_pod_defaults(spec: Obj) -> None:
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("serviceAccountName", "default")
    spec.setdefault("securityContext", {})
    spec.setdefault("enableServiceLinks", True)
    spec.setdefault("preemptionPolicy", "PreemptLowerPriority")
    spec.setdefault("priority", 0)
    for c in list(spec.get("containers") or []) + list(spec.get("initContainers") or []):
        c.setdefault(
            "imagePullPolicy",
            "Always"
            if str(c.get("image", "")).endswith(":latest")
            or ":" not in str(c.get("image", "")).rsplit("/", 1)[-1]
            else "IfNotPresent",
        )
        c.setdefault("terminationMessagePath", "/dev/termination-log")
        c.setdefault("terminationMessagePolicy", "File")
        c.setdefault("resources", {})


def apply_job_defaults(job: Obj) -> None:
    spec = job.setdefault("spec", {})
    spec.setdefault("completionMode", "NonIndexed")
    if spec.get("completions") is None and spec.get("parallelism") is None:
        spec["completions"] = 1
    spec.setdefault("parallelism", 1)
    spec.setdefault("backoffLimit", 6)
    spec.setdefault("suspend", False)
    spec.setdefault("manualSelector", False)
    spec.setdefault("podReplacementPolicy", "TerminatingOrFailed")
    tmpl = spec.setdefault("template", {})
    apply_pod_defaults(tmpl.setdefault("spec", {}))


def label_job(job: Obj) -> None:
    """Selector and template labels the API server adds once the Job has its uid."""
    meta, spec = job["metadata"], job["spec"]
    uid, name = meta["uid"], meta["name"]
    spec["selector"] = {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}
    tmeta = spec["template"].setdefault("metadata", {})
    tmeta.setdefault("labels", {}).update(
        {
            "batch.kubernetes.io/controller-uid": uid,
            "batch.kubernetes.io/job-name": name,
            "controller-uid": uid,
            "job-name": name,
        }
    )
    meta.setdefault("labels", {}).update(
        {
            "batch.kubernetes.io/controller-uid": uid,
            "batch.kubernetes.io/job-name": name,
            "controller-uid": uid,
            "job-name": name,
        }
    )


def owner_ref(obj: Obj, kind: str, api_version: str) -> Obj:
    return {
        "apiVersion": api_version,
        "kind": kind,
        "name": obj["metadata"]["name"],
        "uid": obj["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def owner_uid(obj: Obj, kind: str) -> str | None:
    for ref in obj["metadata"].get("ownerReferences") or []:
        if ref.get("kind") == kind and ref.get("controller"):
            return str(ref.get("uid"))
    return None


TRACKING_FINALIZER = "batch.kubernetes.io/job-tracking"


def remove_pod(store: Store, pod: Obj) -> None:
    """The API server's last step of a pod's deletion: gone, unless a finalizer (the Job
    controller's tracking one) holds it; then it stays, with its deletionTimestamp, until
    the holder has counted it and lets go."""
    meta = pod["metadata"]
    if not meta.get("finalizers"):
        store.delete("pods", meta.get("namespace", ""), meta["name"])
    elif not meta.get("deletionTimestamp"):

        def mark(p: Obj) -> None:
            p["metadata"]["deletionTimestamp"] = now_iso()
            p["metadata"]["deletionGracePeriodSeconds"] = 0

        store.mutate("pods", pod, mark)


def delete_pod(store: Store, pod: Obj, grace: float | None = None) -> None:
    """Graceful deletion: a running pod gets deletionTimestamp and the kubelet stops it."""
    meta = pod["metadata"]
    if meta.get("deletionTimestamp"):
        return
    phase = (pod.get("status") or {}).get("phase")
    if not pod["spec"].get("nodeName") or phase in TERMINAL:
        remove_pod(store, pod)
        return
    seconds = int(pod["spec"].get("terminationGracePeriodSeconds", 30) if grace is None else grace)

    def mark(p: Obj) -> None:
        p["metadata"]["deletionTimestamp"] = now_iso()
        p["metadata"]["deletionGracePeriodSeconds"] = seconds

    store.mutate("pods", pod, mark)


def mark_gc_failed(p: Obj) -> None:
    """What the pod GC writes on a pod whose node is gone before deleting it."""
    st = p.setdefault("status", {})
    set_condition(
        st.setdefault("conditions", []),
        condition(
            "DisruptionTarget", "True", "DeletionByPodGC", "PodGC: node no longer exists", True
        ),
    )
    st["phase"] = "Failed"


def _exit_codes(pod: Obj) -> list[tuple[str, int]]:
    st = pod.get("status") or {}
    out = []
    for cs in (st.get("initContainerStatuses") or []) + (st.get("containerStatuses") or []):
        term = (cs.get("state") or {}).get("terminated")
        if term is not None:
            out.append((cs["name"], int(term.get("exitCode", 0))))
    return out


def match_pod_failure_policy(job: Obj, pod: Obj) -> tuple[int, Obj, str] | None:
    """(rule index, rule, container) of the first podFailurePolicy rule ``pod`` matches."""
    rules = ((job["spec"].get("podFailurePolicy") or {}).get("rules")) or []
    codes = _exit_codes(pod)
    conds = {
        (c.get("type"), c.get("status")) for c in (pod.get("status") or {}).get("conditions") or []
    }
    for i, rule in enumerate(rules):
        on_codes = rule.get("onExitCodes")
        if on_codes is not None:
            values = set(on_codes.get("values") or [])
            want = on_codes.get("containerName")
            for cname, code in codes:
                if code == 0 or (want and want != cname):
                    continue  # successful containers are never matched
                hit = code in values if on_codes.get("operator") == "In" else code not in values
                if hit:
                    return i, rule, f"{cname}:{code}"
            continue
        for pc in rule.get("onPodConditions") or []:
            if (pc.get("type"), pc.get("status", "True")) in conds:
                return i, rule, ""
    return None


def _index_ranges(indexes: list[int]) -> str:
    out: list[str] = []
    for i in sorted(set(indexes)):
        if out and out[-1].split("-")[-1] == str(i - 1):
            out[-1] = f"{out[-1].split('-')[0]}-{i}"
        else:
            out.append(str(i))
    return ",".join(out)


class JobController:
    def __init__(self, store: Store, recorder: Recorder, backoff_base: float) -> None:
        self.store = store
        self.recorder = recorder
        self.backoff_base = backoff_base
        self.counted: dict[str, set[str]] = {}
        self.failures: dict[str, list[float]] = {}
        self.wake_at: float | None = None  # earliest pending back-off expiry

    def sync(self) -> None:
        self.wake_at = None
        self._collect_garbage()
        for job in self.store.list("jobs"):
            self._sync(job)

    def _collect_garbage(self) -> None:
        jobsets = {j["metadata"]["uid"] for j in self.store.list("jobsets")}
        for job in self.store.list("jobs"):
            owner = owner_uid(job, "JobSet")
            if (
                owner is not None
                and owner not in jobsets
                and not job["metadata"].get("deletionTimestamp")
            ):
                self.delete_job(job)
        for svc in self.store.list("services"):
            owner = owner_uid(svc, "JobSet")
            if owner is not None and owner not in jobsets:
                meta = svc["metadata"]
                self.store.delete("services", meta.get("namespace", ""), meta["name"])
        jobs = {j["metadata"]["uid"] for j in self.store.list("jobs")}
        for pod in self.store.list("pods"):
            owner = owner_uid(pod, "Job")
            if owner is not None and owner not in jobs:
                delete_pod(self.store, pod)

    def collect_pods_on(self, nodes: set[str]) -> list[Obj]:
        """The pod GC for deleted nodes: removes the pods bound to them, returned.

        Counts their failures first. In a cluster the Job controller's job-tracking
        finalizer (``batch.kubernetes.io/job-tracking``) holds each of a Job's pods until it
        has counted it, so a pod that failed just before its node went is never lost from
        ``status.failed``; without this, one the controller had not seen yet was. A pod
        still active there (its node died and nothing reported it) is failed first, as the
        pod GC does (``DeletionByPodGC``), so its Job counts it."""
        for pod in self.store.list("pods"):
            phase = (pod.get("status") or {}).get("phase")
            if pod["spec"].get("nodeName") in nodes and phase not in TERMINAL:
                self.store.mutate("pods", pod, mark_gc_failed)
        self.sync()
        gone = []
        for pod in self.store.list("pods"):
            if pod["spec"].get("nodeName") in nodes:
                meta = pod["metadata"]
                self.store.delete("pods", meta.get("namespace", ""), meta["name"])
                gone.append(pod)
        return gone

    def delete_job(self, job: Obj) -> None:
        """Foreground deletion: the Job stays (deletionTimestamp) until its pods are gone."""

        def mark(j: Obj) -> None:
            j["metadata"]["deletionTimestamp"] = now_iso()
            j["metadata"]["finalizers"] = ["foregroundDeletion"]

        if not job["metadata"].get("deletionTimestamp"):
            self.store.mutate("jobs", job, mark)

    def _pods(self, job: Obj) -> list[Obj]:
        uid = job["metadata"]["uid"]
        return [
            p
            for p in self.store.list("pods")
            if (p["metadata"].get("labels") or {}).get("batch.kubernetes.io/controller-uid") == uid
        ]

    def _sync(self, job: Obj) -> None:
        meta, spec = job["metadata"], job["spec"]
        uid = meta["uid"]
        pods = self._pods(job)
        if meta.get("deletionTimestamp"):
            for p in pods:
                delete_pod(self.store, p)
            self._release(pods, everything=True)
            if not pods:
                self.store.delete("jobs", meta.get("namespace", ""), meta["name"])
                self.counted.pop(uid, None)
            return
        live = [p for p in pods if (p.get("status") or {}).get("phase") not in TERMINAL]
        active = [p for p in live if not p["metadata"].get("deletionTimestamp")]
        finished = condition_true(job, "Complete") or condition_true(job, "Failed")
        status = copy.deepcopy(job.get("status") or {})
        conds = status.setdefault("conditions", [])
        if finished or spec.get("suspend"):
            for p in active:
                delete_pod(self.store, p)
            if spec.get("suspend") and not finished:
                set_condition(
                    conds,
                    condition("Suspended", "True", "JobSuspended", "Job suspended", probe=True),
                )
            self._write_status(job, status, pods, [])
            self._release(pods, everything=bool(finished))
            return
        if condition_true(job, "Suspended"):
            set_condition(
                conds, condition("Suspended", "False", "JobResumed", "Job resumed", probe=True)
            )
        status.setdefault("startTime", now_iso())
        # Failures: each failed pod once, through the pod failure policy.
        counted = self.counted.setdefault(uid, set())
        failed = int(status.get("failed", 0))
        fail_message = ""
        for p in pods:
            puid = p["metadata"]["uid"]
            if (p.get("status") or {}).get("phase") != "Failed" or puid in counted:
                continue
            counted.add(puid)
            hit = match_pod_failure_policy(job, p)
            action = hit[1].get("action") if hit else "Count"
            if action == "Ignore":
                continue
            failed += 1
            self.failures.setdefault(uid, []).append(time.monotonic())
            if action == "FailJob" and hit is not None and not fail_message:
                cname, _, code = hit[2].partition(":")
                pm = p["metadata"]
                fail_message = (
                    f"Container {cname} for pod {pm.get('namespace', '')}/{pm['name']} failed "
                    f"with exit code {code} matching FailJob rule at index {hit[0]}"
                    if cname
                    else f"Pod {pm.get('namespace', '')}/{pm['name']} has condition matching "
                    f"FailJob rule at index {hit[0]}"
                )
        status["failed"] = failed
        restarts = 0
        # Failures are in status.failed now: their pods may go (Succeeded ones still count
        # from the pods themselves, so they keep the finalizer while the Job runs).
        self._release(pods, everything=False)
        if spec["template"]["spec"].get("restartPolicy") == "OnFailure":
            restarts = sum(
                int(cs.get("restartCount", 0))
                for p in live
                for cs in (p.get("status") or {}).get("containerStatuses") or []
            )
        if fail_message:
            self._fail(job, status, "PodFailurePolicy", fail_message, active)
            self._write_status(job, status, pods, [])
            return
        if failed + restarts > int(spec.get("backoffLimit", 6)):
            self._fail(
                job,
                status,
                "BackoffLimitExceeded",
                "Job has reached the specified backoff limit",
                active,
            )
            self._write_status(job, status, pods, [])
            return
        indexed = spec.get("completionMode") == "Indexed"
        done = [p for p in pods if (p.get("status") or {}).get("phase") == "Succeeded"]
        done_idx = (
            sorted({int((p["metadata"].get("annotations") or {}).get(INDEX_KEY, 0)) for p in done})
            if indexed
            else []
        )
        completions = spec.get("completions")
        n_done = len(done_idx) if indexed else len(done)
        if completions is not None and n_done >= int(completions):
            stamp = now_iso()
            set_condition(
                conds,
                condition(
                    "SuccessCriteriaMet",
                    "True",
                    "CompletionsReached",
                    "Reached expected number of succeeded pods",
                    True,
                ),
            )
            set_condition(
                conds,
                condition(
                    "Complete",
                    "True",
                    "CompletionsReached",
                    "Reached expected number of succeeded pods",
                    True,
                ),
            )
            status["completionTime"] = stamp
            self.recorder.emit(job, "Job", "Normal", "Completed", "Job completed", "job-controller")
            self._write_status(job, status, pods, done_idx)
            return
        if self._backing_off(uid, failed):
            self._write_status(job, status, pods, done_idx)
            return
        want: list[int | None]
        if indexed:
            have = {int((p["metadata"].get("annotations") or {}).get(INDEX_KEY, -1)) for p in live}
            want = [i for i in range(int(completions or 0)) if i not in have and i not in done_idx]
        else:
            parallel = int(spec.get("parallelism", 1))
            remaining = (int(completions) - n_done) if completions is not None else parallel
            want = [None] * max(0, min(parallel, remaining) - len(live))
        for index in want:
            self._create_pod(job, index)
        self._write_status(job, status, pods, done_idx)

    def _release(self, pods: list[Obj], *, everything: bool) -> None:
        """Take the tracking finalizer off the pods this Job has counted (the Failed ones;
        with ``everything``, every finished one), so a deleted pod goes once it is counted."""
        for p in pods:
            phase = (p.get("status") or {}).get("phase")
            fins = p["metadata"].get("finalizers") or []
            if TRACKING_FINALIZER not in fins or phase not in TERMINAL:
                continue
            if phase != "Failed" and not everything:
                continue

            def drop(o: Obj) -> None:
                left = [f for f in o["metadata"].get("finalizers") or [] if f != TRACKING_FINALIZER]
                if left:
                    o["metadata"]["finalizers"] = left
                else:
                    o["metadata"].pop("finalizers", None)

            p = self.store.mutate("pods", p, drop)
            if p["metadata"].get("deletionTimestamp") and not p["metadata"].get("finalizers"):
                meta = p["metadata"]
                self.store.delete("pods", meta.get("namespace", ""), meta["name"])

    def _backing_off(self, uid: str, failed: int) -> bool:
        if failed == 0 or self.backoff_base <= 0:
            return False
        last = self.failures.get(uid, [0.0])[-1]
        delay = min(self.backoff_base * 2 ** (failed - 1), 360.0)
        ready_at = last + delay
        if time.monotonic() < ready_at:
            self.wake_at = ready_at if self.wake_at is None else min(self.wake_at, ready_at)
            return True
        return False

    def _fail(self, job: Obj, status: Obj, reason: str, message: str, active: list[Obj]) -> None:
        conds = status.setdefault("conditions", [])
        set_condition(conds, condition("FailureTarget", "True", reason, message, probe=True))
        set_condition(conds, condition("Failed", "True", reason, message, probe=True))
        self.recorder.emit(job, "Job", "Warning", reason, message, "job-controller")
        for p in active:
            delete_pod(self.store, p)

    def _write_status(self, job: Obj, status: Obj, pods: list[Obj], done_idx: list[int]) -> None:
        live = [p for p in pods if (p.get("status") or {}).get("phase") not in TERMINAL]
        status["active"] = sum(1 for p in live if not p["metadata"].get("deletionTimestamp"))
        status["terminating"] = sum(1 for p in live if p["metadata"].get("deletionTimestamp"))
        status["ready"] = sum(
            1
            for p in live
            if any(
                c.get("type") == "Ready" and c.get("status") == "True"
                for c in (p.get("status") or {}).get("conditions") or []
            )
        )
        status["succeeded"] = sum(
            1 for p in pods if (p.get("status") or {}).get("phase") == "Succeeded"
        )
        status["uncountedTerminatedPods"] = {}
        if done_idx:
            status["completedIndexes"] = _index_ranges(done_idx)
        for key in ("active", "failed", "succeeded", "terminating"):
            if not status.get(key):
                status.pop(key, None)
        if not status.get("conditions"):
            status.pop("conditions", None)

        def put(j: Obj) -> None:
            j["status"] = status

        self.store.mutate("jobs", job, put)

    def _create_pod(self, job: Obj, index: int | None) -> None:
        meta, spec = job["metadata"], job["spec"]
        tmpl = copy.deepcopy(spec["template"])
        pmeta: dict[str, Any] = copy.deepcopy(tmpl.get("metadata") or {})
        pspec = tmpl["spec"]
        labels = pmeta.setdefault("labels", {})
        annotations = pmeta.setdefault("annotations", {})
        if index is not None:
            labels[INDEX_KEY] = str(index)
            annotations[INDEX_KEY] = str(index)
            pmeta["name"] = f"{meta['name']}-{index}-{rand_suffix()}"
            if pspec.get("subdomain"):
                pspec.setdefault("hostname", f"{meta['name']}-{index}")
            for c in list(pspec.get("containers") or []) + list(pspec.get("initContainers") or []):
                env = c.setdefault("env", [])
                if not any(e.get("name") == "JOB_COMPLETION_INDEX" for e in env):
                    env.insert(
                        0,
                        {
                            "name": "JOB_COMPLETION_INDEX",
                            "valueFrom": {
                                "fieldRef": {
                                    "apiVersion": "v1",
                                    "fieldPath": f"metadata.annotations['{INDEX_KEY}']",
                                }
                            },
                        },
                    )
        else:
            pmeta["name"] = f"{meta['name']}-{rand_suffix()}"
        pmeta["namespace"] = meta.get("namespace", "default")
        pmeta["ownerReferences"] = [owner_ref(job, "Job", "batch/v1")]
        pmeta["finalizers"] = [TRACKING_FINALIZER]
        pmeta.pop("creationTimestamp", None)
        try:
            resolve_priority(self.store, pspec)
        except UnknownPriorityClass as exc:
            # The API server refuses the pod: the Job controller reports it and tries later.
            self.recorder.emit(
                job, "Job", "Warning", "FailedCreate", f"Error creating: {exc}", "job-controller"
            )
            return
        apply_pod_defaults(pspec)
        pod = {
            "kind": "Pod",
            "apiVersion": "v1",
            "metadata": pmeta,
            "spec": pspec,
            "status": {"phase": "Pending", "qosClass": "BestEffort"},
        }
        self.store.create("pods", pod)
        self.recorder.emit(
            job,
            "Job",
            "Normal",
            "SuccessfulCreate",
            f"Created pod: {pmeta['name']}",
            "job-controller",
        )
