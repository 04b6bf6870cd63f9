"""Goodput accounting over journal rows written by the real journal (through the event sink,
so incidents are stamped and summarised as in the console): the split of wall time by cause,
that the causes always sum to wall time, ranges, steps, and a journal reopened after a restart."""

from __future__ import annotations

import asyncio
import math
from pathlib import Path

import pytest

from console.config import Config, parse_config
from console.services.ledger.goodput import Progress, StepPoint, account, chains
from console.services.ledger.timeline import Cause
from console.services.model import Event, EventKind
from console.services.record.journal import Journal
from console.wiring.settings import ledger_settings
from tests.support.incident_rows import journaled, recorded, replay
from tests.support.ledger_rows import drill

PRICING = ledger_settings(Config()).pricing


def _sums_to_wall(unit: object) -> None:
    seconds = unit.seconds  # type: ignore[attr-defined]
    assert math.fsum(seconds.values()) == pytest.approx(unit.wall_s, abs=1e-9)  # type: ignore[attr-defined]
    assert unit.productive_s + unit.badput_s == pytest.approx(unit.wall_s, abs=1e-9)  # type: ignore[attr-defined]


def test_a_preemption_splits_wall_time_by_cause() -> None:
    ledger = account(journaled(drill()), PRICING)
    (job,) = ledger.units
    assert job.members == ("A", "B")
    assert (job.start, job.end) == (0.0, 400.0)
    s = job.seconds
    assert s[Cause.PRODUCTIVE] == pytest.approx(88 + 225)  # 10..98, 175..400
    assert s[Cause.DETECT] == pytest.approx(2.0)
    assert s[Cause.CAPACITY] == pytest.approx(30.0)
    assert s[Cause.RECOVER] == pytest.approx(40.0)
    assert s[Cause.QUEUED] == pytest.approx(15.0)  # 0..10 before A ran, 170..175 B pending
    assert job.recover_steps == pytest.approx(
        {"recovery": 8.5, "recreate": 0.5, "wait_ready": 10.0, "head": 20.0, "resubmit": 1.0}
    )
    assert len(job.incidents) == 1
    _sums_to_wall(job)
    _sums_to_wall(ledger.cluster)
    assert ledger.cluster.seconds == job.seconds  # one job: the pod did what it did


def test_steps_give_warmup_and_redone_work() -> None:
    progress = {
        "A": Progress((StepPoint(20.0, 100), StepPoint(95.0, 5000))),
        "B": Progress(
            (StepPoint(185.0, 4100), StepPoint(215.0, 5000), StepPoint(390.0, 9000)), 4000
        ),
    }
    (job,) = account(journaled(drill()), PRICING, progress=progress).units
    s = job.seconds
    assert s[Cause.WARMUP] == pytest.approx(10.0 + 10.0)  # 10..20 and 175..185
    assert s[Cause.REDONE] == pytest.approx(30.0)  # 185..215: steps 4000..5000 again
    assert s[Cause.PRODUCTIVE] == pytest.approx(313.0 - 50.0)
    assert job.redone_steps == 1000
    assert job.steps_known
    _sums_to_wall(job)


def test_a_sweeps_trainers_are_counted_per_run() -> None:
    """A sweep's attempt trains several runs at once, and Ray Tune restarts a trial inside
    the attempt: each trainer's redone steps are against its own run's earlier trainers,
    never against another trial's steps."""
    progress = {
        "A": (
            Progress((StepPoint(20.0, 1024), StepPoint(90.0, 6144)), 0, "t1"),
            Progress((StepPoint(21.0, 1024), StepPoint(60.0, 3072)), 0, "t2"),
            # t2 restarted by Tune inside A from its checkpoint at 2048: 1024 steps again
            Progress((StepPoint(70.0, 3072), StepPoint(95.0, 5120)), 2048, "t2"),
        ),
        # after the head's loss: t1 from 4096 (2048 again), t2 from 4096 (1024 again)
        "B": (
            Progress((StepPoint(186.0, 5120), StepPoint(215.0, 8192)), 4096, "t1"),
            Progress((StepPoint(185.0, 5120), StepPoint(200.0, 6144)), 4096, "t2"),
        ),
    }
    (job,) = account(journaled(drill()), PRICING, progress=progress).units
    assert job.redone_steps == 1024 + 2048 + 1024
    assert job.steps_known
    s = job.seconds
    assert s[Cause.WARMUP] == pytest.approx(10.0 + 10.0)  # to each attempt's first step
    _sums_to_wall(job)


def test_a_range_clips_and_still_sums() -> None:
    ledger = account(journaled(drill()), PRICING, start=120.0, end=500.0)
    (job,) = ledger.units
    assert (job.start, job.end) == (120.0, 400.0)
    _sums_to_wall(job)
    assert ledger.cluster.wall_s == pytest.approx(380.0)
    assert ledger.cluster.seconds[Cause.IDLE] == pytest.approx(100.0)  # 400..500: no job
    _sums_to_wall(ledger.cluster)


def test_money_headline_compares_spot_with_on_demand_for_the_productive_part() -> None:
    config = parse_config(
        {
            "cluster": {"accelerator_type": "v5p-64"},
            "prices": {"spot_per_chip_hour": 2.0, "on_demand_per_chip_hour": 5.0},
        }
    )
    ledger = account(journaled(drill()), ledger_settings(config).pricing, start=0.0, end=3600.0)
    money = ledger.money
    assert money["chip_hours"] == pytest.approx(32.0)  # v5p-64: 32 chips, 1 h
    assert money["spot_usd"] == pytest.approx(64.0)
    assert money["on_demand_same_work_usd"] == pytest.approx(313 / 3600 * 32 * 5.0, abs=0.01)
    assert money["spot_saved_usd"] < 0  # the pod idled most of the hour: spot lost
    assert "spot lost $" in ledger.headline()
    assert ledger.headline().startswith("goodput 8.7% of 1h00m")


def test_recorded_preemptions_sum_to_wall_time_and_keep_the_steps() -> None:
    rows = journaled(recorded(start=1_000.0))
    ledger = account(rows, PRICING)
    (job,) = ledger.units
    assert len(job.members) == 2  # lost with the head, resubmitted
    assert len(ledger.cluster.incidents) == 2
    _sums_to_wall(job)
    _sums_to_wall(ledger.cluster)
    steps = ledger.cluster.recover_steps
    assert steps["workers"] == pytest.approx(4.584 + 21.62, abs=0.01)
    assert ledger.cluster.seconds[Cause.DETECT] > 0
    # every incident is detect + recover + capacity, from the loss (the row minus its
    # detect_s) to recovered
    c = ledger.cluster.seconds
    incident_s = c[Cause.DETECT] + c[Cause.RECOVER] + c[Cause.CAPACITY]
    assert incident_s == pytest.approx((66.566 - 61.469) + (108.685 - (67.176 - 0.513)), abs=0.01)


def test_the_ledger_survives_a_console_restart(tmp_path: Path) -> None:
    path = tmp_path / "journal.sqlite"
    rows = drill()
    first = Journal(path)
    asyncio.run(replay(first, rows[:9]))  # the console dies mid-recovery
    first.close()
    second = Journal(path)
    asyncio.run(replay(second, rows[9:]))  # a new one journals the rest
    stored = second.query(limit=10_000)
    second.close()
    before = account(journaled(rows), PRICING).units[0].seconds
    after = account(stored, PRICING).units[0].seconds
    assert after[Cause.PRODUCTIVE] == pytest.approx(before[Cause.PRODUCTIVE])
    assert after[Cause.CAPACITY] == pytest.approx(before[Cause.CAPACITY])
    assert after[Cause.DETECT] == pytest.approx(before[Cause.DETECT])


def test_chains_follow_resubmissions_in_order() -> None:
    rows = [
        Event(1.0, EventKind.JOB_RESUBMITTED, "", data={"old_job_id": "b", "new_job_id": "c"}),
        Event(0.0, EventKind.JOB_RESUBMITTED, "", data={"old_job_id": "a", "new_job_id": "b"}),
    ]
    assert chains(rows, ["a", "b", "c", "x"]) == [("a", "b", "c"), ("x",)]


def test_no_rows_is_said_not_divided_by_zero() -> None:
    ledger = account([], PRICING)
    assert ledger.cluster.goodput is None
    assert ledger.headline() == "ledger: no time recorded in this range"
    assert ledger.to_json()["notes"] == ["no journal rows in this range"]


def test_without_the_resumed_step_the_first_logged_step_bounds_it() -> None:
    progress = {
        "A": Progress((StepPoint(20.0, 100), StepPoint(95.0, 5000))),
        "B": Progress((StepPoint(185.0, 4100), StepPoint(215.0, 5000))),
    }
    (job,) = account(journaled(drill()), PRICING, progress=progress).units
    assert job.redone_steps == 900  # 4100..5000 (the checkpoint at 4000 is not known)
    assert job.seconds[Cause.REDONE] == pytest.approx(30.0)


def test_a_gke_workload_restarting_in_place_waits_for_quota() -> None:
    """A workload's slice is preempted (GKE's own state change opens the incident), its pods
    wait for quota, the JobSet restarts in place: one unit of kind workload."""
    rows = [
        Event(0.0, EventKind.JOB_STATE, "workload grpo new -> RUNNING", actor="jobs",
              data={"job_id": "grpo", "old_status": None, "new_status": "RUNNING"}),
        Event(100.0, EventKind.STATE_CHANGE, "pool-a: READY -> PREEMPTED", host="pool-a",
              actor="watchdog", data={"from": "READY", "to": "PREEMPTED", "detect_s": 1.0}),
        Event(105.0, EventKind.QUOTA_PENDING, "workload grpo: pods unschedulable", host="grpo",
              actor="watchdog", data={"workload": "grpo", "pods": 8}),
        Event(160.0, EventKind.JOBSET_RESTARTED, "workload grpo: JobSet restarted (0 -> 1)",
              host="grpo", actor="watchdog", data={"workload": "grpo", "restarts": 1}),
        Event(400.0, EventKind.JOB_STATE, "workload grpo RUNNING -> SUCCEEDED", actor="jobs",
              data={"job_id": "grpo", "old_status": "RUNNING", "new_status": "SUCCEEDED"}),
    ]  # fmt: skip
    (unit,) = account(journaled(rows), PRICING).units
    assert (unit.kind, unit.name) == ("workload", "grpo")
    s = unit.seconds
    assert s[Cause.DETECT] == pytest.approx(1.0)  # 99..100
    assert s[Cause.RECOVER] == pytest.approx(5.0)  # seen at 100, quota from 105
    assert s[Cause.CAPACITY] == pytest.approx(55.0)  # 105..160, the incident's last row
    assert s[Cause.PRODUCTIVE] == pytest.approx(400.0 - 61.0)
    _sums_to_wall(unit)


def test_each_incident_says_what_it_cost_by_cause() -> None:
    ledger = account(journaled(drill()), PRICING)
    (incident,) = ledger.incidents()
    assert incident["lost_at"] == pytest.approx(98.0)
    assert incident["wall_s"] == pytest.approx(72.0)  # 98..170
    assert (incident["detect_s"], incident["capacity_s"]) == pytest.approx((2.0, 30.0))
    assert incident["recover_s"] == pytest.approx(40.0)
    assert incident["recover_steps"]["head"] == pytest.approx(20.0)
    assert ledger.to_json()["incidents"] == ledger.incidents()


def test_a_notice_incident_starts_when_the_vm_gave_its_notice() -> None:
    """The notice row is journaled when a poll reads the VM's metadata, up to a poll later;
    the watchdog's MTTR counts from the notice's own time, and so does the incident."""
    rows = [
        Event(50.0, EventKind.WATCHDOG, "watchdog on", actor="user"),  # the record begins
        Event(100.9, EventKind.PREEMPTION_NOTICE, "w0: preemption notice", host="w0",
              actor="watchdog", data={"notice_at": 100.0}),
        Event(100.95, EventKind.RECOVERY_STARTED, "recovery started: w0", actor="watchdog"),
        Event(141.0, EventKind.RECOVERED, "cluster recovered", actor="watchdog",
              data={"mttr_s": 41.0}),
    ]  # fmt: skip
    (incident,) = account(journaled(rows), PRICING).incidents()
    assert incident["lost_at"] == pytest.approx(100.0)
    assert incident["detect_s"] == pytest.approx(0.9)
    assert incident["wall_s"] == pytest.approx(41.0)  # the watchdog's MTTR


def test_a_job_that_ended_while_no_console_watched_ends_when_it_ended() -> None:
    rows = [
        Event(0.0, EventKind.JOB_STATE, "job J new -> RUNNING", actor="jobs",
              data={"job_id": "J", "old_status": None, "new_status": "RUNNING"}),
        # the console was down from 50 s; the next one, at 300 s, sees J already finished
        Event(300.0, EventKind.JOB_STATE, "job J new -> SUCCEEDED", actor="jobs",
              data={"job_id": "J", "old_status": None, "new_status": "SUCCEEDED"}),
    ]  # fmt: skip
    stored = journaled(rows)
    assert account(stored, PRICING).units[0].productive_s == pytest.approx(300.0)
    (job,) = account(stored, PRICING, outcomes={"J": 120.0}).units
    assert (job.end, job.productive_s) == (120.0, pytest.approx(120.0))


def test_the_pod_trained_while_any_job_did() -> None:
    """Job X trains 0..100 s; job Y starts at 50 s and warms up until its first step at 80 s:
    Y's warm-up is Y's badput, not the pod's (X kept it busy)."""
    rows = [
        Event(0.0, EventKind.JOB_STATE, "X", data={"job_id": "X", "new_status": "RUNNING"}),
        Event(50.0, EventKind.JOB_STATE, "Y", data={"job_id": "Y", "new_status": "RUNNING"}),
        Event(100.0, EventKind.JOB_STATE, "X", data={"job_id": "X", "new_status": "SUCCEEDED"}),
        Event(120.0, EventKind.JOB_STATE, "Y", data={"job_id": "Y", "new_status": "SUCCEEDED"}),
    ]
    progress = {"Y": Progress((StepPoint(80.0, 1), StepPoint(110.0, 9)))}
    ledger = account(journaled(rows), PRICING, progress=progress)
    y = next(u for u in ledger.units if u.name == "Y")
    assert y.seconds[Cause.WARMUP] == pytest.approx(30.0)
    assert ledger.cluster.seconds[Cause.WARMUP] == 0.0
    assert ledger.cluster.seconds[Cause.PRODUCTIVE] == pytest.approx(120.0)
    _sums_to_wall(ledger.cluster)
