"""Diagnosis of GKE observations: a slice's nodes worded once per slice, a Failed JobSet of
this console to resubmit, a capacity stall reported with its fix (not "recovered"), and the
TPU VM sentences as they were."""

from __future__ import annotations

from dataclasses import replace

from console.services.model import HostState, JobStatus, WorkloadStatus
from console.services.observation import HostObservation, Observation
from console.services.recovery import classify as cx
from console.services.recovery import diagnosis as dx

T = 1_760_000_000.0


def nodes(
    state: str = HostState.READY, n: int = 8, pool: str = "np-0"
) -> tuple[HostObservation, ...]:
    return tuple(
        HostObservation(
            name=f"{pool}-n{i}",
            ip=f"10.0.0.{i}",
            tpu_state=state,
            pool=pool,
            preempted_at=T - 3 if state != HostState.READY else None,
            index=i,
        )
        for i in range(n)
    )


def wl(**kw: object) -> WorkloadStatus:
    base: dict[str, object] = {
        "name": "grpo",
        "status": JobStatus.RUNNING,
        "owned": True,
        "pods_total": 8,
        "pods_running": 8,
    }
    return WorkloadStatus(**{**base, **kw})  # type: ignore[arg-type]


def obs(hosts: tuple[HostObservation, ...], *workloads: WorkloadStatus) -> Observation:
    return Observation(
        at=T, hosts=hosts, head="", workloads=workloads, jobs_owned=True, capacity_wait_s=60.0
    )


def test_a_healthy_slice_is_fully_formed_without_a_ray_head() -> None:
    o = obs(nodes(), wl())
    d = dx.diagnose(o)
    assert d.healthy and not d.needs_recovery and d.symptoms == ()
    assert cx.fully_formed(o)
    assert dx.verified_text(o, 8, {}, set()) == "8/8 nodes Ready, 1 workload(s) Running"


def test_a_preempted_slice_is_one_line_and_hard() -> None:
    d = dx.diagnose(obs(nodes(HostState.PREEMPTED), wl(status=JobStatus.PENDING)))
    assert d.hard and d.needs_recovery
    assert len(d.symptoms) == 1
    assert d.symptoms[0].startswith("slice np-0: 8/8 nodes lost, preempted (spot capacity")
    assert dx.unmet(obs(nodes(HostState.PREEMPTED)), 8, {}, set()) == [
        "slice np-0: 8 node(s) not Ready"
    ]


def test_a_failed_jobset_of_this_console_is_resubmitted_others_are_not() -> None:
    failed = wl(status=JobStatus.FAILED, failed_reason="ReachedMaxRestarts", restarts=3)
    d = dx.diagnose(obs(nodes(), failed))
    assert d.to_resubmit == ("grpo",) and d.hard and d.needs_recovery
    assert (
        "JobSet Failed (ReachedMaxRestarts) after 3 restart(s); recovery resubmits it"
        in d.summary()
    )
    theirs = dx.diagnose(obs(nodes(), replace(failed, owned=False)))
    assert theirs.to_resubmit == () and not theirs.needs_recovery


def test_pods_unschedulable_past_the_wait_are_a_capacity_stall_with_its_fix() -> None:
    waiting = wl(
        status=JobStatus.PENDING,
        unschedulable=8,
        unschedulable_since=T - 30,
        scheduler_message="0/1 nodes are available",
    )
    assert dx.diagnose(obs(nodes(), waiting)).blocked == ()  # 30 s < 60 s: still a wait
    stalled = replace(waiting, unschedulable_since=T - 90)
    d = dx.diagnose(obs(nodes(), stalled))
    assert d.blocked == ("grpo",) and not d.needs_recovery  # nothing a step can do
    text = d.summary()
    assert "8 pod(s) Pending for 90s, unschedulable (0/1 nodes are available)" in text
    assert "TPU quota" in text and "spot = false" in text and "fewer slices" in text


def test_tpu_vm_words_are_unchanged() -> None:
    vm = HostObservation(name="pod-w1", ip="10.1.0.3", tpu_state=HostState.PREEMPTED, index=1)
    head = HostObservation(name="pod-w0", ip="10.1.0.2", tpu_state=HostState.READY, ray_alive=1)
    o = Observation(at=T, hosts=(head, vm), head="pod-w0", ray_reachable=True)
    d = dx.diagnose(o)
    assert d.symptoms == ("pod-w1: VM lost (10.1.0.3, TPU state PREEMPTED)",)
    assert dx.unmet(o, 2, {}, set())[0] == "not READY: pod-w1"
    assert dx.resubmitted_text("a", "b") == "job a lost with the head, resubmitted as b"
