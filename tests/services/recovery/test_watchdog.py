"""The recovery state machine as pure logic, against a small fake *cluster*.

``FakePod`` models what the real pod does (VMs that get preempted and come back bare, Ray
nodes that must be started on a bootstrapped host and join the current head, jobs that live
on the head) and implements ``RecoveryOps`` on that model. The watchdog under test is the
real one, with the real journal (in memory) behind the real event sink; only the cluster is
small. Time is a manual clock advanced by the injected sleep.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import pytest

from console.services.model import (
    ActionResult,
    Event,
    IncidentOutcome,
    RecoveryOutcome,
    RecoveryStatus,
    StepState,
)
from console.services.observation import Observation
from console.services.recovery.watchdog import Watchdog
from tests.support.fake_pod import Clock, FakePod, make_watchdog, wait_done
from tests.support.waiting import until

STEPS = (
    "detect",
    "orphans",
    "recreate",
    "wait_ready",
    "bootstrap",
    "head",
    "tunnel",
    "resubmit",
    "workers",
    "verify",
)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def pod(clock: Clock) -> FakePod:
    p = FakePod(clock)
    p.form()
    return p


def steps(status: RecoveryStatus) -> dict[str, tuple[str, str]]:
    return {s.name: (s.state, s.message) for s in status.steps}


def kinds(events: Sequence[Event]) -> list[str]:
    return [e.kind for e in events]


async def poll(wd: Watchdog, pod: FakePod) -> None:
    await wd.on_observation(await pod.observe())


# -- worker loss ----------------------------------------------------------------------------------


async def test_worker_preempted_recreates_only_that_host_and_keeps_head_and_jobs(
    pod: FakePod, clock: Clock
) -> None:
    wd, journal, published = make_watchdog(pod, clock)
    job = pod.submit("train")
    await poll(wd, pod)  # healthy: arms the watchdog, remembers the running job
    assert wd.armed and list(wd.active_jobs) == [job]

    clock.t += 0.4
    pod.preempt("pod-w2")
    clock.t += 0.6  # the next poll sees it
    await poll(wd, pod)
    status = await wait_done(wd)

    assert status.ok and not status.active
    st = steps(status)
    assert {k: v[0] for k, v in st.items()} == {
        "detect": "ok",
        "orphans": "skipped",
        "recreate": "ok",
        "wait_ready": "ok",
        "bootstrap": "ok",
        "head": "skipped",
        "workers": "ok",
        "tunnel": "skipped",
        "resubmit": "skipped",
        "verify": "ok",
    }
    assert "alive" in st["head"][1] and "1 active job(s) continue" in st["resubmit"][1]
    ops = [c for c in pod.calls if c[0] != "observe"]
    assert ops == [
        ("recreate", ("pod-w2",)),
        ("wait_ready", ("pod-w2",)),
        ("bootstrap", ("pod-w2",)),
        ("join_workers", ("pod-w2",)),
    ]
    assert pod.jobs == {job: "RUNNING"}  # never resubmitted
    assert status.detect_s == pytest.approx(0.6)  # from the provider's preemption time
    assert status.mttr_s is not None and status.mttr_s >= 0
    preempted = [e for e in journal.events if e.kind == "preempted"]
    assert [e.host for e in preempted] == ["pod-w2"]
    assert preempted[0].data["detect_s"] == pytest.approx(0.6)
    recovered = [e for e in journal.events if e.kind == "recovered"]
    assert recovered and recovered[0].data["mttr_s"] == status.mttr_s
    assert recovered[0].actor == "watchdog"
    # every status change was published, ending with the final one
    statuses = [u for u in published if isinstance(u, RecoveryStatus)]
    assert len(statuses) > 9 and statuses[-1] == status


async def test_journal_has_every_step_once_with_hosts_and_actor(pod: FakePod, clock: Clock) -> None:
    wd, journal, _ = make_watchdog(pod, clock)
    await poll(wd, pod)
    pod.preempt("pod-w3")
    await poll(wd, pod)
    await wait_done(wd)
    ends = {r.action: r for r, actor in journal.actions}
    assert set(ends) == {f"recovery.{s}" for s in STEPS}
    assert all(actor == "watchdog" for _, actor in journal.actions)
    assert ends["recovery.bootstrap"].per_host["pod-w3"].ok
    assert ends["recovery.head"].message.startswith("SKIPPED: ")
    assert ends["recovery.head"].data["state"] == "skipped"
    # One row per step (its end, dated at its start), never a second kind for the same step.
    assert len(journal.actions) == len(STEPS)
    assert "recovery_step" not in kinds(journal.events)


# -- head loss ------------------------------------------------------------------------------------


async def test_head_preempted_rebuilds_everything_and_resubmits_jobs(
    pod: FakePod, clock: Clock
) -> None:
    wd, journal, _ = make_watchdog(pod, clock)
    job = pod.submit("sweep --sweep-id abc")
    await poll(wd, pod)
    pod.preempt("pod-w0")
    await poll(wd, pod)
    status = await wait_done(wd)

    assert status.ok, steps(status)
    assert all(v[0] == "ok" for v in steps(status).values())
    ops = [c for c in pod.calls if c[0] != "observe"]
    # the dead head's workers are force-stopped alongside the head's rebuild, before they join
    orphans = ops.index(("stop_orphans", ("pod-w1", "pod-w2", "pod-w3")))
    assert orphans < ops.index(("join_workers", ("pod-w1", "pod-w2", "pod-w3")))
    assert ops[:orphans] + ops[orphans + 1 :] == [
        ("recreate", ("pod-w0",)),
        ("wait_ready", ("pod-w0",)),
        ("bootstrap", ("pod-w0",)),  # the workers' VMs kept their install
        ("start_head", ("pod-w0",)),
        ("open_tunnel", ()),
        ("resubmit", (job,)),
        ("join_workers", ("pod-w1", "pod-w2", "pod-w3")),
    ]
    (new,) = [j for j in pod.jobs if j != job]
    assert pod.jobs[new] == "RUNNING" and pod.submitted[new] == "sweep --sweep-id abc"
    resub = [e for e in journal.events if e.kind == "job_resubmitted"]
    # It belongs to the head's incident, like every row of its recovery.
    incident = resub[0].data["incident"]
    assert resub[0].data == {"old_job_id": job, "new_job_id": new, "incident": incident}
    summary = [e for e in journal.events if e.kind == "incident"]
    assert [e.data["incident"] for e in summary] == [incident]
    assert "head_lost" in kinds(journal.events)
    assert list(wd.active_jobs) == [new]


async def test_gcs_dead_on_healthy_vm_restarts_head_without_recreating(
    pod: FakePod, clock: Clock
) -> None:
    wd, _, _ = make_watchdog(pod, clock)
    await poll(wd, pod)
    pod.head_up = False  # Ray head process died; the VM and the workers' VMs are fine
    await poll(wd, pod)
    assert not wd.running  # a silent GCS on a fine VM could be one slow poll: confirm first
    clock.t += 1
    await poll(wd, pod)
    status = await wait_done(wd)
    st = steps(status)
    assert st["recreate"][0] == "skipped" and "every VM is up" in st["recreate"][1]
    assert st["wait_ready"][0] == "skipped"
    assert st["head"][0] == "ok" and st["workers"][0] == "ok"
    assert status.ok


async def test_one_slow_gcs_poll_does_not_restart_the_cluster(pod: FakePod, clock: Clock) -> None:
    wd, _journal, _ = make_watchdog(pod, clock)
    await poll(wd, pod)
    pod.head_up = False  # the state query timed out once on a loaded box
    await poll(wd, pod)
    pod.head_up = True  # ...and answered on the next poll
    clock.t += 1
    await poll(wd, pod)
    assert not wd.running
    assert not any(c[0] in ("start_head", "join_workers") for c in pod.calls)


# -- soft symptoms ----------------------------------------------------------------------------------


async def test_worker_ray_died_on_fine_vm_rejoins_after_confirmation_only(
    pod: FakePod, clock: Clock
) -> None:
    wd, journal, _ = make_watchdog(pod, clock)
    await poll(wd, pod)
    pod.host("pod-w1").ray = 0
    await poll(wd, pod)
    assert not wd.running  # one poll could be a blip
    assert "ray_node_down" in kinds(journal.events)
    clock.t += 1
    await poll(wd, pod)
    status = await wait_done(wd)
    st = steps(status)
    assert st["recreate"] == ("skipped", "no host to recreate: every VM is up")
    assert st["bootstrap"][0] == "skipped"
    assert st["workers"][0] == "ok"
    assert [c for c in pod.calls if c[0] == "join_workers"] == [("join_workers", ("pod-w1",))]


async def test_duplicate_ray_nodes_on_one_ip_are_flagged_and_fixed(
    pod: FakePod, clock: Clock
) -> None:
    wd, journal, _ = make_watchdog(pod, clock, confirm_polls=1)
    await poll(wd, pod)
    pod.host("pod-w3").ray = 2
    await poll(wd, pod)
    dup = [e for e in journal.events if e.kind == "duplicate_ray_node"]
    assert dup and dup[0].host == "pod-w3" and dup[0].data["ray_nodes"] == 2
    status = await wait_done(wd)
    assert status.ok
    assert pod.host("pod-w3").ray == 1


async def test_stall_events_on_edges(pod: FakePod, clock: Clock) -> None:
    wd, journal, _ = make_watchdog(pod, clock)
    await poll(wd, pod)
    pod.stalled = ("run-a",)
    await poll(wd, pod)
    await poll(wd, pod)
    pod.stalled = ()
    await poll(wd, pod)
    assert kinds(journal.events) == ["stalled", "cadence_resumed"]
    assert not wd.running


# -- failures, retries, one at a time -------------------------------------------------------------


async def test_failed_step_is_retried_with_backoff_then_reported(
    pod: FakePod, clock: Clock
) -> None:
    wd, journal, _ = make_watchdog(pod, clock, backoff_s=0.5, step_retries=2)
    await poll(wd, pod)
    pod.always_fail["bootstrap"] = {"pod-w2"}
    pod.preempt("pod-w2")
    await poll(wd, pod)
    status = await wait_done(wd)
    assert (status.outcome, status.failed_step) == (RecoveryOutcome.FAILED, "bootstrap")
    st = steps(status)
    assert st["bootstrap"][0] == "failed"
    assert "3 attempt(s)" in st["bootstrap"][1] and "pod-w2: boom" in st["bootstrap"][1]
    boot = next(s for s in status.steps if s.name == "bootstrap")
    assert boot.attempts == 3 and boot.hosts == {"pod-w2": "failed"}
    # later steps were never run and say so by staying pending
    assert all(st[s][0] == "pending" for s in ("head", "workers", "tunnel", "resubmit", "verify"))
    assert clock.sleeps[:2] == [0.5, 1.0]  # exponential backoff between attempts
    failed = [e for e in journal.events if e.kind == "recovery_failed"]
    assert failed and failed[0].data["step"] == "bootstrap"
    # auto recovery backs off instead of hammering a broken cluster
    await poll(wd, pod)
    assert not wd.running


async def test_an_overlapping_step_that_fails_stops_the_round_before_the_step_it_precedes(
    pod: FakePod, clock: Clock
) -> None:
    """Force-stopping the dead head's workers runs alongside the head's rebuild; if it keeps
    failing on one, no worker joins the new head over a raylet of the old cluster."""
    wd, journal, _ = make_watchdog(pod, clock, step_retries=1)
    await poll(wd, pod)
    pod.always_fail["stop_orphans"] = {"pod-w3"}
    pod.preempt("pod-w0")
    await poll(wd, pod)
    status = await wait_done(wd)
    assert (status.outcome, status.failed_step) == (RecoveryOutcome.FAILED, "orphans")
    st = steps(status)
    assert st["orphans"][0] == "failed" and "pod-w3: boom" in st["orphans"][1]
    assert all(st[s][0] == "ok" for s in ("recreate", "wait_ready", "bootstrap", "head"))
    assert st["workers"][0] == "pending" and st["verify"][0] == "pending"
    assert not [c for c in pod.calls if c[0] == "join_workers"]
    failed = [e for e in journal.events if e.kind == "recovery_failed"]
    assert failed and failed[0].data["step"] == "orphans"


async def test_retry_reruns_only_the_hosts_that_failed(pod: FakePod, clock: Clock) -> None:
    wd, _, _ = make_watchdog(pod, clock)
    await poll(wd, pod)
    pod.preempt("pod-w2")
    pod.preempt("pod-w3")
    pod.fail["bootstrap"] = ["pod-w3"]  # fails once
    await poll(wd, pod)
    status = await wait_done(wd)
    assert status.ok
    boots = [c for c in pod.calls if c[0] == "bootstrap"]
    assert boots == [
        ("bootstrap", ("pod-w2", "pod-w3")),
        ("bootstrap", ("pod-w3",)),
    ]
    boot = next(s for s in status.steps if s.name == "bootstrap")
    assert boot.attempts == 2 and set(boot.hosts.values()) == {"ok"}


async def test_an_op_that_raises_is_a_failed_attempt_not_a_crash(
    pod: FakePod, clock: Clock
) -> None:
    wd, _, _ = make_watchdog(pod, clock, step_retries=1)
    await poll(wd, pod)

    async def broken() -> ActionResult:
        raise ConnectionError("tunnel: connect to 127.0.0.10:22 timed out")

    pod.open_tunnel = broken  # type: ignore[method-assign]
    pod.tunnel = False
    await poll(wd, pod)
    await poll(wd, pod)
    status = await wait_done(wd)
    assert (status.outcome, status.failed_step) == (RecoveryOutcome.FAILED, "tunnel")
    assert "timed out" in steps(status)["tunnel"][1]


async def test_one_recovery_at_a_time_second_request_joins(pod: FakePod, clock: Clock) -> None:
    wd, _, _ = make_watchdog(pod, clock)
    await poll(wd, pod)
    pod.preempt("pod-w1")
    a, b = await asyncio.gather(wd.recover("user"), wd.recover("script"))
    assert a == b and a.ok
    assert len([c for c in pod.calls if c[0] == "recreate"]) == 1
    await poll(wd, pod)  # healthy again: no new recovery
    assert not wd.running


async def test_healthy_request_skips_every_step_visibly(pod: FakePod, clock: Clock) -> None:
    wd, journal, _ = make_watchdog(pod, clock)
    status = await wd.recover("user")
    assert status.ok and status.mttr_s is None
    st = steps(status)
    assert st["detect"] == ("ok", "healthy")
    for name in ("recreate", "wait_ready", "bootstrap", "head", "workers", "tunnel", "resubmit"):
        assert st[name][0] == "skipped" and st[name][1], name
    assert st["verify"][0] == "ok"
    assert all(actor == "user" for _, actor in journal.actions)


async def test_no_auto_recovery_when_off_or_never_formed(pod: FakePod, clock: Clock) -> None:
    wd, journal, _ = make_watchdog(pod, clock, auto=False)
    await poll(wd, pod)
    pod.preempt("pod-w1")
    await poll(wd, pod)
    assert not wd.running and "preempted" in kinds(journal.events)
    # the user asks: MTTR still counts from the detection, not from the request
    clock.t += 5
    status = await wd.recover("user")
    assert status.ok and status.mttr_s is not None and status.mttr_s >= 5

    bare = FakePod(clock)  # Ray never started: nothing to "recover" on its own
    wd2, journal2, _ = make_watchdog(bare, clock)
    await poll(wd2, bare)
    await poll(wd2, bare)
    assert not wd2.running and not wd2.armed
    assert "head_lost" not in kinds(journal2.events)


async def test_new_loss_during_verify_runs_another_round(pod: FakePod, clock: Clock) -> None:
    wd, journal, _ = make_watchdog(pod, clock)
    await poll(wd, pod)
    pod.preempt("pod-w1")
    hit = []

    def second_preemption(p: FakePod) -> None:
        if not hit and ("join_workers", ("pod-w1",)) in p.calls:
            hit.append(1)
            p.preempt("pod-w2")

    pod.on_verify_observe = second_preemption
    await poll(wd, pod)
    status = await wait_done(wd)
    assert status.ok
    assert [c[1] for c in pod.calls if c[0] == "recreate"] == [("pod-w1",), ("pod-w2",)]
    assert [e.host for e in journal.events if e.kind == "preempted"] == ["pod-w1", "pod-w2"]


async def test_verify_times_out_with_the_unmet_criteria(pod: FakePod, clock: Clock) -> None:
    wd, _, _ = make_watchdog(pod, clock, verify_timeout_s=3.0)
    job = pod.submit("train")
    await poll(wd, pod)
    pod.preempt("pod-w0")

    orig = pod.resubmit

    async def resubmit_fails_on_cluster(job_ids: Sequence[str]) -> ActionResult:
        res = await orig(job_ids)
        for new in res.data["resubmitted"].values():
            pod.jobs[new] = "FAILED"
        return res

    pod.resubmit = resubmit_fails_on_cluster  # type: ignore[method-assign]
    await poll(wd, pod)
    status = await wait_done(wd)
    assert (status.outcome, status.failed_step) == (RecoveryOutcome.FAILED, "verify")
    msg = steps(status)["verify"][1]
    assert f"(was {job}) is FAILED" in msg and "not back after 3s" in msg


async def test_detect_time_falls_back_to_last_healthy_poll(pod: FakePod, clock: Clock) -> None:
    wd, _journal, _ = make_watchdog(pod, clock, confirm_polls=1)
    await poll(wd, pod)
    clock.t += 2.0
    pod.host("pod-w2").ray = 0  # no provider timestamp for a Ray death
    await poll(wd, pod)
    status = await wait_done(wd)
    assert status.detect_s == pytest.approx(2.0)


async def test_set_auto_publishes_and_journals(pod: FakePod, clock: Clock) -> None:
    wd, journal, published = make_watchdog(pod, clock)
    wd.set_auto(False, actor="user")
    await journal.flush()
    assert not wd.auto and wd.status.auto is False
    assert journal.events[-1].kind == "watchdog" and journal.events[-1].actor == "user"
    assert any(isinstance(u, RecoveryStatus) and not u.auto for u in published)


async def test_close_cancels_a_running_recovery(pod: FakePod, clock: Clock) -> None:
    wd, _journal, _ = make_watchdog(pod, clock)
    gate, reached = asyncio.Event(), asyncio.Event()
    orig = pod.wait_hosts_ready

    async def slow(hosts: Sequence[str], timeout_s: float) -> ActionResult:
        reached.set()
        await gate.wait()
        return await orig(hosts, timeout_s)

    pod.wait_hosts_ready = slow  # type: ignore[method-assign]
    pod.preempt("pod-w1")
    task = wd.start_recovery("user")
    await asyncio.wait_for(reached.wait(), 10)
    assert wd.status.active
    await wd.close()
    assert task.cancelled() or task.done()
    assert (wd.status.outcome, wd.status.failed_step) == (RecoveryOutcome.FAILED, "cancelled")
    assert StepState.RUNNING in {s.state for s in wd.status.steps}


async def test_a_resumable_close_leaves_the_recovery_for_the_next_owner(
    pod: FakePod, clock: Clock
) -> None:
    """`phantom watch` stopping on SIGTERM: the recovery is journaled as interrupted, not
    failed, so the journal shows it unfinished and the next owner resumes it."""
    wd, journal, _ = make_watchdog(pod, clock)
    gate, reached = asyncio.Event(), asyncio.Event()
    orig = pod.wait_hosts_ready

    async def slow(hosts: Sequence[str], timeout_s: float) -> ActionResult:
        reached.set()
        await gate.wait()
        return await orig(hosts, timeout_s)

    pod.wait_hosts_ready = slow  # type: ignore[method-assign]
    pod.preempt("pod-w1")
    wd.start_recovery("watchdog")
    await asyncio.wait_for(reached.wait(), 10)
    await wd.close(resumable=True)
    await journal.flush()
    assert wd.status.outcome is RecoveryOutcome.INTERRUPTED
    rows = journal.events
    assert "recovery_failed" not in kinds(rows)
    assert rows[-1].kind == "watchdog" and rows[-1].data == {"interrupted": True}
    (last,) = journal.journal.recoveries(limit=1)
    assert last.ok is None  # what the next owner's takeover resumes


async def test_a_takeover_finishing_an_interrupted_recovery_counts_it_recovered(
    pod: FakePod, clock: Clock, tmp_path: Path
) -> None:
    """The watcher SIGKILLed mid-recovery, the cluster back (GKE repaired its node) before
    the next one takes over: the incident is a loss recovered, its MTTR from the first
    watcher's detection. Before, the takeover closed it "nothing to recover", no MTTR (the
    GKE chaos drill's watcher kill during a node failure)."""
    path = tmp_path / "journal.sqlite"
    wd, journal, _ = make_watchdog(pod, clock, journal_path=path)
    reached = asyncio.Event()

    async def stuck(hosts: Sequence[str], timeout_s: float) -> ActionResult:
        reached.set()
        await asyncio.Event().wait()  # the process dies here
        raise AssertionError

    pod.wait_hosts_ready = stuck  # type: ignore[method-assign]
    pod.preempt("pod-w1")
    detected = clock()
    wd.start_recovery("watchdog")
    await asyncio.wait_for(reached.wait(), 10)
    await wd.close(resumable=True)
    await journal.flush()
    (left,) = journal.journal.recoveries(limit=1)
    assert left.ok is None and left.detected_at == detected

    clock.t += 5.0  # no watcher runs; the node comes back by itself
    h = pod.host("pod-w1")
    h.tpu_state, h.installed, h.ssh_ok, h.preempted_at = "READY", True, True, None
    h.ray, h.ray_head_gen = 1, pod.head_gen
    wd2, journal2, _ = make_watchdog(pod, clock, journal_path=path)
    wd2.start_recovery("watchdog", trigger="resuming", resumed_since=left.detected_at)
    status = await wait_done(wd2)
    await journal2.flush()
    end = [e for e in journal2.events if e.kind == "recovered"][-1]
    assert status.outcome is RecoveryOutcome.OK
    assert end.data["outcome"] == IncidentOutcome.RECOVERED
    assert end.data["mttr_s"] == pytest.approx(end.at - detected) and end.data["mttr_s"] >= 5.0


async def test_user_action_suspends_auto_recovery(pod: FakePod, clock: Clock) -> None:
    wd, _, _ = make_watchdog(pod, clock)
    await poll(wd, pod)
    with wd.suspended():
        pod.preempt("pod-w1")
        await poll(wd, pod)
        assert not wd.running
    await poll(wd, pod)
    status = await wait_done(wd)
    assert status.ok


async def test_teardown_disarms_and_forgets_jobs(pod: FakePod, clock: Clock) -> None:
    wd, _, _ = make_watchdog(pod, clock)
    pod.submit("train")
    await poll(wd, pod)
    assert wd.armed and wd.active_jobs
    wd.disarm()
    assert not wd.armed and not wd.active_jobs
    pod.preempt("pod-w0")  # a torn-down cluster is not "recovered" behind the user's back
    await poll(wd, pod)
    assert not wd.running


async def test_stall_events_can_be_left_to_the_cadence_tracker(pod: FakePod, clock: Clock) -> None:
    wd, journal, _ = make_watchdog(pod, clock, emit_stall_events=False)
    await poll(wd, pod)
    pod.stalled = ("run-a",)
    await poll(wd, pod)
    assert "stalled" not in kinds(journal.events)
    assert wd.last_diagnosis is not None and wd.last_diagnosis.stalled_runs == ("run-a",)


async def test_teardown_in_progress_never_rearms(pod: FakePod, clock: Clock) -> None:
    wd, journal, _ = make_watchdog(pod, clock)
    await poll(wd, pod)
    stale = await pod.observe()  # a poll that began before the teardown
    clock.t += 1
    with wd.suspended():
        wd.disarm()
        await poll(wd, pod)  # Ray is still up while `ray stop` runs everywhere
        await wd.on_observation(stale)
        assert not wd.armed
        pod.head_up = False  # ray stop done
        await poll(wd, pod)
    await wd.on_observation(stale)  # late answer of the old poll: still no re-arm
    assert not wd.armed
    clock.t += 1
    await poll(wd, pod)
    assert not wd.armed and not wd.running
    assert "head_lost" not in kinds(journal.events)


async def test_a_recover_before_any_poll_journals_the_preemption_and_times_from_it(
    pod: FakePod, clock: Clock
) -> None:
    """`preempt 2` then `recover` at once: the recovery's own observation is the first to
    see the loss; it is journaled, and MTTR runs from the preemption, not the request."""
    wd, journal, _ = make_watchdog(pod, clock)
    await poll(wd, pod)
    pod.preempt("pod-w2")
    clock.t += 20.0  # noticed later
    status = await wd.recover("script")
    assert [e.host for e in journal.events if e.kind == "preempted"] == ["pod-w2"]
    assert status.ok
    assert status.mttr_s is not None and status.mttr_s >= 20.0
    assert status.detect_s == pytest.approx(20.0)


async def test_a_notice_starts_the_recovery_at_once_and_times_it_from_the_notice(
    pod: FakePod, clock: Clock
) -> None:
    wd, journal, _ = make_watchdog(pod, clock)
    await poll(wd, pod)
    heard = clock()
    base = pod.observe

    async def with_notice() -> Observation:
        obs = await base()
        hosts = tuple(
            replace(h, notice_at=heard) if h.name == "pod-w1" and h.tpu_state == "READY" else h
            for h in obs.hosts
        )
        return replace(obs, hosts=hosts)

    pod.observe = with_notice  # type: ignore[method-assign]
    clock.t += 2.0
    await poll(wd, pod)  # hard: no confirmation poll needed
    assert wd.running
    (notice,) = [e for e in journal.events if e.kind == "preemption_notice"]
    assert notice.host == "pod-w1" and notice.data["notice_at"] == heard
    status = await wait_done(wd)
    assert status.ok and status.detect_s == pytest.approx(2.0)


# -- a watcher killed mid-recovery, a loss joining one (issue 45) --------------------------------


async def test_what_a_recovery_owes_is_journaled_so_a_killed_watcher_s_successor_resubmits(
    pod: FakePod, clock: Clock, tmp_path: Path
) -> None:
    """The watcher is SIGKILLed in the head's recovery, before it resubmitted the sweep; the
    next one, which never saw the job (its head is gone), resumes from the journal and
    resubmits it, rather than journaling `SKIPPED: no job was active on the lost head`."""
    path = tmp_path / "journal.sqlite"
    wd1, journal1, _ = make_watchdog(pod, clock, journal_path=path)
    job = pod.submit("sweep --sweep-id abc")
    await poll(wd1, pod)
    stuck, reached = asyncio.Event(), asyncio.Event()
    orig = pod.start_head

    async def killed_here() -> ActionResult:
        if not reached.is_set():  # the first watcher dies in this step: never returns
            reached.set()
            await stuck.wait()
        return await orig()

    pod.start_head = killed_here  # type: ignore[method-assign]
    pod.preempt("pod-w0")
    await poll(wd1, pod)
    await asyncio.wait_for(reached.wait(), 10)
    await journal1.flush()  # what reached the journal before the kill (no end row, no note)
    dead = wd1._task

    wd2, journal2, _ = make_watchdog(pod, clock, journal_path=path)
    (open_,) = [r for r in journal2.journal.recoveries() if r.ok is None]
    owed = journal2.journal.owed(open_)
    assert owed == {job: ""}
    wd2.start_recovery("watchdog", trigger="resuming an interrupted recovery", owed=owed)
    status = await wait_done(wd2)
    assert dead is not None
    dead.cancel()

    assert status.ok, steps(status)
    assert steps(status)["resubmit"][0] == "ok"
    assert ("resubmit", (job,)) in pod.calls
    (new,) = [j for j in pod.jobs if j != job]
    assert pod.jobs[new] == "RUNNING" and pod.submitted[new] == "sweep --sweep-id abc"


async def test_a_worker_lost_during_a_head_recovery_joins_it_rather_than_failing_it(
    pod: FakePod, clock: Clock
) -> None:
    """`failed at orphans`: a worker preempted while its orphaned raylet was being stopped.
    The loss joins the recovery: the next round recreates that worker, the recovery ends ok."""
    orig = pod.stop_orphans

    async def worker_lost_meanwhile(hosts: Sequence[str]) -> ActionResult:
        if pod.host("pod-w2").tpu_state == "READY":
            pod.preempt("pod-w2")
            pod.always_fail["stop_orphans"] = {"pod-w2"}  # ssh to a gone VM fails, always
        return await orig(hosts)

    pod.stop_orphans = worker_lost_meanwhile  # type: ignore[method-assign]
    wd, journal, _ = make_watchdog(pod, clock)  # the plan binds the op now
    job = pod.submit("train")
    await poll(wd, pod)
    pod.preempt("pod-w0")
    await poll(wd, pod)
    status = await wait_done(wd)

    assert status.ok, (status.failed_step, steps(status))
    assert ("recreate", ("pod-w2",)) in pod.calls, [c for c in pod.calls if c[0] != "observe"]
    assert all(h.tpu_state == "READY" and h.ray == 1 for h in pod.hosts)
    assert len([j for j in pod.jobs if j != job]) == 1  # resubmitted once
    failed = [e for e in journal.events if e.kind == "recovery_failed"]
    assert failed == []


async def test_resubmit_waits_for_the_orphans_step_to_end(pod: FakePod, clock: Clock) -> None:
    """Stragglers overlapping a restart: ``orphans`` (which ends the lost jobs' trainers still
    alive on the surviving workers) runs alongside the head's rebuild, but a resubmitted job
    must not start while an old trainer may still write into its run. Here the orphans step
    ends only once the resubmission has begun or is seen waiting for it (a straggler slow to
    go): the resubmission waits for it, and says so."""
    orig = pod.stop_orphans
    ended: list[bool] = []
    go = asyncio.Event()  # set by whichever comes first: resubmit called, or shown waiting

    async def slow_to_go(hosts: Sequence[str]) -> ActionResult:
        await go.wait()
        res = await orig(hosts)
        ended.append(True)
        return res

    resubmit = pod.resubmit
    orphans_done_at_resubmit: list[bool] = []

    async def resubmit_seen(job_ids: Sequence[str]) -> ActionResult:
        orphans_done_at_resubmit.append(bool(ended))
        go.set()
        return await resubmit(job_ids)

    pod.stop_orphans = slow_to_go  # type: ignore[method-assign]
    pod.resubmit = resubmit_seen  # type: ignore[method-assign]
    wd, _journal, published = make_watchdog(pod, clock)  # the plan binds the op now
    job = pod.submit("train")
    await poll(wd, pod)
    pod.preempt("pod-w0")
    await poll(wd, pod)

    def waiting() -> bool:
        statuses = [u for u in published if isinstance(u, RecoveryStatus)]
        shown = statuses and steps(statuses[-1])["resubmit"][1] == "waiting for orphans to end"
        if shown:
            go.set()
        return go.is_set()

    await until(waiting, 30, "resubmit called, or shown waiting for orphans")
    status = await wait_done(wd)

    assert status.ok, (status.failed_step, steps(status))
    assert orphans_done_at_resubmit == [True]
    assert len([j for j in pod.jobs if j != job]) == 1


async def test_jobs_owed_to_a_head_rebuilt_by_an_earlier_round_are_still_resubmitted(
    pod: FakePod, clock: Clock
) -> None:
    """A round rebuilt the head, then a worker was lost before it resubmitted (its tunnel step
    failed on the new loss). The next round finds the head alive, with none of the jobs the
    recovery owes: they went with the old head, and are resubmitted now, not skipped as
    "head kept"."""
    orig = pod.open_tunnel
    lost: list[str] = []

    async def worker_lost_meanwhile() -> ActionResult:
        if not lost:
            lost.append("pod-w3")
            pod.preempt("pod-w3")
            pod.calls.append(("open_tunnel", ()))
            return ActionResult(action="tunnel", ok=False, elapsed_s=0.0, message="reset")
        return await orig()

    pod.open_tunnel = worker_lost_meanwhile  # type: ignore[method-assign]
    wd, _journal, _ = make_watchdog(pod, clock)
    job = pod.submit("sweep --sweep-id abc")
    await poll(wd, pod)
    pod.preempt("pod-w0")
    await poll(wd, pod)
    status = await wait_done(wd)

    assert status.ok, (status.failed_step, steps(status))
    assert ("recreate", ("pod-w3",)) in pod.calls
    assert [c for c in pod.calls if c[0] == "resubmit"] == [("resubmit", (job,))]
    (new,) = [j for j in pod.jobs if j != job]
    assert pod.jobs[new] == "RUNNING" and pod.submitted[new] == "sweep --sweep-id abc"


async def test_a_resumed_recovery_that_finds_the_work_done_ends_recovered_from_its_start(
    pod: FakePod, clock: Clock
) -> None:
    """The killed watcher had brought the host back before it died; its successor finds
    nothing left to do. That incident was recovered (in two processes), not 'nothing to
    recover', and its MTTR runs from the first process's start."""
    wd, journal, _ = make_watchdog(pod, clock)
    began = clock() - 30.0
    wd.start_recovery("watchdog", trigger="resuming an interrupted recovery", resumed_since=began)
    status = await wait_done(wd)
    assert status.ok and status.mttr_s is not None and status.mttr_s >= 30.0
    (end,) = [e for e in journal.events if e.kind == "recovered"]
    assert end.data["outcome"] == "recovered"
    (rec,) = journal.journal.recoveries()
    assert rec.ok and rec.mttr_s == status.mttr_s
