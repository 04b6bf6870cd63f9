"""The JobSet controller (jobset.x-k8s.io/v1alpha2), after kubernetes-sigs/jobset's
pkg/controllers: child Jobs named ``<jobset>-<replicatedJob>-<index>`` with the jobset.sigs.k8s.io
labels, ``status.restarts`` driving Recreate restarts (older restart-attempt Jobs deleted),
failurePolicy rules and maxRestarts, successPolicy, startupPolicy InOrder, suspend,
replicatedJobsStatus, the Completed/Failed/Suspended conditions and terminalState."""

from __future__ import annotations

import copy
import hashlib
import re

from emulators.gke.events import Recorder, condition, condition_true, set_condition
from emulators.gke.jobs import JobController, apply_job_defaults, label_job, owner_ref
from emulators.gke.services import ensure_jobset_service
from emulators.gke.store import Obj, Store

P = "jobset.sigs.k8s.io/"
RESTARTS_KEY = P + "restart-attempt"
API_VERSION = "jobset.x-k8s.io/v1alpha2"


def apply_jobset_defaults(js: Obj) -> None:
    """The JobSet mutating webhook plus the CRD schema defaults."""
    spec = js["spec"]
    spec.setdefault("successPolicy", {"operator": "All"})
    spec.setdefault("startupPolicy", {"startupPolicyOrder": "AnyOrder"})
    net = spec.setdefault("network", {})
    net.setdefault("enableDNSHostnames", True)
    net.setdefault("publishNotReadyAddresses", True)
    for rj in spec.get("replicatedJobs") or []:
        rj.setdefault("replicas", 1)
        rj.setdefault("groupName", "default")
        jspec = rj.setdefault("template", {}).setdefault("spec", {})
        jspec.setdefault("completionMode", "Indexed")
        jspec.setdefault("template", {}).setdefault("spec", {}).setdefault(
            "restartPolicy", "OnFailure"
        )
    for i, rule in enumerate((spec.get("failurePolicy") or {}).get("rules") or []):
        rule.setdefault("name", f"failurePolicyRule{i}")


def _failed_job_condition(job: Obj) -> Obj:
    for c in (job.get("status") or {}).get("conditions") or []:
        if c.get("type") == "Failed" and c.get("status") == "True":
            return c
    return {}


class JobSetController:
    def __init__(self, store: Store, recorder: Recorder, jobs: JobController) -> None:
        self.store = store
        self.recorder = recorder
        self.jobs = jobs

    def sync(self) -> None:
        for js in self.store.list("jobsets"):
            self._sync(js)

    def _children(self, js: Obj) -> list[Obj]:
        uid = js["metadata"]["uid"]
        return [
            j
            for j in self.store.list("jobs")
            if (j["metadata"].get("labels") or {}).get(P + "jobset-uid") == uid
        ]

    def _sync(self, js: Obj) -> None:
        spec = js["spec"]
        ensure_jobset_service(self.store, js)
        status = copy.deepcopy(js.get("status") or {})
        status.setdefault("restarts", 0)
        restarts = int(status["restarts"])
        previous, active, failed, succeeded = [], [], [], []
        for j in self._children(js):
            attempt = int((j["metadata"].get("labels") or {}).get(RESTARTS_KEY, "0"))
            if attempt < restarts:
                previous.append(j)
            elif j["metadata"].get("deletionTimestamp"):
                continue
            elif condition_true(j, "Failed"):
                failed.append(j)
            elif condition_true(j, "Complete"):
                succeeded.append(j)
            else:
                active.append(j)
        status["replicatedJobsStatus"] = self._rjob_statuses(js, active, failed, succeeded)
        conds = status.setdefault("conditions", [])
        if condition_true(js, "Completed") or condition_true(js, "Failed"):
            for j in active:
                self.jobs.delete_job(j)
            self._put(js, status)
            return
        for j in previous:
            self.jobs.delete_job(j)
        if failed:
            self._failure_policy(js, status, failed)
            self._put(js, status)
            return
        if succeeded and self._succeeded(js, succeeded):
            set_condition(
                conds,
                condition("Completed", "True", "AllJobsCompleted", "jobset completed successfully"),
            )
            self._restarting_false(conds, "JobSetCompleted", "jobset completed successfully")
            status["terminalState"] = "Completed"
            self.recorder.emit(
                js,
                "JobSet",
                "Normal",
                "AllJobsCompleted",
                "jobset completed successfully",
                "jobset-controller",
            )
            self._put(js, status)
            return
        suspended = bool(spec.get("suspend"))
        self._create_jobs(js, status, active + succeeded, previous, suspended)

        def set_suspend(o: Obj) -> None:
            o["spec"]["suspend"] = suspended

        for j in active:
            if bool(j["spec"].get("suspend")) != suspended:
                self.store.mutate("jobs", j, set_suspend)
        if suspended:
            if set_condition(
                conds, condition("Suspended", "True", "SuspendedJobs", "jobset is suspended")
            ):
                self._restarting_false(conds, "JobSetSuspended", "jobset is suspended")
                self.recorder.emit(
                    js,
                    "JobSet",
                    "Normal",
                    "SuspendedJobs",
                    "jobset is suspended",
                    "jobset-controller",
                )
        elif condition_true(js, "Suspended"):
            set_condition(conds, condition("Suspended", "False", "ResumeJobs", "jobset is resumed"))
        elif self._all_ready(js, status) and any(
            c.get("type") == "RestartingJobSet" for c in conds
        ):
            self._restarting_false(conds, "JobsReady", "all jobs are ready")
        self._put(js, status)

    # --- status -------------------------------------------------------------------------

    def _rjob_statuses(
        self, js: Obj, active: list[Obj], failed: list[Obj], succeeded: list[Obj]
    ) -> list[Obj]:
        out = []
        for rj in js["spec"]["replicatedJobs"]:
            name = rj["name"]

            def mine(j: Obj, n: str = name) -> bool:
                return (j["metadata"].get("labels") or {}).get(P + "replicatedjob-name") == n

            ready = 0
            for j in filter(mine, active):
                st = j.get("status") or {}
                pods = int(j["spec"].get("parallelism", 1))
                if j["spec"].get("completions") is not None:
                    pods = min(pods, int(j["spec"]["completions"]))
                if int(st.get("succeeded", 0)) + int(st.get("ready", 0)) >= pods:
                    ready += 1
            out.append(
                {
                    "name": name,
                    "ready": ready,
                    "succeeded": sum(1 for _ in filter(mine, succeeded)),
                    "failed": sum(1 for _ in filter(mine, failed)),
                    "active": sum(
                        1
                        for j in filter(mine, active)
                        if int((j.get("status") or {}).get("active", 0)) > 0
                    ),
                    "suspended": sum(1 for j in filter(mine, active) if j["spec"].get("suspend")),
                }
            )
        return out

    def _all_ready(self, js: Obj, status: Obj) -> bool:
        want = {rj["name"]: int(rj.get("replicas", 1)) for rj in js["spec"]["replicatedJobs"]}
        have = {s["name"]: s["ready"] + s["succeeded"] for s in status["replicatedJobsStatus"]}
        return all(have.get(k, 0) >= v for k, v in want.items())

    def _put(self, js: Obj, status: Obj) -> None:
        if not status.get("conditions"):
            status.pop("conditions", None)

        def put(o: Obj) -> None:
            o["status"] = status

        self.store.mutate("jobsets", js, put)

    @staticmethod
    def _restarting_false(conds: list[Obj], reason: str, message: str) -> None:
        if any(c.get("type") == "RestartingJobSet" for c in conds):
            set_condition(conds, condition("RestartingJobSet", "False", reason, message))

    # --- policies -----------------------------------------------------------------------

    def _succeeded(self, js: Obj, succeeded: list[Obj]) -> bool:
        sp = js["spec"].get("successPolicy") or {"operator": "All"}
        targets = sp.get("targetReplicatedJobs") or []

        def matches(name: str) -> bool:
            return not targets or name in targets

        n = sum(
            1
            for j in succeeded
            if matches((j["metadata"].get("labels") or {}).get(P + "replicatedjob-name", ""))
        )
        if sp.get("operator") == "Any":
            return n >= 1
        expected = sum(
            int(rj.get("replicas", 1)) for rj in js["spec"]["replicatedJobs"] if matches(rj["name"])
        )
        return n >= expected

    def _failure_policy(self, js: Obj, status: Obj, failed: list[Obj]) -> None:
        conds = status["conditions"]
        fp = js["spec"].get("failurePolicy")
        first = min(failed, key=lambda j: _failed_job_condition(j).get("lastTransitionTime", ""))
        if fp is None:
            self._fail(
                js,
                status,
                "FailedJobs",
                f"jobset failed due to one or more job failures (first failed job: "
                f"{first['metadata']['name']})",
            )
            return
        rule, job = None, first
        for r in fp.get("rules") or []:
            hits = [j for j in failed if self._rule_applies(r, j)]
            if hits:
                rule = r
                job = min(
                    hits, key=lambda j: _failed_job_condition(j).get("lastTransitionTime", "")
                )
                break
        action = rule.get("action") if rule else "RestartJobSet"
        jname = job["metadata"]["name"]
        if action == "FailJobSet":
            self._fail(
                js,
                status,
                "FailJobSetFailurePolicyAction",
                f"applying FailJobSet failure policy action (first failed job: {jname})",
            )
            return
        counts = action == "RestartJobSet"
        if counts and int(status.get("restartsCountTowardsMax", 0)) >= int(
            fp.get("maxRestarts", 0)
        ):
            self._fail(
                js,
                status,
                "ReachedMaxRestarts",
                f"jobset failed due to reaching max number of restarts (first failed job: {jname})",
            )
            return
        if action in ("RestartJob", "RestartJobAndIgnoreMaxRestarts"):
            action = "RestartJobSet" if counts else "RestartJobSetAndIgnoreMaxRestarts"
        reason = (
            "RestartJobSetFailurePolicyAction"
            if action == "RestartJobSet"
            else "RestartJobSetAndIgnoreMaxRestartsFailurePolicyAction"
        )
        base = (
            "applying RestartJobSet failure policy action"
            if action == "RestartJobSet"
            else "applying RestartJobSetAndIgnoreMaxRestarts failure policy action"
        )
        message = f"{base} (first failed job: {jname})"
        status["restarts"] = int(status.get("restarts", 0)) + 1
        if counts:
            status["restartsCountTowardsMax"] = int(status.get("restartsCountTowardsMax", 0)) + 1
        cond_reason = f"FailurePolicy_{rule['name']}" if rule else "DefaultFailurePolicy"
        set_condition(conds, condition("RestartingJobSet", "True", cond_reason, message))
        self.recorder.emit(js, "JobSet", "Warning", reason, message, "jobset-controller")

    @staticmethod
    def _rule_applies(rule: Obj, job: Obj) -> bool:
        cond = _failed_job_condition(job)
        reasons = rule.get("onJobFailureReasons") or []
        if reasons and cond.get("reason") not in reasons:
            return False
        patterns = rule.get("onJobFailureMessagePatterns") or []
        if patterns and not any(re.search(p, cond.get("message", "")) for p in patterns):
            return False
        targets = rule.get("targetReplicatedJobs") or []
        rjob = (job["metadata"].get("labels") or {}).get(P + "replicatedjob-name", "")
        return not targets or rjob in targets

    def _fail(self, js: Obj, status: Obj, reason: str, message: str) -> None:
        conds = status["conditions"]
        set_condition(conds, condition("Failed", "True", reason, message))
        self._restarting_false(conds, "JobSetFailed", "jobset failed")
        status["terminalState"] = "Failed"
        self.recorder.emit(js, "JobSet", "Warning", reason, message, "jobset-controller")

    # --- children -----------------------------------------------------------------------

    def _create_jobs(
        self, js: Obj, status: Obj, existing: list[Obj], previous: list[Obj], suspended: bool
    ) -> None:
        spec = js["spec"]
        fp = spec.get("failurePolicy") or {}
        if previous and fp.get("restartStrategy") == "BlockingRecreate":
            return
        taken = {j["metadata"]["name"] for j in existing + previous}
        taken |= {j["metadata"]["name"] for j in self._children(js)}
        in_order = (spec.get("startupPolicy") or {}).get("startupPolicyOrder") == "InOrder"
        for rj in spec["replicatedJobs"]:
            for idx in range(int(rj.get("replicas", 1))):
                name = f"{js['metadata']['name']}-{rj['name']}-{idx}"
                if name not in taken:
                    self._create_job(js, rj, idx, int(status.get("restarts", 0)), suspended)
            if in_order and not self._rjob_ready(rj, status):
                return  # InOrder: the next replicatedJob waits for this one to be ready

    @staticmethod
    def _rjob_ready(rj: Obj, status: Obj) -> bool:
        for s in status.get("replicatedJobsStatus") or []:
            if s["name"] == rj["name"]:
                return int(s["ready"]) + int(s["succeeded"]) >= int(rj.get("replicas", 1))
        return False

    def _create_job(self, js: Obj, rj: Obj, idx: int, restarts: int, suspended: bool) -> None:
        meta = js["metadata"]
        ns = meta.get("namespace", "default")
        name = f"{meta['name']}-{rj['name']}-{idx}"
        tmpl = copy.deepcopy(rj["template"])
        jspec = tmpl.get("spec") or {}
        total = sum(int(r.get("replicas", 1)) for r in js["spec"]["replicatedJobs"])
        offset = 0  # job-global-index: replicas of the earlier replicatedJobs + idx
        for r in js["spec"]["replicatedJobs"]:
            if r["name"] == rj["name"]:
                break
            offset += int(r.get("replicas", 1))
        group = rj.get("groupName", "default")
        group_jobs = [
            r for r in js["spec"]["replicatedJobs"] if r.get("groupName", "default") == group
        ]
        group_offset = 0
        for r in group_jobs:
            if r["name"] == rj["name"]:
                break
            group_offset += int(r.get("replicas", 1))
        marks = {
            P + "jobset-name": meta["name"],
            P + "jobset-uid": meta["uid"],
            P + "replicatedjob-name": rj["name"],
            RESTARTS_KEY: str(restarts),
            P + "replicatedjob-replicas": str(rj.get("replicas", 1)),
            P + "global-replicas": str(total),
            P + "job-index": str(idx),
            P + "job-key": hashlib.sha1(f"{ns}/{name}".encode()).hexdigest(),
            P + "job-global-index": str(offset + idx),
            P + "group-name": group,
            P + "group-replicas": str(sum(int(r.get("replicas", 1)) for r in group_jobs)),
            P + "job-group-index": str(group_offset + idx),
        }
        coord = js["spec"].get("coordinator")
        subdomain = (js["spec"].get("network") or {}).get("subdomain") or meta["name"]
        if coord:
            marks[P + "coordinator"] = (
                f"{meta['name']}-{coord['replicatedJob']}-{coord.get('jobIndex', 0)}-"
                f"{coord.get('podIndex', 0)}.{subdomain}"
            )
        jmeta = tmpl.get("metadata") or {}
        job_annotations = dict(jmeta.get("annotations") or {})
        for key in ("alpha.jobset.sigs.k8s.io/exclusive-topology",):
            if key in (meta.get("annotations") or {}):
                job_annotations[key] = meta["annotations"][key]
        ptmpl = jspec.setdefault("template", {})
        pmeta = ptmpl.setdefault("metadata", {})
        pmeta["labels"] = {**(pmeta.get("labels") or {}), **marks}
        pmeta["annotations"] = {
            **(pmeta.get("annotations") or {}),
            **marks,
            **{
                k: v
                for k, v in job_annotations.items()
                if k.startswith("alpha.jobset.sigs.k8s.io/")
            },
        }
        if (js["spec"].get("network") or {}).get("enableDNSHostnames"):
            ptmpl.setdefault("spec", {})["subdomain"] = subdomain
        jspec["suspend"] = suspended
        job: Obj = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {
                "name": name,
                "namespace": ns,
                "labels": {**(jmeta.get("labels") or {}), **marks},
                "annotations": {**job_annotations, **marks},
                "ownerReferences": [owner_ref(js, "JobSet", API_VERSION)],
            },
            "spec": jspec,
        }
        apply_job_defaults(job)
        if self.store.get("jobs", ns, name) is not None:
            return  # AlreadyExists: a Job of a deleted JobSet is still going; retry later
        self.store.create("jobs", job)
        created = self.store.get("jobs", ns, name)
        if created is not None:
            self.store.mutate("jobs", created, label_job)
