"""Kueue as far as xpk depends on it, and the objects `xpk cluster create` leaves behind.

xpk labels its JobSets ``kueue.x-k8s.io/queue-name: multislice-queue`` and reads Kueue's
``Workload`` objects, not JobSets: `xpk workload list` is `kubectl get workloads -o json`
(owner JobSet, podSets' counts, ``status.admission.podSetAssignments``, the latest
condition: QuotaReserved / Admitted / Evicted / Finished), and `xpk workload create` checks
`kubectl get workloads -o custom-columns=Jobset:.metadata.ownerReferences[0].name` for a
name already taken. So for every JobSet that names a queue, this controller keeps the
Workload Kueue's JobSet integration keeps (``jobset-<name>-<hash>``, owned by the JobSet,
collected with it), admits it at once (no quota accounting: the emulated scheduler is what
places pods), and marks it Finished with the JobSet's own condition message when the JobSet
ends. The JobSet is not suspended while it waits for admission, since admission is immediate.

Condition order: Kueue appends QuotaReserved then Admitted with the same timestamp; xpk takes
the condition with the latest ``lastTransitionTime`` and, on a tie, the first one. Admitted is
written first here, so xpk reads an admitted workload as Admitted (its RUNNING filter), which
is what xpk users see on GKE.
"""

from __future__ import annotations

import hashlib
from typing import Any

from emulators.gke import layout as L
from emulators.gke.events import condition, condition_true, get_condition
from emulators.gke.jobs import owner_ref, owner_uid
from emulators.gke.store import Obj, Store, now_iso

KUEUE_API = "kueue.x-k8s.io/v1beta1"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
LOCAL_QUEUE = "multislice-queue"  # xpk's LOCAL_QUEUE_NAME
CLUSTER_QUEUE = "cluster-queue"  # xpk's CLUSTER_QUEUE_NAME
FLAVOR = "1xv5p-64"  # xpk: f"{num_slices}x{device_type}" (for the default v5p-64)
JOBSET_API = "jobset.x-k8s.io/v1alpha2"
XPK_VERSION = "v1.16.0"  # the version the test tool is pinned to (xpk warns on a mismatch)


def flavor(shape: L.SliceShape) -> str:
    """xpk's ResourceFlavor name: ``1x<device type>``."""
    return f"1x{shape.tpu_type}"


def xpk_cluster_objects(
    slices: int, shape: L.SliceShape | None = None, cluster: str = L.CLUSTER
) -> list[tuple[str, Obj]]:
    """(resource, object) pairs `xpk cluster create --cluster=C --tpu-type=T --num-slices=N
    --spot` leaves: the two ConfigMaps xpk reads back, and the Kueue flavor and queues."""
    shape = shape or L.slice_shape(L.DEFAULT_TPU_TYPE)
    cm = {"apiVersion": "v1", "kind": "ConfigMap"}
    tpu_chips = slices * shape.nodes * shape.chips_per_node
    name = flavor(shape)
    return [
        (
            "configmaps",
            {
                **cm,
                "metadata": {"name": f"{cluster}-resources-configmap", "namespace": "default"},
                "data": {shape.tpu_type: str(slices * shape.nodes)},
            },
        ),
        (
            "configmaps",
            {
                **cm,
                "metadata": {"name": f"{cluster}-metadata-configmap", "namespace": "default"},
                "data": {"xpk_version": XPK_VERSION, "capacity_type": "SPOT"},
            },
        ),
        (
            "resourceflavors",
            {
                "apiVersion": KUEUE_API,
                "kind": "ResourceFlavor",
                "metadata": {"name": name},
                "spec": {
                    "nodeLabels": {
                        "cloud.google.com/gke-tpu-accelerator": shape.accelerator,
                        "cloud.google.com/gke-tpu-topology": shape.topology,
                    }
                },
            },
        ),
        (
            "clusterqueues",
            {
                "apiVersion": KUEUE_API,
                "kind": "ClusterQueue",
                "metadata": {"name": CLUSTER_QUEUE},
                "spec": {
                    "namespaceSelector": {},
                    "preemption": {"reclaimWithinCohort": "Never", "withinClusterQueue": "Never"},
                    "queueingStrategy": "BestEffortFIFO",
                    "resourceGroups": [
                        {
                            "coveredResources": ["google.com/tpu"],
                            "flavors": [
                                {
                                    "name": name,
                                    "resources": [
                                        {"name": "google.com/tpu", "nominalQuota": tpu_chips}
                                    ],
                                }
                            ],
                        }
                    ],
                },
            },
        ),
        (
            "localqueues",
            {
                "apiVersion": KUEUE_API,
                "kind": "LocalQueue",
                "metadata": {"name": LOCAL_QUEUE, "namespace": "default"},
                "spec": {"clusterQueue": CLUSTER_QUEUE},
            },
        ),
    ]


def workload_name(js: Obj) -> str:
    """Kueue's ``GetWorkloadNameForOwnerWithGVK``: ``<kind>-<name>-<5 hex of a hash>``."""
    meta = js["metadata"]
    digest = hashlib.sha256(f"{meta['name']}{JOBSET_API}JobSet".encode()).hexdigest()
    return f"jobset-{meta['name']}-{digest[:5]}"


def _pod_sets(js: Obj) -> list[Obj]:
    sets = []
    for rj in (js.get("spec") or {}).get("replicatedJobs") or []:
        job_spec = (rj.get("template") or {}).get("spec") or {}
        per_job = int(job_spec.get("parallelism") or 1)
        sets.append(
            {
                "name": rj.get("name", ""),
                "count": per_job * int(rj.get("replicas") or 1),
                "template": job_spec.get("template") or {},
            }
        )
    return sets


def _tpu_flavors(template: Obj, name: str) -> dict[str, str]:
    limits: dict[str, Any] = {}
    for c in (template.get("spec") or {}).get("containers") or []:
        limits.update((c.get("resources") or {}).get("limits") or {})
    return {"google.com/tpu": name} if "google.com/tpu" in limits else {}


class KueueController:
    """One Workload per queued JobSet: created admitted, Finished when the JobSet ends."""

    def __init__(self, store: Store, shape: L.SliceShape | None = None) -> None:
        self.store = store
        self.flavor = flavor(shape) if shape is not None else FLAVOR

    def sync(self) -> None:
        jobsets = {j["metadata"]["uid"]: j for j in self.store.list("jobsets")}
        workloads = self.store.list("workloads")
        owned = {owner_uid(w, "JobSet"): w for w in workloads}
        for wl in workloads:
            if owner_uid(wl, "JobSet") not in jobsets:  # the garbage collector's part
                meta = wl["metadata"]
                self.store.delete("workloads", meta.get("namespace", ""), meta["name"])
        for uid, js in jobsets.items():
            if QUEUE_LABEL not in (js["metadata"].get("labels") or {}):
                continue
            mine = owned.get(uid)
            if mine is None:
                self.store.create("workloads", self._admitted(js))
            else:
                self._finish(mine, js)

    def _admitted(self, js: Obj) -> Obj:
        meta = js["metadata"]
        pod_sets = _pod_sets(js)
        priority = ""
        for ps in pod_sets:
            priority = priority or (ps["template"].get("spec") or {}).get("priorityClassName", "")
        ts = now_iso()
        admitted = {**condition("Admitted", "True", "Admitted", "The workload is admitted")}
        reserved = {
            **condition(
                "QuotaReserved",
                "True",
                "QuotaReserved",
                f"Quota reserved in ClusterQueue {CLUSTER_QUEUE}",
            )
        }
        admitted["lastTransitionTime"] = reserved["lastTransitionTime"] = ts
        return {
            "apiVersion": KUEUE_API,
            "kind": "Workload",
            "metadata": {
                "name": workload_name(js),
                "namespace": meta.get("namespace", L.NAMESPACE),
                "labels": {"kueue.x-k8s.io/job-uid": meta["uid"]},
                "ownerReferences": [owner_ref(js, "JobSet", JOBSET_API)],
            },
            "spec": {
                "active": True,
                "queueName": meta["labels"][QUEUE_LABEL],
                "podSets": pod_sets,
                **({"priorityClassName": priority} if priority else {}),
            },
            "status": {
                "admission": {
                    "clusterQueue": CLUSTER_QUEUE,
                    "podSetAssignments": [
                        {
                            "name": ps["name"],
                            "count": ps["count"],
                            "flavors": _tpu_flavors(ps["template"], self.flavor),
                        }
                        for ps in pod_sets
                    ],
                },
                "conditions": [admitted, reserved],
            },
        }

    def _finish(self, wl: Obj, js: Obj) -> None:
        if condition_true(wl, "Finished"):
            return
        for kind, reason in (("Completed", "Succeeded"), ("Failed", "Failed")):
            if condition_true(js, kind):
                ended = get_condition(js, kind) or {}
                message = str(ended.get("message") or f"jobset {kind.lower()}")

                def mark(new: Obj, reason: str = reason, message: str = message) -> None:
                    new["status"]["conditions"].append(
                        condition("Finished", "True", reason, message)
                    )

                self.store.mutate("workloads", wl, mark)
                return
