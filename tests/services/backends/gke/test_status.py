"""Kubernetes objects as the console shows them: kubectl's STATUS for pods, node states as
host states (a shutdown notice is a preemption), a JobSet's status from its pods."""

from __future__ import annotations

from typing import Any

from console.services.backends.gke import status as S
from console.services.model import HostState, JobStatus, PodStatus


def pod(phase: str = "Running", **status: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "labels": {"jobset.sigs.k8s.io/jobset-name": "w"}},
        "spec": {"containers": [{"name": "jax-tpu"}], "nodeName": "n1"},
        "status": {"phase": phase, **status},
    }


def running(restarts: int = 0) -> dict[str, Any]:
    return {"name": "jax-tpu", "ready": True, "restartCount": restarts, "state": {"running": {}}}


def test_pod_status_follows_kubectl() -> None:
    assert S.pod_status_text(pod(containerStatuses=[running(2)])) == ("Running", 1, 1, 2)
    crash = {
        "name": "jax-tpu",
        "restartCount": 3,
        "state": {"waiting": {"reason": "CrashLoopBackOff"}},
    }
    assert S.pod_status_text(pod(containerStatuses=[crash]))[0] == "CrashLoopBackOff"
    killed = {"name": "jax-tpu", "restartCount": 0, "state": {"terminated": {"exitCode": 143}}}
    assert S.pod_status_text(pod("Failed", containerStatuses=[killed]))[0] == "ExitCode:143"
    preempted = pod("Failed", reason="Terminated", containerStatuses=[killed])
    assert S.pod_status_text(preempted)[0] == "ExitCode:143"
    gone = pod(containerStatuses=[running()])
    gone["metadata"]["deletionTimestamp"] = "2025-01-01T00:00:00Z"
    assert S.pod_status_text(gone)[0] == "Terminating"


def test_pod_model_carries_what_the_screens_list() -> None:
    p = pod(
        containerStatuses=[running(1)],
        conditions=[
            {
                "type": "DisruptionTarget",
                "status": "True",
                "reason": "TerminationByKubelet",
                "message": "Pod was terminated in response to imminent node shutdown.",
            }
        ],
    )
    st = S.pod_status(p)
    assert (st.name, st.status, st.ready, st.restarts, st.node, st.workload) == (
        "p",
        "Running",
        "1/1",
        1,
        "n1",
        "w",
    )
    assert st.disrupted and st.message.startswith("TerminationByKubelet: Pod was terminated")


def node(ready: str, message: str = "", taints: list[str] | None = None) -> dict[str, Any]:
    return {
        "metadata": {"name": "n", "labels": {"cloud.google.com/gke-tpu-accelerator": "x"}},
        "spec": {"taints": [{"key": k} for k in taints or []]},
        "status": {
            "conditions": [
                {
                    "type": "Ready",
                    "status": ready,
                    "message": message,
                    "lastTransitionTime": "2025-01-01T00:00:05Z",
                }
            ]
        },
    }


def test_node_states() -> None:
    assert S.node_state(node("True"))[0] == HostState.READY
    # Shutting down without GKE's spot taint: deleted on purpose (a repair), no preemption.
    state, health, since = S.node_state(node("False", "node is shutting down"))
    assert state == HostState.DELETING and "shutting down" in health and since == 1735689605.0
    taint = node(
        "False", "kubelet stopped posting", ["cloud.google.com/impending-node-termination"]
    )
    assert S.node_state(taint)[0] == HostState.PREEMPTED
    assert S.node_state(node("False", "PLEG is not healthy"))[0] == HostState.REPAIRING
    assert S.node_state({"metadata": {}, "status": {}})[0] == HostState.CREATING


def jobset(restarts: int = 0, **status: Any) -> dict[str, Any]:
    return {
        "spec": {
            "replicatedJobs": [
                {"name": "slice-job", "replicas": 1, "template": {"spec": {"parallelism": 2}}}
            ]
        },
        "status": {"restarts": restarts, **status},
    }


def p(phase: str, attempt: int = 0, disrupted: bool = False) -> PodStatus:
    return PodStatus(
        name="x", phase=phase, status=phase, restart_attempt=attempt, disrupted=disrupted
    )


def test_jobset_status() -> None:
    assert S.jobset_status(jobset(), [p("Running"), p("Running")])[0] == JobStatus.RUNNING
    assert S.jobset_status(jobset(), [p("Running"), p("Pending")])[0] == JobStatus.PENDING
    # a disrupted pod (its node is going away) is not running any more
    assert S.jobset_status(jobset(), [p("Running"), p("Running", disrupted=True)])[0] == "PENDING"
    # the old attempt's pods do not count for the new one
    restarting = S.jobset_status(jobset(1), [p("Running"), p("Running"), p("Pending", 1)])
    assert restarting == (JobStatus.PENDING, "", "restarting")
    failed = jobset(
        3,
        terminalState="Failed",
        conditions=[
            {"type": "Failed", "status": "True", "reason": "ReachedMaxRestarts", "message": "m"}
        ],
    )
    assert S.jobset_status(failed, []) == (JobStatus.FAILED, "ReachedMaxRestarts", "m")
    done = jobset(terminalState="Completed")
    assert S.jobset_status(done, [])[0] == JobStatus.SUCCEEDED


def test_a_pod_is_held_from_its_deletion_or_its_containers_end_whichever_is_later() -> None:
    """A pod slow to stop (a long grace period, a loaded node) is not held while it stops:
    the 10 s before a pod counts as held start when its last container ended."""

    def ended(at: str) -> dict[str, Any]:
        return {"name": "main", "state": {"terminated": {"exitCode": 143, "finishedAt": at}}}

    deleted = {"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"}}
    assert S.held_since(pod()) is None
    assert S.held_since({**pod(), **deleted}) == S.ts("2026-01-01T00:00:00Z")
    slow = {**pod("Failed", containerStatuses=[ended("2026-01-01T00:00:12Z")]), **deleted}
    assert S.held_since(slow) == S.ts("2026-01-01T00:00:12Z")
    quick = {**pod("Failed", containerStatuses=[ended("2025-12-31T23:59:59Z")]), **deleted}
    assert S.held_since(quick) == S.ts("2026-01-01T00:00:00Z")
