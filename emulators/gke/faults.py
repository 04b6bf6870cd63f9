"""Faults other than a spot reclaim: a node that dies, a container that crashes.

* ``fail_node``: the VM under one node dies at once (a host error, a kernel panic). Its
  containers are SIGKILLed and nothing reports it (the kubelet died with them): the node
  goes ``Ready=Unknown`` ("Kubelet stopped posting node status.", what the node lifecycle
  controller writes, with the ``unreachable`` taint) and its pods keep their last status.
  After ``repair_after`` seconds GKE's auto-repair recreates the slice (a multi-host TPU
  slice is repaired whole): the other nodes shut down as any deleted VM does (the kubelet's
  graceful node shutdown, each pod's grace), every node of the slice is deleted, the pod
  GC fails and removes the pods left on them (``DeletionByPodGC``), and the slice comes
  back after the recreate delay.
* ``crash``: a container's main process dies of a signal (SIGKILL by default): exit 128 +
  signal, the rest of the container goes with it, and the pod's restart policy and the
  Job's rules decide what follows.
* ``oom_kill``: the kernel's OOM killer takes a container's main process (its memory
  cgroup over its limit): SIGKILL, exit 137, the container terminated with reason
  ``OOMKilled`` (as containerd reports it), and the node's problem detector posts an
  ``OOMKilling`` Warning event on the node, as GKE's node-problem-detector does.

Evictions and drains go through the API (`kubectl cordon` / `kubectl drain`: PATCH
``spec.unschedulable``, POST ``pods/NAME/eviction``; writes.py), as they do in a cluster.
"""

from __future__ import annotations

import asyncio
import signal
import time
from typing import TYPE_CHECKING, Any

from emulators.gke.nodes import node_ready, pool_nodes
from emulators.gke.store import Obj

if TYPE_CHECKING:
    from emulators.gke.daemon import Cluster

UNKNOWN_MESSAGE = "Kubelet stopped posting node status."
POOL_LABEL = "cloud.google.com/gke-nodepool"


class FaultError(Exception):
    """A fault that cannot be sent (unknown node or pod): a usage error."""


def fail_node(cluster: Cluster, name: str, repair_after: float) -> dict[str, Any]:
    node = cluster.store.get("nodes", "", name)
    if node is None:
        known = sorted(n["metadata"]["name"] for n in cluster.store.list("nodes"))
        raise FaultError(f"unknown node {name!r}; nodes: {', '.join(known)}")
    if not node_ready(node):
        raise FaultError(f"node {name} is not Ready")
    pool = str(node["metadata"]["labels"].get(POOL_LABEL, ""))

    def unknown(n: Obj) -> None:
        conds = n["status"]["conditions"]
        for c in conds:
            c["status"], c["reason"], c["message"] = "Unknown", "NodeStatusUnknown", UNKNOWN_MESSAGE
        taints = n["spec"].setdefault("taints", [])
        for effect in ("NoSchedule", "NoExecute"):
            taints.append({"key": "node.kubernetes.io/unreachable", "effect": effect})

    cluster.store.mutate("nodes", node, unknown)
    cluster.recorder.emit(
        node,
        "Node",
        "Normal",
        "NodeNotReady",
        f"Node {name} status is now: NodeNotReady",
        "node-controller",
    )
    pods = [
        p
        for p in cluster.store.list("pods")
        if p["spec"].get("nodeName") == name
        and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
    ]
    for pod in pods:
        cluster.kubelet.lose(pod["metadata"]["uid"])
    record = {
        "node": name,
        "slice": pool,
        "at": time.time(),
        "repair_after": repair_after,
        "pods": [p["metadata"]["name"] for p in pods],
    }
    cluster._spawn(_repair(cluster, pool, name, repair_after))
    return record


async def _repair(cluster: Cluster, pool: str, failed: str, after: float) -> None:
    await asyncio.sleep(after)
    others = [n for n in pool_nodes(cluster.store, pool) if node_ready(n)]
    cluster.shut_down(
        pool, others, cluster.cfg.shutdown_grace, spot=False, also=frozenset({failed})
    )


def crash(cluster: Cluster, pod: str, container: str, sig: int) -> dict[str, Any]:
    try:
        signame = signal.Signals(sig).name
    except ValueError:
        raise FaultError(f"unknown signal {sig}") from None
    pid, cname = cluster.kubelet.crash(pod, container, sig)
    if pid is None:
        raise FaultError(
            f"pod {pod!r} has no running container"
            + (f" {container!r}" if container else "")
            + " (a running pod's name in any namespace)"
        )
    return {"pod": pod, "container": cname, "signal": signame, "pid": pid, "at": time.time()}


def oom_kill(cluster: Cluster, pod: str, container: str) -> dict[str, Any]:
    pid, cname = cluster.kubelet.crash(pod, container, signal.SIGKILL, oom=True)
    if pid is None:
        raise FaultError(
            f"pod {pod!r} has no running container"
            + (f" {container!r}" if container else "")
            + " (a running pod's name in any namespace)"
        )
    obj = next((p for p in cluster.store.list("pods") if p["metadata"]["name"] == pod), None)
    node = cluster.store.get("nodes", "", str((obj or {}).get("spec", {}).get("nodeName", "")))
    if node is not None:
        cluster.recorder.emit(
            node,
            "Node",
            "Warning",
            "OOMKilling",
            f"Memory cgroup out of memory: Killed process {pid} (python) "
            f"total-vm:0kB, anon-rss:0kB, file-rss:0kB, shmem-rss:0kB",
            "kernel-monitor",
        )
    return {"pod": pod, "container": cname, "signal": "SIGKILL", "pid": pid, "at": time.time()}
