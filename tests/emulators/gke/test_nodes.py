"""The GKE emulator's scheduler on its own store: a preemptor's nominated node is held for it.

kube-scheduler sets ``status.nominatedNodeName`` on a pod whose preemption made room, and
until it binds, every filter run for a pod of lower (or no higher) priority counts it as if it
ran on that node (``RunFilterPluginsWithNominatedPods``): the victims' own restarted pods, which
come back while the victims are still terminating, cannot take the room first. Here the
JobSet case xpk runs: a two-node pool under exclusive placement, a `low` Job (priority 250) on
it, a `very-high` one (1000) arriving; the low Job restarts under the same job key (its new
pods may join the pool while old siblings still terminate there).
"""

from __future__ import annotations

from typing import Any

from emulators.gke import layout as L
from emulators.gke.events import Recorder
from emulators.gke.nodes import EXCLUSIVE_KEY, JOB_KEY, TPU_RESOURCE, Scheduler, make_node
from emulators.gke.store import Store

POOL_KEY = "cloud.google.com/gke-nodepool"


def tpu_pod(name: str, job: str, priority: int) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": "default",
            "labels": {JOB_KEY: job},
            "annotations": {EXCLUSIVE_KEY: POOL_KEY},
        },
        "spec": {
            "priority": priority,
            "preemptionPolicy": "PreemptLowerPriority",
            "tolerations": [{"key": TPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}],
            "containers": [{"name": "main", "resources": {"limits": {TPU_RESOURCE: "4"}}}],
        },
        "status": {"phase": "Pending"},
    }


def pod(store: Store, name: str) -> dict[str, Any]:
    found = store.get("pods", "default", name)
    assert found is not None, name
    return found


def set_phase(store: Store, name: str, phase: str) -> None:
    def mark(p: dict[str, Any]) -> None:
        p["status"]["phase"] = phase

    store.mutate("pods", pod(store, name), mark)


def test_a_preemptors_nominated_node_is_held_against_the_victims_restarted_pods() -> None:
    store = Store(history=1000)
    scheduler = Scheduler(store, Recorder(store), retry_interval=1.0)
    shape = L.slice_shape("v5p-16")  # 2 nodes of 4 chips
    for i in range(2):
        node = make_node("tpu-np", i, f"127.0.2.{10 + i}", tpu=True, shape=shape)
        node["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
        store.create("nodes", node)
    nodes = sorted(n["metadata"]["name"] for n in store.list("nodes"))

    for i in range(2):
        store.create("pods", tpu_pod(f"low-{i}", "low", 250))
    scheduler.schedule_all()
    assert sorted(pod(store, f"low-{i}")["spec"]["nodeName"] for i in range(2)) == nodes
    for i in range(2):
        set_phase(store, f"low-{i}", "Running")

    for i in range(2):
        store.create("pods", tpu_pod(f"boss-{i}", "boss", 1000))
    scheduler.schedule_all()
    # both low pods are victims; each boss pod is nominated to a node of its own (the second
    # counts the first as placed on its nominated node)
    assert all(pod(store, f"low-{i}")["metadata"].get("deletionTimestamp") for i in range(2))
    nominated = {
        f"boss-{i}": pod(store, f"boss-{i}")["status"]["nominatedNodeName"] for i in (0, 1)
    }
    assert sorted(nominated.values()) == nodes, nominated

    # One victim is gone (exit 143); its Job failed and restarted: a new low pod, same job
    # key, while the other victim still terminates in the pool.
    set_phase(store, "low-0", "Failed")
    store.create("pods", tpu_pod("low-again-0", "low", 250))
    scheduler.schedule_all()
    again = pod(store, "low-again-0")
    assert not again["spec"].get("nodeName"), "a restarted low pod took a nominated node"
    (unschedulable,) = [c for c in again["status"]["conditions"] if c["type"] == "PodScheduled"]
    assert "didn't match pod anti-affinity rules" in unschedulable["message"]
    assert not any(pod(store, f"boss-{i}")["spec"].get("nodeName") for i in range(2))

    # The last victim is gone: each boss pod binds where it was nominated, the low pod waits.
    set_phase(store, "low-1", "Failed")
    scheduler.schedule_all()
    for name, node in nominated.items():
        assert pod(store, name)["spec"]["nodeName"] == node
    assert not pod(store, "low-again-0")["spec"].get("nodeName")


def test_a_lower_priority_nomination_gives_way_to_a_higher_preemptor() -> None:
    """A pod nominated to a node loses that nomination when a pod of higher priority
    preempts on the same node (kube-scheduler clears the lower nominations there)."""
    store = Store(history=1000)
    scheduler = Scheduler(store, Recorder(store), retry_interval=1.0)
    node = make_node("tpu-np", 0, "127.0.2.10", tpu=True, shape=L.slice_shape("v5p-8"))
    node["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    store.create("nodes", node)
    store.create("pods", tpu_pod("low", "low", 100))
    scheduler.schedule_all()
    set_phase(store, "low", "Running")
    store.create("pods", tpu_pod("mid", "mid", 500))
    scheduler.schedule_all()
    name = node["metadata"]["name"]
    assert pod(store, "mid")["status"]["nominatedNodeName"] == name

    store.create("pods", tpu_pod("top", "top", 1000))
    scheduler.schedule_all()
    assert pod(store, "top")["status"]["nominatedNodeName"] == name
    assert "nominatedNodeName" not in pod(store, "mid")["status"]
    set_phase(store, "low", "Failed")
    scheduler.schedule_all()
    assert pod(store, "top")["spec"]["nodeName"] == name
    assert not pod(store, "mid")["spec"].get("nodeName")
