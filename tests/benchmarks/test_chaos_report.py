"""The chaos drill's plan and its bookkeeping: seeded, covering, and charging each trainer's
loss to the right preemption (the drill itself: tests/bench/test_chaos.py, slow)."""

from __future__ import annotations

import pytest

from benchmarks.chaos_logs import TrainerLogs
from benchmarks.chaos_report import (
    HEAD,
    JOB,
    SWEEP,
    WORKER,
    ShotRecord,
    attribute,
    plan,
    problems_of_losses,
    restarts_from_zero,
    target_step,
)


def test_plan_is_seeded_and_covers_both_kinds_and_both_modes() -> None:
    assert plan(7, 6) == plan(7, 6)
    assert plan(7, 6) != plan(8, 6)
    for seed in range(20):
        three = plan(seed, 3)
        assert {(s.kind, s.notice) for s in three} == {
            (HEAD, True),
            (WORKER, True),
            (WORKER, False),
        }
        assert [s.phase for s in three] == [JOB, SWEEP, SWEEP]
        assert three[0].kind == HEAD  # a single job runs on the head: hit it there
        six = plan(seed, 6)
        assert {(s.kind, s.notice) for s in six} >= {
            (HEAD, True), (HEAD, False), (WORKER, True), (WORKER, False)
        }  # fmt: skip
        assert [s.phase for s in six].count(JOB) == 2 and six[0].kind == HEAD
        assert [s.index for s in six] == [1, 2, 3, 4, 5, 6]
        assert all(0.15 <= s.cycle <= 0.85 and 0 <= s.pick < 1 for s in six)


@pytest.mark.parametrize(
    ("reached", "cycle", "expected"),
    [(0, 0.5, 1024), (1000, 0.5, 1024), (1024, 0.5, 3072), (2100, 0.25, 2560), (5000, 0.9, 5939)],
)
def test_target_step_lands_at_the_cycle_point_after_reached(
    reached: int, cycle: float, expected: int
) -> None:
    assert target_step(reached, 2048, cycle) == expected


def _logs(tmp_path, lines_by_host):
    """Real trainer lines in Ray's log layout on emulated hosts' disks."""
    sandboxes = {}
    for host, files in lines_by_host.items():
        logs = tmp_path / host / "tmp" / "ray" / "session_1" / "logs"
        logs.mkdir(parents=True)
        for name, lines in files.items():
            (logs / name).write_text("".join(line + "\n" for line in lines))
        (logs.parent.parent / "session_latest").symlink_to(logs.parent)  # as Ray makes it
        sandboxes[host] = tmp_path / host
    return TrainerLogs(tmp_path / "mirror", sandboxes)


def test_losses_are_measured_from_the_trainers_own_lines(tmp_path) -> None:
    ckpt = tmp_path / "bucket" / "sw-t1" / "checkpoints" / "step-000000003000"
    ckpt.mkdir(parents=True)
    (ckpt / "MANIFEST.json").write_text("{}")
    logs = _logs(
        tmp_path,
        {
            "w1": {
                "worker-a.err": [
                    "[engine] starting sw-t1 from scratch (no checkpoint in x)",
                    "[engine] progress step=2048/8192 pct=25.0",
                    "[engine] checkpoint step=2048 at /b/sw-t1/checkpoints/step-000000002048 (0.01s)",
                    "[engine] progress step=2560/8192 pct=31.2",
                    f"[engine] preemption notice: checkpoint step=3000 complete at {ckpt} "
                    "(0.412s after SIGTERM); exiting 75 (preempted, resumable)",
                ],
                "worker-b.err": [
                    "[engine] starting sw-t2 from scratch (no checkpoint in x)",
                    "(_tune_trial pid=1) [engine] progress step=9999/8192",  # a forwarded copy
                    "[engine] checkpoint step=2048 at /b/sw-t2/checkpoints/step-000000002048 (0.01s)",
                    "[engine] progress step=3584/8192 pct=43.8",
                ],
            },
            "w2": {
                "worker-c.err": [
                    "[engine] resuming sw-t1 from checkpoint /b/sw-t1/x at step 3000",
                    "[engine] resuming sw-t2 from checkpoint /b/sw-t2/y at step 2048",
                    "[engine] progress step=8192/8192 pct=100.0",
                    "[engine] final weights step=8192 at /b/sw-t2/final",
                ]
            },
        },
    )
    logs.ingest(logs.read_new())
    t1, t2, t1b, t2b = logs.attempts
    assert (t1.end, t1.notice_step, t1.notice_s, t1.saved) == ("notice", 3000, 0.412, 3000)
    assert (t2.reached, t2.end) == (3584, "superseded")  # the forwarded copy is not its line
    assert t1b.start_step == 3000 and t2b.final and t2b.reached == 8192
    assert t1b.end == "superseded"  # a second trainer in the same file: the first is gone

    from benchmarks.chaos_report import Shot

    shot = Shot(1, SWEEP, WORKER, notice=True, cycle=0.5, pick=0.0)
    rec = ShotRecord(shot=shot, host="w1", at=t1.seen_at - 1, notice_at=t1.notice_done_at - 0.5)
    losses, problems = attribute([rec], logs, {"sw-": 2048})
    by_run = {(x.run, x.host): x for x in losses}
    assert by_run[("sw-t1", "w1")].lost == 0 and by_run[("sw-t1", "w1")].noticed
    assert by_run[("sw-t1", "w1")].notice_to_ckpt_s == pytest.approx(0.5)
    assert by_run[("sw-t2", "w1")].lost == 3584 - 2048
    # sw-t2 on w1 got the host's notice and wrote no notice checkpoint; and lost > interval
    # would be flagged, 1536 is not
    found = problems_of_losses([rec], losses)
    assert any("sw-t2 got a notice on w1 but wrote no notice checkpoint" in p for p in found)
    assert not any("more than one checkpoint interval" in p for p in found)
    # A trainer that starts on w1 after its notice (a trial restarted there within the
    # grace) never got the SIGTERM: it is an abrupt loss, not a missed notice.
    late = ShotRecord(shot=shot, host="w1", at=t1.seen_at - 1, notice_at=t2.seen_at - 5)
    losses, _ = attribute([late], logs, {"sw-": 2048})
    t2_late = next(x for x in losses if (x.run, x.host) == ("sw-t2", "w1"))
    assert t2_late.under_notice and not by_run[("sw-t2", "w1")].under_notice
    found = problems_of_losses([late], losses)
    assert not any("sw-t2 got a notice" in p for p in found), found
    # t1b ended superseded by t2b in its file, with no run after it: never resumed
    assert any("sw-t1: interrupted at step 3000 on w2, never resumed" in p for p in problems)
    assert restarts_from_zero(logs.runs()) == []


def test_a_restart_from_step_zero_after_a_checkpoint_is_named(tmp_path) -> None:
    logs = _logs(
        tmp_path,
        {
            "w0": {
                "job-driver-1.log": [
                    "[engine] starting job from scratch (no checkpoint in x)",
                    "[engine] checkpoint step=2048 at /b/job/checkpoints/step-000000002048 (0.01s)",
                ],
                "job-driver-2.log": ["[engine] starting job from scratch (no checkpoint in x)"],
            }
        },
    )
    logs.ingest(logs.read_new())
    assert restarts_from_zero(logs.runs()) == [
        "job: attempt on w0 restarted from step 0 after a checkpoint"
    ]


def test_figures_charge_each_preemption_the_steps_of_the_trainers_it_hit() -> None:
    from benchmarks.chaos_report import Loss, Shot, figures, table
    from console.services.model import RecoveryOutcome, RecoveryStatus

    def rec(i: int, kind: str, notice: bool, mttr: float) -> ShotRecord:
        r = ShotRecord(Shot(i, SWEEP, kind, notice, 0.5, 0.0), f"h{i}", at=float(i))
        r.recovery = RecoveryStatus(
            active=False, auto=True, outcome=RecoveryOutcome.OK, mttr_s=mttr
        )
        return r

    records = [rec(1, HEAD, False, 30.0), rec(2, WORKER, True, 5.0), rec(3, WORKER, False, 7.0)]
    losses = [
        Loss(1, "sw-a", "h1", "killed", False, 4864, 4096, 4096),
        Loss(1, "sw-b", "h2", "notice", True, 8091, 8091, 4096),  # saved by its death signal
        Loss(2, "sw-a", "h2", "notice", True, 5000, 5000, 4096, notice_to_ckpt_s=0.6),
    ]  # preemption 3 hit no trainer: no sample
    figs = figures(
        records,
        losses,
        trials_final=2,
        run_cap=2,
        job_final_step=10,
        job_total=10,
        intervals={"sw-": 4096},
        problems=[],
        wall_s=1.0,
        seed=1,
    )
    assert figs["steps_lost_abrupt"] == {"n": 1, "median": 768.0, "max": 768.0, "samples": [768.0]}
    assert figs["steps_lost_notice"]["samples"] == [0.0]
    assert figs["mttr_worker_s"] == {"n": 2, "median": 6.0, "max": 7.0}
    assert figs["mttr_by_mode_s"]["head/abrupt"]["max"] == 30.0
    assert figs["survived"] == 3 and figs["notice_to_checkpoint_s"]["median"] == 0.6
    text = table(figs, records, losses, {"sw-": "trial "})
    assert "trial a 4864->4096 (768)" in text and "trial b 8091->8091 (0, notice)" in text
    assert "preemptions survived        3/3" in text


def test_a_trial_status_file_restarting_from_zero_after_a_report_is_named() -> None:
    from benchmarks.chaos_report import trial_restarts

    def attempt(started: float, resumed: int, reports: int) -> dict[str, float | int]:
        return {"started_unix": started, "resumed_from_step": resumed, "reports": reports}

    trials = {
        "t_ok": {"attempts": [attempt(1, 0, 0), attempt(2, 0, 2), attempt(3, 4096, 1)]},
        "t_bad": {"attempts": [attempt(2, 0, 0), attempt(1, 0, 1)]},  # out of order on disk
    }
    (found,) = trial_restarts(trials)
    assert found.startswith("trial t_bad restarted from step 0 after a checkpoint")
