"""The detector on GKE observations: one journal row per slice change, and each workload
edge once (JobSet restart, failure, quota, Pathways worker replaced, head failing)."""

from __future__ import annotations

from dataclasses import replace

from console.services.model import (
    Event,
    HostState,
    IncidentOutcome,
    JobInfo,
    JobStatus,
    PodFailure,
    PodStatus,
    Update,
)
from console.services.observation import HostObservation, Observation
from console.services.record.journal import Journal
from console.services.record.sink import EventSink
from console.services.recovery.detector import Detector
from tests.services.recovery.test_diagnosis import T, nodes, obs, wl


async def feed(*observations) -> list[Event]:  # type: ignore[no-untyped-def]
    seen: list[Update] = []
    journal = Journal(":memory:")
    sink = EventSink(journal, seen.append)
    det = Detector(sink, clock=lambda: T)
    for o in observations:
        await det.update(o)
    await sink.flush()
    sink.close()
    journal.close()
    return [u for u in seen if isinstance(u, Event)]


async def test_a_slice_preemption_is_one_row_with_its_time_to_detect() -> None:
    evs = await feed(obs(nodes()), obs(nodes(HostState.PREEMPTED)), obs(nodes(HostState.PREEMPTED)))
    kinds = [e.kind for e in evs]
    assert kinds == ["state_change", "preempted"], kinds
    pre = evs[1]
    assert pre.host == "np-0" and pre.data["detect_s"] == 3.0 and len(pre.data["nodes"]) == 8
    assert evs[0].message == "slice np-0: 8 nodes READY -> PREEMPTED"


async def test_a_slice_loss_seen_growing_over_polls_is_one_preempted_row() -> None:
    """A reclaim's node events can straddle a poll: it sees 6/8 nodes lost, the next one the
    rest. One loss, one `preempted` row; the later nodes are said by their state change."""
    part = nodes(HostState.PREEMPTED)[:6] + nodes()[6:]
    evs = await feed(obs(nodes()), obs(part), obs(nodes(HostState.PREEMPTED)))
    kinds = [e.kind for e in evs]
    assert kinds == ["state_change", "preempted", "state_change"], kinds
    assert evs[1].message.startswith("slice np-0: 6/8 nodes lost")
    assert evs[2].message == "slice np-0: 2 nodes READY -> PREEMPTED"
    # once the slice is whole again, a new loss is a new row
    evs = await feed(obs(nodes()), obs(part), obs(nodes()), obs(nodes(HostState.PREEMPTED)))
    assert [e.kind for e in evs].count("preempted") == 2


async def test_a_recreated_slice_lost_again_before_the_old_nodes_go_is_a_new_row() -> None:
    """An overlapping reclaim: GKE recreated the slice's nodes (new names) and they are lost
    while the old ones are still listed lost; or a node recreated under its own name is lost
    again while the rest of the first loss is still out. Each is a second preemption."""
    old_lost = nodes(HostState.PREEMPTED)
    renamed = tuple(replace(h, name=h.name + "-b") for h in nodes())
    evs = await feed(
        obs(nodes()),
        obs(old_lost),
        obs(old_lost + renamed),
        obs(old_lost + tuple(replace(h, tpu_state=HostState.PREEMPTED) for h in renamed)),
    )
    assert [e.kind for e in evs].count("preempted") == 2, [e.message for e in evs]
    back = nodes()[:1] + nodes(HostState.PREEMPTED)[1:]
    evs = await feed(obs(nodes()), obs(nodes(HostState.PREEMPTED)), obs(back), obs(old_lost))
    assert [e.kind for e in evs].count("preempted") == 2, [e.message for e in evs]


async def test_a_pod_failure_is_one_row_by_its_cause_and_counts_say_pods() -> None:
    """A crash (exit code, retried or not), an OOM kill and an eviction are each a row of
    their own kind, once; failures already there at the first observation are a baseline;
    a slice's row counts the pods it took."""

    def pod(name: str, **kw: object) -> PodStatus:
        base: dict[str, object] = {"phase": "Running", "status": "Running", "workload": "grpo"}
        return PodStatus(name=name, node=f"np-0-n{name[-1]}", uid=name, **{**base, **kw})  # type: ignore[arg-type]

    old = pod("p0", phase="Failed", failure=PodFailure.CRASH, exit_code=1)
    crash = pod("p1", phase="Failed", failure=PodFailure.CRASH, exit_code=3, restartable=False)
    oom = pod("p2", phase="Failed", failure=PodFailure.OOM_KILLED, exit_code=137)
    evicted = pod("p3", phase="Failed", failure=PodFailure.EVICTED, message="low on memory")

    def with_pods(hosts: tuple[HostObservation, ...], *pods: PodStatus) -> Observation:
        return replace(obs(hosts), pods=pods)

    evs = await feed(
        with_pods(nodes(), old, pod("p1"), pod("p2"), pod("p3")),
        with_pods(nodes(), old, crash, oom, evicted),
        with_pods(nodes(), old, crash, oom, evicted),
        with_pods(nodes(HostState.PREEMPTED), pod("p4"), pod("p5")),
    )
    kinds = [e.kind for e in evs]
    assert kinds[:5] == [
        "pod_crashed",
        "pod_oom_killed",
        "pod_evicted",
        "state_change",
        "preempted",
    ]
    # the slice's loss supersedes the pods' incident: that one ends summarised, no recovery
    assert kinds[5:] == ["incident"] and evs[5].data["outcome"] == IncidentOutcome.NO_RECOVERY
    assert evs[0].data["exit_code"] == 3 and evs[0].data["restartable"] is False
    assert evs[0].message == (
        "pod p1 on np-0-n1: crashed (exit 3); not restartable: its workload fails"
    )
    assert evs[1].data["cause"] == "oom_killed" and "OOMKilled (exit 137)" in evs[1].message
    assert "low on memory" in evs[2].message
    assert evs[3].message == "slice np-0: 8 nodes READY -> PREEMPTED (2 pods on them)"
    assert evs[4].data["pods"] == ["p4", "p5"] and "2 pods stopped" in evs[4].message


async def test_workload_edges_are_journaled_once() -> None:
    running = wl()
    restarted = wl(status=JobStatus.PENDING, restarts=1, message="restarting", disrupted=8)
    failed = wl(
        status=JobStatus.FAILED,
        restarts=1,
        failed_reason="ReachedMaxRestarts",
        message="jobset failed due to reaching max number of restarts",
    )
    evs = await feed(
        obs(nodes(), running),
        obs(nodes(), restarted),
        obs(nodes(), restarted),
        obs(nodes(), failed),
        obs(nodes(), failed),
    )
    assert [e.kind for e in evs] == ["jobset_restarted", "jobset_failed"]
    assert evs[0].message == (
        "workload grpo: JobSet restarted (0 -> 1) (8 pod(s) disrupted: slice preempted)"
    )
    assert evs[1].data["reason"] == "ReachedMaxRestarts"


async def test_quota_worker_and_head_edges() -> None:
    pw = wl(template="pathways")
    replaced = replace(pw, worker_replacements=8)
    head = replace(replaced, head_failed="pw-pathways-head-0-0-x: Error")
    stuck = replace(
        head,
        status=JobStatus.PENDING,
        unschedulable=8,
        unschedulable_since=T - 120,
        scheduler_message="0/1 nodes are available",
    )
    evs = await feed(
        obs(nodes(), pw),
        obs(nodes(), replaced),
        obs(nodes(), head),
        obs(nodes(), stuck),
        obs(nodes(), stuck),
    )
    assert [e.kind for e in evs] == ["worker_replaced", "head_failed", "quota_pending"]
    assert (
        "8 Pathways worker pod(s) replaced by their Job while the JobSet reports no restart"
        in evs[0].message
    )


def _vm_obs(w1: HostObservation) -> Observation:
    head = HostObservation(name="w0", ip="127.0.0.10", tpu_state="READY", ssh_ok=True, ray_alive=1)
    return Observation(at=T, hosts=(head, w1), head="w0", ray_reachable=True, tunnel_up=True)


async def test_a_noticed_vm_always_gets_one_preempted_row() -> None:
    """A VM with a notice ends: journaled once, whether a poll saw it PREEMPTED or the
    recovery replaced it between two polls."""
    up = HostObservation(name="w1", ip="127.0.0.11", tpu_state="READY", ssh_ok=True, ray_alive=1)
    noticed = replace(up, notice_at=T - 1)
    gone = replace(up, tpu_state="PREEMPTED", ssh_ok=False, ray_alive=0, preempted_at=T)
    fresh = replace(up, tpu_state="CREATING", ssh_ok=None, ray_alive=0)

    replaced_unseen = await feed(*(_vm_obs(h) for h in (up, noticed, noticed, fresh, up)))
    rows = [e for e in replaced_unseen if e.kind in ("preemption_notice", "preempted")]
    assert [(e.kind, e.host) for e in rows] == [("preemption_notice", "w1"), ("preempted", "w1")]
    assert rows[1].data["after_notice"] is True

    seen_going = await feed(*(_vm_obs(h) for h in (up, noticed, gone, fresh, up)))
    rows = [e for e in seen_going if e.kind in ("preemption_notice", "preempted")]
    assert [(e.kind, e.host) for e in rows] == [("preemption_notice", "w1"), ("preempted", "w1")]
    assert "after_notice" not in rows[1].data and rows[1].data["preempted_at"] == T


async def test_a_lost_vm_row_says_where_it_was() -> None:
    """The ledger's rates per zone and accelerator read them off the loss rows."""
    up = HostObservation(name="w1", ip="127.0.0.11", tpu_state="READY", ssh_ok=True, ray_alive=1)
    gone = replace(up, tpu_state="PREEMPTED", ssh_ok=False, ray_alive=0, preempted_at=T)

    def where(h: HostObservation) -> Observation:
        return replace(_vm_obs(h), zone="us-central2-b", accelerator_type="v4-32")

    (row,) = [e for e in await feed(where(up), where(gone)) if e.kind == "preempted"]
    assert (row.data["zone"], row.data["accelerator"]) == ("us-central2-b", "v4-32")
    (bare,) = [e for e in await feed(_vm_obs(up), _vm_obs(gone)) if e.kind == "preempted"]
    assert "zone" not in bare.data and "accelerator" not in bare.data


async def test_a_host_that_just_dropped_its_connection_is_not_confirmed_until_it_settles() -> None:
    """A head whose SSH dropped while the API still says READY (a VM being reclaimed, its
    processes still dying) is not recovered on the soft loss alone: the API's PREEMPTED
    (hard) confirms it, and its row is journaled; once the backend's doubt is over the soft
    loss confirms as before."""
    journal = Journal(":memory:")
    seen: list[Update] = []
    sink = EventSink(journal, seen.append)
    det = Detector(sink, clock=lambda: T, confirm_polls=2)
    det.arm()
    w1 = HostObservation(name="w1", ip="127.0.0.11", tpu_state="READY", ssh_ok=True, ray_alive=1)
    up = HostObservation(name="w0", ip="127.0.0.10", tpu_state="READY", ssh_ok=True, ray_alive=1)
    dropped = replace(up, ssh_ok=False, ray_alive=0)
    gone = replace(dropped, tpu_state="PREEMPTED", preempted_at=T)

    def at(head: HostObservation, settling: tuple[str, ...] = ()) -> Observation:
        return Observation(at=T, hosts=(head, w1), head="w0", settling=settling)

    await det.update(at(up))
    verdicts = [await det.update(at(dropped, ("w0",))) for _ in range(3)]
    assert all(v.trouble and not v.confirmed for v in verdicts)
    assert (await det.update(at(gone))).confirmed  # the API's word
    assert (await det.update(at(dropped))).confirmed  # doubt over: the polls counted
    await sink.flush()
    sink.close()
    journal.close()
    rows = [(u.kind, u.host) for u in seen if isinstance(u, Event) and u.kind == "preempted"]
    assert rows == [("preempted", "w0")]


async def test_a_poll_that_could_not_read_the_jobs_keeps_the_jobs_to_resubmit() -> None:
    """The tunnel to the head drops a moment before its VM is reclaimed; the poll in between
    still reaches Ray (a node list over SSH) but reads no job list. That empty list is a
    missing answer, not "no job": the head lost next must still resubmit the running job
    (the chaos drill once recovered with "no job was active on the lost head")."""
    det = Detector(EventSink(Journal(":memory:"), lambda u: None), clock=lambda: T)
    det.arm()
    w1 = HostObservation(name="w1", ip="127.0.0.11", tpu_state="READY", ssh_ok=True, ray_alive=1)
    w0 = replace(w1, name="w0", ip="127.0.0.10")
    job = JobInfo(job_id="raysubmit_1", status=JobStatus.RUNNING)

    def at(*, jobs: tuple[JobInfo, ...], read: bool) -> Observation:
        return Observation(
            at=T, hosts=(w0, w1), head="w0", ray_reachable=True, jobs=jobs, jobs_read=read
        )

    await det.update(at(jobs=(job,), read=True))
    assert list(det.active_jobs) == ["raysubmit_1"]
    await det.update(at(jobs=(), read=False))  # tunnel down: no answer
    assert list(det.active_jobs) == ["raysubmit_1"]
    await det.update(at(jobs=(), read=True))  # the job list read, and empty: it ended
    assert det.active_jobs == {}


async def test_a_head_gcs_silent_for_one_poll_is_no_head_loss_until_confirmed() -> None:
    """A busy head's Ray GCS can miss one poll while its host and Ray node are fine: no
    `head_lost` row for it (the watch drill journaled one on a loaded box, and the incident
    it opened was never closed: no recovery followed). Silent for the watchdog's confirming
    polls, it is journaled once, as before a recovery."""
    journal = Journal(":memory:")
    seen: list[Update] = []
    sink = EventSink(journal, seen.append)
    det = Detector(sink, clock=lambda: T, confirm_polls=2)
    det.arm()
    w1 = HostObservation(name="w1", ip="127.0.0.11", tpu_state="READY", ssh_ok=True, ray_alive=1)
    w0 = replace(w1, name="w0", ip="127.0.0.10")

    def at(ray_reachable: bool) -> Observation:
        return Observation(at=T, hosts=(w0, w1), head="w0", ray_reachable=ray_reachable)

    await det.update(at(True))
    blip = await det.update(at(False))
    assert blip.trouble and not blip.confirmed
    await det.update(at(True))
    await sink.flush()
    assert [u for u in seen if isinstance(u, Event) and u.kind == "head_lost"] == []
    first = await det.update(at(False))
    second = await det.update(at(False))
    third = await det.update(at(False))
    assert not first.confirmed and second.confirmed and third.confirmed
    await sink.flush()
    sink.close()
    journal.close()
    rows = [(u.kind, u.host, u.message) for u in seen if isinstance(u, Event)]
    assert rows == [("head_lost", "w0", "Ray GCS on the head does not answer")], rows
