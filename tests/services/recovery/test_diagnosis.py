"""Diagnosis, pure classification: a TPU VM host's layers (VM, SSH, Ray, notice) and the head;
GKE observations (a slice's nodes worded once per slice, a Failed JobSet of this console to
resubmit, a capacity stall reported with its fix, not "recovered"), and the TPU VM sentences."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from console.services.model import HostState, JobStatus, WorkloadStatus
from console.services.observation import HostObservation, Observation
from console.services.recovery import classify as cx
from console.services.recovery import diagnosis as dx
from console.services.recovery.classify import HeadLoss, HostCondition
from console.services.recovery.diagnosis import diagnose, head_text

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


# -- TPU VM hosts: each layer classified -------------------------------------------------------


def _obs(**host_kw: Any) -> Observation:
    base = dict(name="w1", ip="127.0.0.11", tpu_state="READY", ssh_ok=True, ray_alive=1)
    head = HostObservation(name="w0", ip="127.0.0.10", tpu_state="READY", ssh_ok=True, ray_alive=1)
    return Observation(
        at=0.0,
        hosts=(head, HostObservation(**{**base, **host_kw})),
        head="w0",
        ray_reachable=True,
        tunnel_up=True,
    )


@pytest.mark.parametrize(
    ("host_kw", "cond"),
    [
        ({}, HostCondition.OK),
        ({"tpu_state": "PREEMPTED", "ssh_ok": False, "ray_alive": 0}, HostCondition.LOST),
        ({"tpu_state": "TERMINATED"}, HostCondition.LOST),
        ({"notice_at": 5.0}, HostCondition.NOTICE),  # still READY, but going
        ({"notice_at": 5.0, "tpu_state": "PREEMPTED", "ray_alive": 0}, HostCondition.LOST),
        ({"tpu_state": "CREATING", "ray_alive": 0}, HostCondition.NOT_READY),
        ({"ssh_ok": False, "ray_alive": 0}, HostCondition.UNREACHABLE),
        # SSH fails, Ray fine (a hung sshd, or a blip): shown, never "recovered"
        ({"ssh_ok": False, "ray_alive": 1}, HostCondition.SSH_DOWN),
        ({"ray_alive": 0}, HostCondition.RAY_DOWN),
        ({"ray_alive": 2}, HostCondition.DUPLICATE),
        ({"tpu_state": "UNKNOWN"}, HostCondition.UNKNOWN),
    ],
)
def test_diagnose_classifies_each_layer(host_kw: dict[str, Any], cond: HostCondition) -> None:
    d = diagnose(_obs(**host_kw))
    assert d.conditions["w1"] is cond
    assert not d.head_lost
    harmless = (HostCondition.OK, HostCondition.UNKNOWN, HostCondition.SSH_DOWN)
    assert d.needs_recovery == (cond not in harmless)


def test_diagnose_head_lost_when_gcs_silent_or_head_preempted() -> None:
    obs = _obs()
    silent = Observation(at=0, hosts=obs.hosts, head="w0", ray_reachable=False, tunnel_up=True)
    d = diagnose(silent)
    assert d.head_loss is HeadLoss.GCS_SILENT and "GCS" in head_text(d)
    # the tunnel dies with the head; that is the head's problem, not a separate one
    gone = Observation(
        at=0,
        hosts=(HostObservation("w0", "127.0.0.10", "PREEMPTED", ssh_ok=False), obs.hosts[1]),
        head="w0",
        tunnel_up=False,
    )
    d = diagnose(gone)
    assert d.head_lost and not d.tunnel_down and d.to_recreate == ("w0",)


def test_stall_alone_is_reported_not_recovered() -> None:
    obs = _obs()
    d = diagnose(Observation(**{**obs.__dict__, "stalled_runs": ("run-1",)}))
    assert not d.needs_recovery and not d.healthy
    assert "metrics stalled: run-1" in d.summary()
