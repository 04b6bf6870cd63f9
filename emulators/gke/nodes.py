"""Node pools (TPU slices of one type, v5p-64 by default, + cpu-np) and the scheduler that binds pods to their nodes.

The scheduler runs the filters that matter for xpk workloads: node Ready and schedulable,
nodeSelector / required node affinity, NoSchedule/NoExecute taints against tolerations,
google.com/tpu capacity, and JobSet exclusive placement (one job per topology domain); its
queue takes higher priorities first, and a pod that fits nowhere preempts pods of lower
priority (DefaultPreemption) and is nominated to a node (``status.nominatedNodeName``). As in
kube-scheduler, a nominated pod holds its node while its victims terminate: every filter counts
the pods nominated to a node with a priority at least the scheduled pod's as if they ran there
(``RunFilterPluginsWithNominatedPods``), so a lower-priority pod (say the victims' own restarted
pods) cannot bind there first, and the preemptor tries its nominated node first.
CPU and memory requests are not accounted (the emulated cpu-np node is roomy).
"""

from __future__ import annotations

import hashlib
import time
from collections import Counter
from typing import Any

from emulators.gke import layout as L
from emulators.gke.events import Recorder, condition, set_condition
from emulators.gke.jobs import delete_pod
from emulators.gke.store import Obj, Store, now_iso

TPU_RESOURCE = "google.com/tpu"
EXCLUSIVE_KEY = "alpha.jobset.sigs.k8s.io/exclusive-topology"
JOB_KEY = "jobset.sigs.k8s.io/job-key"
TERMINAL = ("Succeeded", "Failed")


def node_ip(index: int) -> str:
    """Nodes live on 127.0.2.x (the pod emulator owns 127.0.0.10+)."""
    return f"127.0.2.{10 + index}"


def node_name(pool: str, index: int, cluster: str = L.CLUSTER) -> str:
    digest = hashlib.sha256(f"{cluster}/{pool}".encode()).hexdigest()[:8]
    suffix = hashlib.sha256(f"{pool}/{index}".encode()).hexdigest()[:4]
    return f"gke-{cluster}-{pool}-{digest}-{suffix}"


def make_node(
    pool: str,
    index: int,
    ip: str,
    tpu: bool,
    shape: L.SliceShape | None = None,
    cluster: str = L.CLUSTER,
) -> Obj:
    shape = shape or L.slice_shape(L.DEFAULT_TPU_TYPE)
    name = node_name(pool, index, cluster)
    labels = {
        "beta.kubernetes.io/arch": "amd64",
        "beta.kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "kubernetes.io/os": "linux",
        "kubernetes.io/hostname": name,
        "cloud.google.com/gke-nodepool": pool,
        "cloud.google.com/gke-os-distribution": "cos",
        "cloud.google.com/gke-boot-disk": "pd-balanced",
        "cloud.google.com/gke-container-runtime": "containerd",
        "topology.kubernetes.io/region": L.LOCATION,
        "topology.kubernetes.io/zone": L.ZONE,
        "failure-domain.beta.kubernetes.io/region": L.LOCATION,
        "failure-domain.beta.kubernetes.io/zone": L.ZONE,
    }
    if tpu:
        labels.update(
            {
                "cloud.google.com/gke-tpu-accelerator": shape.accelerator,
                "cloud.google.com/gke-tpu-topology": shape.topology,
                "cloud.google.com/gke-spot": "true",
                "cloud.google.com/gke-provisioning": "spot",
                "cloud.google.com/machine-family": shape.machine_family,
                "node.kubernetes.io/instance-type": shape.machine_type,
                "beta.kubernetes.io/instance-type": shape.machine_type,
            }
        )
        chips = str(shape.chips_per_node)
        capacity = {"cpu": "208", "memory": "457Gi", TPU_RESOURCE: chips}
        allocatable = {"cpu": "207640m", "memory": "433Gi", TPU_RESOURCE: chips}
        taints = [{"key": TPU_RESOURCE, "value": "present", "effect": "NoSchedule"}]
    else:
        labels.update(
            {
                "cloud.google.com/machine-family": "n2",
                "node.kubernetes.io/instance-type": L.CPU_MACHINE_TYPE,
                "beta.kubernetes.io/instance-type": L.CPU_MACHINE_TYPE,
            }
        )
        capacity = {"cpu": "32", "memory": "128Gi"}
        allocatable = {"cpu": "31850m", "memory": "120Gi"}
        taints = []
    common = {"ephemeral-storage": "98831908Ki", "hugepages-2Mi": "0", "pods": "110"}
    node: Obj = {
        "kind": "Node",
        "apiVersion": "v1",
        "metadata": {
            "name": name,
            "labels": labels,
            "annotations": {
                "container.googleapis.com/instance_id": str(
                    int(hashlib.sha256(name.encode()).hexdigest()[:15], 16)
                ),
                "node.alpha.kubernetes.io/ttl": "0",
            },
        },
        "spec": {
            "podCIDR": f"10.{8 + index // 256}.{index % 256}.0/24",
            "providerID": f"gce://{L.PROJECT}/{L.ZONE}/{name}",
            **({"taints": taints} if taints else {}),
        },
        "status": {
            "capacity": {**capacity, **common},
            "allocatable": {**allocatable, **common},
            "conditions": [],
            "addresses": [
                {"type": "InternalIP", "address": ip},
                {"type": "Hostname", "address": name},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "architecture": "amd64",
                "bootID": hashlib.sha256(f"{name}/boot".encode()).hexdigest()[:32],
                "containerRuntimeVersion": "containerd://2.0.4",
                "kernelVersion": "6.6.87+",
                "kubeProxyVersion": L.KUBELET_VERSION,
                "kubeletVersion": L.KUBELET_VERSION,
                "machineID": hashlib.sha256(name.encode()).hexdigest()[:32],
                "operatingSystem": "linux",
                "osImage": "Container-Optimized OS from Google",
                "systemUUID": hashlib.sha256(f"{name}/uuid".encode()).hexdigest()[:32],
            },
        },
    }
    return node


def set_ready(node: Obj, ready: bool, message: str = "") -> None:
    conds = node["status"]["conditions"]
    for t in ("MemoryPressure", "DiskPressure", "PIDPressure"):
        reason = {
            "MemoryPressure": "KubeletHasSufficientMemory",
            "DiskPressure": "KubeletHasNoDiskPressure",
            "PIDPressure": "KubeletHasSufficientPID",
        }[t]
        c = condition(t, "False", reason, f"kubelet has no {t.lower()}")
        c["lastHeartbeatTime"] = now_iso()
        set_condition(conds, c)
    if ready:
        c = condition("Ready", "True", "KubeletReady", "kubelet is posting ready status")
    else:
        c = condition("Ready", "False", "KubeletNotReady", message or "node is shutting down")
    c["lastHeartbeatTime"] = now_iso()
    set_condition(conds, c)


def node_ready(node: Obj) -> bool:
    for c in node["status"].get("conditions") or []:
        if c["type"] == "Ready":
            return bool(c["status"] == "True")
    return False


# --- scheduling ------------------------------------------------------------------------


def _tolerates(tolerations: list[Obj], taint: Obj) -> bool:
    for t in tolerations:
        if t.get("effect") and t["effect"] != taint.get("effect"):
            continue
        op = t.get("operator", "Equal")
        if op == "Exists" and (not t.get("key") or t.get("key") == taint["key"]):
            return True
        if (
            op == "Equal"
            and t.get("key") == taint["key"]
            and t.get("value", "") == taint.get("value", "")
        ):
            return True
    return False


def _match_expr(labels: dict[str, str], expr: Obj) -> bool:
    key, op, vals = expr.get("key", ""), expr.get("operator", ""), expr.get("values") or []
    if op == "In":
        return labels.get(key) in vals
    if op == "NotIn":
        return labels.get(key) not in vals
    if op == "Exists":
        return key in labels
    if op == "DoesNotExist":
        return key not in labels
    return False


def _selector_ok(pod: Obj, labels: dict[str, str]) -> bool:
    spec = pod["spec"]
    for k, v in (spec.get("nodeSelector") or {}).items():
        if labels.get(k) != v:
            return False
    req = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    terms = req.get("nodeSelectorTerms") or []
    return not terms or any(
        all(_match_expr(labels, e) for e in (t.get("matchExpressions") or [])) for t in terms
    )


def tpu_request(pod: Obj) -> int:
    total = 0
    spec = pod["spec"]
    sidecars = [c for c in spec.get("initContainers") or [] if c.get("restartPolicy") == "Always"]
    for c in list(spec.get("containers") or []) + sidecars:
        res = c.get("resources") or {}
        value = (res.get("requests") or {}).get(TPU_RESOURCE) or (res.get("limits") or {}).get(
            TPU_RESOURCE
        )
        if value is not None:
            total += int(str(value))
    return total


def pod_active(pod: Obj) -> bool:
    return pod.get("status", {}).get("phase") not in TERMINAL


class Scheduler:
    def __init__(self, store: Store, recorder: Recorder, retry_interval: float) -> None:
        self.store = store
        self.recorder = recorder
        self.retry_interval = retry_interval
        self._reported: dict[str, float] = {}  # pod uid -> last FailedScheduling event

    def schedule_all(self) -> None:
        pending = [
            p
            for p in self.store.list("pods")
            if not p["spec"].get("nodeName")
            and pod_active(p)
            and not p["metadata"].get("deletionTimestamp")
        ]
        # The scheduling queue's order: higher priority first, then the oldest.
        for pod in sorted(
            pending,
            key=lambda p: (
                -int(p["spec"].get("priority") or 0),
                p["metadata"]["creationTimestamp"],
            ),
        ):
            self._schedule(pod)

    def _schedule(self, queued: Obj) -> None:
        meta = queued["metadata"]
        # as stored now: a preemptor earlier in this pass may have cleared its nomination
        pod = self.store.get("pods", meta.get("namespace", ""), meta["name"])
        if (
            pod is None
            or pod["metadata"].get("uid") != meta.get("uid")
            or pod["spec"].get("nodeName")
        ):
            return
        nominee = (pod.get("status") or {}).get("nominatedNodeName")
        # its nominated node first (kube-scheduler's evaluateNominatedNode), then the rest
        nodes = sorted(self.store.list("nodes"), key=lambda n: n["metadata"]["name"] != nominee)
        everyone = self.store.list("pods")
        bound = [p for p in everyone if p["spec"].get("nodeName") and pod_active(p)]
        held = self._held_for_others(pod, everyone, {n["metadata"]["name"] for n in nodes})
        pods = bound + held
        reasons: Counter[str] = Counter()
        chosen = None
        exclusive = (pod["metadata"].get("annotations") or {}).get(EXCLUSIVE_KEY)
        domain, taken = self._exclusive_domains(pod, pods, exclusive) if exclusive else ("", set())
        for node in nodes:
            reason = self._filter(pod, node, pods, exclusive, domain, taken)
            if reason is None:
                chosen = node
                break
            reasons[reason] += 1
        if chosen is not None:
            self._bind(pod, chosen)
            return
        n = len(nodes)
        nominated = self._preempt(pod, nodes, bound, held, exclusive) if n else None
        if n == 0:
            message = "no nodes available to schedule pods"
        else:
            parts = sorted(f"{count} {reason}" for reason, count in reasons.items())
            tail = (
                ""
                if nominated is not None
                else f" preemption: 0/{n} nodes are available: {n} Preemption is not helpful "
                "for scheduling."
            )
            message = f"0/{n} nodes are available: {', '.join(parts)}.{tail}"
        cond = condition("PodScheduled", "False", "Unschedulable", message, probe=True)

        def mark(p: Obj) -> None:
            p.setdefault("status", {}).setdefault("phase", "Pending")
            set_condition(p["status"].setdefault("conditions", []), cond)
            if nominated is not None:
                p["status"]["nominatedNodeName"] = nominated

        self.store.mutate("pods", pod, mark)
        # One event per attempt of the backoff queue, not per reconcile pass.
        uid = pod["metadata"]["uid"]
        now = time.monotonic()
        if now - self._reported.get(uid, -1e9) >= self.retry_interval:
            self._reported[uid] = now
            self.recorder.emit(
                pod, "Pod", "Warning", "FailedScheduling", message, "default-scheduler"
            )

    @staticmethod
    def _held_for_others(pod: Obj, pods: list[Obj], node_names: set[str]) -> list[Obj]:
        """The pods nominated to a node that ``pod`` must leave to them, each as if it already
        ran there: pending, not ``pod``, of a priority at least ``pod``'s, nominated to a
        node that still exists (kube-scheduler's nominator, read from the pods' status)."""
        mine = int(pod["spec"].get("priority") or 0)
        uid = pod["metadata"].get("uid")
        held = []
        for p in pods:
            node = (p.get("status") or {}).get("nominatedNodeName")
            if (
                node in node_names
                and p["metadata"].get("uid") != uid
                and not p["spec"].get("nodeName")
                and pod_active(p)
                and not p["metadata"].get("deletionTimestamp")
                and int(p["spec"].get("priority") or 0) >= mine
            ):
                held.append({**p, "spec": {**p["spec"], "nodeName": node}})
        return held

    def _preempt(
        self, pod: Obj, nodes: list[Obj], pods: list[Obj], held: list[Obj], exclusive: str | None
    ) -> str | None:
        """kube-scheduler's DefaultPreemption for a pod that fits nowhere: the node where
        taking away pods of lower priority lets it fit (fewest such pods, then the lowest
        priority among them); each victim gets DisruptionTarget PreemptionByScheduler and is
        deleted gracefully, and the node is nominated. Under JobSet exclusive placement the
        victims are every lower-priority pod of the node's whole domain (the node pool), the
        pool being what the pod needs free. ``pods`` are the bound pods (the only possible
        victims); ``held`` the pods nominated with a priority at least this pod's, which
        keep their nodes (so a pod of the same priority nominated after another picks a node
        of its own). Pods of lower priority nominated to the chosen node lose that
        nomination. Returns the nominated node, or None."""
        spec = pod["spec"]
        mine = int(spec.get("priority") or 0)
        if spec.get("preemptionPolicy") == "Never" or mine <= 0:
            return None
        if not any(int(p["spec"].get("priority") or 0) < mine for p in pods):
            return None  # nothing to take away: preemption cannot help (the common case)
        nominee = (pod.get("status") or {}).get("nominatedNodeName")
        # Candidate domains: each node, or under exclusive placement each node pool whole.
        groups: dict[str, list[Obj]] = {}
        for node in nodes:
            labels = node["metadata"].get("labels") or {}
            key = labels.get(exclusive, "") if exclusive else node["metadata"]["name"]
            groups.setdefault(key, []).append(node)
        best: tuple[tuple[int, int], str, list[Obj]] | None = None
        for members in groups.values():
            names = {n["metadata"]["name"] for n in members}
            there = [p for p in pods if p["spec"].get("nodeName") in names]
            if any(int(p["spec"].get("priority") or 0) >= mine for p in there):
                continue
            rest = [p for p in pods if p["spec"].get("nodeName") not in names] + held
            domain, taken = (
                self._exclusive_domains(pod, rest, exclusive) if exclusive else ("", set())
            )
            fits = next(
                (
                    n
                    for n in sorted(members, key=lambda n: n["metadata"]["name"] != nominee)
                    if self._filter(pod, n, rest, exclusive, domain, taken) is None
                ),
                None,
            )
            if fits is None:
                continue
            victims = [p for p in there if not p["metadata"].get("deletionTimestamp")]
            top = max((int(p["spec"].get("priority") or 0) for p in victims), default=-1)
            rank = (len(victims), top)
            if best is None or rank < best[0]:
                best = (rank, fits["metadata"]["name"], victims)
        if best is None:
            return None
        _, chosen, victims = best
        pmeta = pod["metadata"]
        who = f"{pmeta.get('namespace', '')}/{pmeta['name']}"
        sched = spec.get("schedulerName") or "default-scheduler"
        for victim in victims:
            disrupt = condition(
                "DisruptionTarget",
                "True",
                "PreemptionByScheduler",
                f"{sched}: preempting to accommodate a higher priority pod",
                probe=True,
            )

            def mark(v: Obj, c: Obj = disrupt) -> None:
                set_condition(v.setdefault("status", {}).setdefault("conditions", []), c)

            victim = self.store.mutate("pods", victim, mark)
            self.recorder.emit(
                victim,
                "Pod",
                "Normal",
                "Preempted",
                f"Preempted by {who} on node {victim['spec']['nodeName']}",
                "default-scheduler",
            )
            delete_pod(self.store, victim)
        for other in self.store.list("pods"):
            ost = other.get("status") or {}
            if (
                ost.get("nominatedNodeName") == chosen
                and not other["spec"].get("nodeName")
                and int(other["spec"].get("priority") or 0) < mine
            ):
                self.store.mutate("pods", other, lambda o: o["status"].pop("nominatedNodeName"))
        return chosen

    def _exclusive_domains(self, pod: Obj, pods: list[Obj], topo_key: str) -> tuple[str, set[str]]:
        """The domain siblings already use, and domains held by other exclusive jobs."""
        nodes = {n["metadata"]["name"]: n for n in self.store.list("nodes")}
        mine = (pod["metadata"].get("labels") or {}).get(JOB_KEY, "")
        domain, taken = "", set()
        for p in pods:
            node = nodes.get(p["spec"]["nodeName"])
            if node is None:
                continue
            value = node["metadata"]["labels"].get(topo_key, "")
            key = (p["metadata"].get("labels") or {}).get(JOB_KEY, "")
            if key == mine:
                domain = value
            elif (p["metadata"].get("annotations") or {}).get(EXCLUSIVE_KEY) == topo_key:
                taken.add(value)
        return domain, taken

    def _filter(
        self,
        pod: Obj,
        node: Obj,
        pods: list[Obj],
        exclusive: str | None,
        domain: str,
        taken: set[str],
    ) -> str | None:
        """None if ``pod`` fits ``node``, else the scheduler's reason text."""
        spec = pod["spec"]
        labels = node["metadata"].get("labels") or {}
        if node["spec"].get("unschedulable"):
            return "node(s) were unschedulable"
        tolerations = spec.get("tolerations") or []
        for taint in node["spec"].get("taints") or []:
            if taint.get("effect") in ("NoSchedule", "NoExecute") and not _tolerates(
                tolerations, taint
            ):
                return f"node(s) had untolerated taint {{{taint['key']}: {taint.get('value', '')}}}"
        if not node_ready(node):
            return "node(s) were not ready"
        if not _selector_ok(pod, labels):
            return "node(s) didn't match Pod's node affinity/selector"
        if exclusive:
            value = labels.get(exclusive, "")
            if domain and value != domain:
                return "node(s) didn't match pod affinity rules"
            # even where a sibling is (a restarted Job's pods beside its terminating ones, or
            # one nominated there): another job in the domain refuses it, as JobSet's
            # anti-affinity does
            if value in taken:
                return "node(s) didn't match pod anti-affinity rules"
        need = tpu_request(pod)
        if need:
            have = int(node["status"]["allocatable"].get(TPU_RESOURCE, "0"))
            used = sum(
                tpu_request(p) for p in pods if p["spec"]["nodeName"] == node["metadata"]["name"]
            )
            if used + need > have:
                return f"Insufficient {TPU_RESOURCE}"
        return None

    def _bind(self, pod: Obj, node: Obj) -> None:
        name = node["metadata"]["name"]

        def bind(p: Obj) -> None:
            p["spec"]["nodeName"] = name
            status = p.setdefault("status", {})
            status["phase"] = "Pending"
            set_condition(
                status.setdefault("conditions", []), condition("PodScheduled", "True", probe=True)
            )

        self.store.mutate("pods", pod, bind)
        meta = pod["metadata"]
        self.recorder.emit(
            pod,
            "Pod",
            "Normal",
            "Scheduled",
            f"Successfully assigned {meta.get('namespace', '')}/{meta['name']} to {name}",
            "default-scheduler",
        )


def pool_nodes(store: Store, pool: str) -> list[Obj]:
    return [
        n
        for n in store.list("nodes")
        if n["metadata"]["labels"].get("cloud.google.com/gke-nodepool") == pool
    ]


def describe_pool(store: Store, pool: str) -> dict[str, Any]:
    nodes = pool_nodes(store, pool)
    return {
        "name": pool,
        "nodes": [n["metadata"]["name"] for n in nodes],
        "ready": sum(1 for n in nodes if node_ready(n)),
    }
