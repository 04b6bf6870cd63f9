"""GKE failures by the cause the pod's status gives, through the console's services on the
GKE emulator: a container crash is its own row (exit code, retried or not) that opens an
incident; a dead node (its VM gone, the slice repaired by GKE) is a node failure, never a
spot preemption; what the status of a pod says (OOMKilled, Evicted, a disruption's reason)
is read as that cause.

Each fails on main 88b46b4: a crash journaled nothing, and the repair's graceful shutdown of
the other nodes made the node failure a ``preempted`` slice."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import yaml

from console.services.backends.gke import status as S
from console.services.model import PodFailure
from emulators.gke import client as gke_client
from tests.services.backends.gke.test_backend import spec
from tests.support.fixtures_gke import gke, kubectl, xpk_jobset
from tests.support.gke_services import events, gke_config, gke_services
from tests.support.waiting import until

__all__ = ["gke"]


def _pod(**status: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "w-0", "uid": "u1"},
        "spec": {"restartPolicy": "Never", "containers": [{"name": "jax-tpu"}]},
        "status": {"phase": "Failed", **status},
    }


def _terminated(code: int, reason: str) -> list[dict[str, Any]]:
    return [
        {
            "name": "jax-tpu",
            "restartCount": 0,
            "state": {"terminated": {"exitCode": code, "reason": reason}},
        }
    ]


def test_the_cause_is_what_the_pod_status_says() -> None:
    oom = S.pod_status(_pod(containerStatuses=_terminated(137, "OOMKilled")))
    assert (oom.failure, oom.exit_code) == (PodFailure.OOM_KILLED, 137)
    crash = S.pod_status(_pod(containerStatuses=_terminated(3, "Error")))
    assert (crash.failure, crash.exit_code) == (PodFailure.CRASH, 3)
    evicted = S.pod_status(_pod(reason="Evicted", message="The node was low on memory."))
    assert evicted.failure == PodFailure.EVICTED
    for reason, cause in (
        ("TerminationByKubelet", PodFailure.PREEMPTED),
        ("DeletionByPodGC", PodFailure.NODE_FAILURE),
        ("PreemptionByScheduler", PodFailure.EVICTED),
    ):
        cond = {"type": "DisruptionTarget", "status": "True", "reason": reason}
        got = S.pod_status(_pod(conditions=[cond], containerStatuses=_terminated(143, "Error")))
        assert got.failure == cause, reason
    assert S.pod_status(_pod(containerStatuses=_terminated(0, "Completed"))).failure == ""


def test_a_pod_stopped_because_it_was_deleted_is_no_crash() -> None:
    """A JobSet's restart (or a user's kubectl delete) deletes its pods; since 1.27 the
    kubelet gives each its terminal phase, Failed with SIGTERM's 143, before it goes. That is
    no crash of the pod's own; a container that had failed before the deletion still is."""

    def deleted_pod(finished: str, deleted: str) -> dict[str, Any]:
        pod = _pod(containerStatuses=_terminated(143, "Error"))
        pod["status"]["containerStatuses"][0]["state"]["terminated"]["finishedAt"] = finished
        pod["metadata"]["deletionTimestamp"] = deleted
        return pod

    stopped = S.pod_status(deleted_pod("2026-12-04T16:00:05Z", "2026-12-04T16:00:03Z"))
    assert (stopped.failure, stopped.exit_code) == ("", 143)
    crashed = S.pod_status(deleted_pod("2026-12-04T16:00:01Z", "2026-12-04T16:00:03Z"))
    assert crashed.failure == PodFailure.CRASH
    preempted = deleted_pod("2026-12-04T16:00:05Z", "2026-12-04T16:00:03Z")
    cond = {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}
    preempted["status"]["conditions"] = [cond]
    assert S.pod_status(preempted).failure == PodFailure.EVICTED


def test_a_node_shutting_down_without_the_spot_taint_is_not_a_preemption() -> None:
    ready = {"type": "Ready", "status": "False", "message": "node is shutting down"}
    node: dict[str, Any] = {"status": {"conditions": [ready]}, "spec": {}}
    assert S.node_state(node)[0] == "DELETING"
    node["spec"]["taints"] = [{"key": "cloud.google.com/impending-node-termination"}]
    assert S.node_state(node)[0] == "PREEMPTED"


async def test_a_crash_and_a_node_failure_are_journaled_by_cause(
    gke: gke_client.GkeInfo, tmp_path: Path
) -> None:
    config = gke_config(gke.run_dir, recovery={"auto": False})
    async with gke_services(config, tmp_path / "state") as (svc, seen):
        await svc.create_workload(spec(config, "faulty", env={"STEPS": "2000"}), "test")
        await until(
            lambda: any(
                w.name == "faulty" and w.pods_running == 8 for w in svc.snapshot().workloads
            ),
            90,
            "8 pods Running",
        )
        pods = [p for p in svc.snapshot().pods if p.workload == "faulty" and p.phase == "Running"]
        victim = sorted(pods, key=lambda p: p.name)[1]
        gke_client.crash_container(gke.run_dir, victim.name)
        await until(lambda: events(seen, "pod_crashed"), 60, "the crash journaled")
        crashed = events(seen, "pod_crashed")[0]
        assert crashed.data["pod"] == victim.name and crashed.data["exit_code"] == 137
        assert crashed.data["restartable"] is True  # the JobSet has restarts left
        assert crashed.data.get("incident"), "a crash opens an incident"
        assert victim.name in crashed.message and "exit 137" in crashed.message

        await until(
            lambda: any(
                w.name == "faulty" and w.restarts >= 1 and w.pods_running == 8
                for w in svc.snapshot().workloads
            ),
            90,
            "the JobSet restarted, 8 pods Running",
        )
        node = next(p.node for p in svc.snapshot().pods if p.phase == "Running" and p.node)
        gke_client.fail_node(gke.run_dir, node, repair_after_s=0.5)
        await until(lambda: events(seen, "host_lost"), 60, "the node failure journaled")
        lost = events(seen, "host_lost")[0]
        assert "node failure" in lost.message
        assert not events(seen, "preempted"), "a node failure is no spot preemption"
        assert not [e for e in events(seen, "state_change") if e.data.get("to") == "PREEMPTED"], (
            "nor a slice gone PREEMPTED"
        )


async def test_a_pod_preempted_by_priority_is_journaled_as_evicted_by_its_reason(
    gke: gke_client.GkeInfo, tmp_path: Path
) -> None:
    """The console's workload (xpk's default priority, medium) fills the slice; a very-high
    JobSet applied with the real kubectl preempts it. The scheduler's DisruptionTarget
    (PreemptionByScheduler) is what the console reads: pod_evicted rows naming the reason,
    no spot preemption and no node failure. Before, the very-high pods waited behind the
    console's and nothing was journaled."""
    config = gke_config(gke.run_dir, recovery={"auto": False})
    async with gke_services(config, tmp_path / "state") as (svc, seen):
        await svc.create_workload(spec(config, "steady", env={"STEPS": "4000"}), "test")
        await until(
            lambda: any(
                w.name == "steady" and w.pods_running == 8 for w in svc.snapshot().workloads
            ),
            90,
            "8 pods Running",
        )
        urgent = xpk_jobset("urgent", "sleep 300", wrapper=False, grace=2)
        pod_spec = urgent["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
        pod_spec["priorityClassName"] = "very-high"
        manifest = tmp_path / "urgent.yaml"
        manifest.write_text(yaml.safe_dump(urgent))
        env = {**os.environ, "KUBECONFIG": str(gke.kubeconfig), "HOME": str(tmp_path)}
        proc = await asyncio.create_subprocess_exec(
            kubectl("1.33"), "apply", "--validate=false", "-f", str(manifest), env=env
        )
        assert await asyncio.wait_for(proc.wait(), 60) == 0
        await until(lambda: len(events(seen, "pod_evicted")) == 8, 90, "8 pods evicted")
        evicted = events(seen, "pod_evicted")
        assert {e.data["workload"] for e in evicted} == {"steady"}
        assert all("PreemptionByScheduler" in e.message for e in evicted), evicted[0].message
        assert all(
            e.data["message"]
            == "PreemptionByScheduler: default-scheduler: preempting to accommodate a higher "
            "priority pod"
            for e in evicted
        )
        assert not events(seen, "preempted") and not events(seen, "host_lost")
        await until(
            lambda: any(
                w.name == "urgent" and w.pods_running == 8 for w in svc.snapshot().workloads
            ),
            90,
            "the very-high workload Running",
        )
