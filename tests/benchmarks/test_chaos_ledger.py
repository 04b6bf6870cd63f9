"""The chaos drill's ledger check (``benchmarks.chaos_ledger``): the ground truth of redone
steps from the trainers' log lines (their W&B run files beside it), and each disagreement
between the ledger and the drill's ground truth named.
The drill itself runs it in the slow test (tests/benchmarks/test_chaos.py)."""

from __future__ import annotations

from typing import Any

from benchmarks.chaos_ledger import JobTruth, Trainer, check, redone_by_run
from benchmarks.chaos_report import Loss

TRAINERS = [
    Trainer("sw-1", 10.0, 0, 6144),
    Trainer("sw-2", 11.0, 0, 3072),
    Trainer("sw-2", 70.0, 2048, 5120),  # restarted by Tune from its checkpoint at 2048
    Trainer("sw-2", 185.0, 4096, 6144),  # after the head: 5120 -> 4096
    Trainer("sw-1", 186.0, 4096, 8192),  # 6144 -> 4096
    Trainer("job", 1.0, 0, 2300),
    Trainer("job", 50.0, 2300, 4096),  # notice checkpoint at 2300: nothing again
]
LOSSES = [
    Loss(1, "job", "h0", "notice", True, 2300, 2300, 2048),
    Loss(2, "sw-2", "h1", "killed", False, 3072, 2048, 4096),
    Loss(3, "sw-1", "h0", "killed", False, 6144, 4096, 4096),
    Loss(3, "sw-2", "h2", "killed", False, 5120, 4096, 4096),
]


def unit(job_ids: list[str], redone: int, wall: float = 100.0) -> dict[str, Any]:
    return {
        "jobs": job_ids,
        "redone_steps": redone,
        "steps_known": True,
        "wall_s": wall,
        "goodput": 0.9,
        "seconds": {"productive": wall - 10.0, "recover": 7.5, "detect": 2.5},
    }


def ledger(job_redone: int = 0, sweep_redone: int = 4096, recover_s: float = 20.0) -> Any:
    return {
        "jobs": [unit(["J1", "J2"], job_redone), unit(["S1", "S2"], sweep_redone)],
        "cluster": unit([], 0, 250.0),
        "incidents": [
            {"incident": "inc-1", "detect_s": 0.5, "capacity_s": 0.0, "recover_s": recover_s},
        ],
    }


def truths() -> list[JobTruth]:
    return [
        JobTruth("job", "J1", "job", 1000.0, 1100.5),
        JobTruth("sweep", "S1", "sw-", 2000.0, 2099.0),
    ]


def test_the_run_files_count_is_per_run() -> None:
    assert redone_by_run(TRAINERS) == {"sw-1": 2048, "sw-2": 1024 + 1024}


def test_a_trainer_lost_before_it_caught_up_redid_only_what_it_reached() -> None:
    """6144 reached, then resumed at 4096 and lost at 5000, then resumed at 4096 again: the
    steps thrown away are 2048 + 904, not 2048 twice."""
    chain = [
        Trainer("r", 1.0, 0, 6144),
        Trainer("r", 2.0, 4096, 5000),
        Trainer("r", 3.0, 4096, 9000),
    ]
    assert redone_by_run(chain) == {"r": 2048 + 904}


def test_a_ledger_that_agrees_passes() -> None:
    got = check(ledger(), {"inc-1": 20.2}, TRAINERS, LOSSES, truths())
    assert got.problems == [] and got.notes == []
    figs = got.figures()
    assert figs["jobs"]["sweep"] == {
        "trainers": 5,
        "redone_trainers": 4096,
        "redone_log_lines": 4096,
        "redone_ledger": 4096,
        "redone_error": 0.0,
        "wall_drill_s": 99.0,
        "wall_ledger_s": 100.0,
        "causes_sum_s": 100.0,
        "goodput": 0.9,
    }
    assert figs["incidents"][0]["diff_s"] == 0.3
    assert "inc-1" in got.table()


def test_within_two_percent_of_the_trainers_lines_passes() -> None:
    """The ground truth is the lines; 2% of 4096 is 81 steps."""
    for redone, ok in ((4096 + 81, True), (4096 - 81, True), (4096 + 82, False), (4014, False)):
        got = check(ledger(sweep_redone=redone), {"inc-1": 20.2}, TRAINERS, LOSSES, truths())
        assert (got.problems == []) is ok, (redone, got.problems)


def test_each_disagreement_is_named() -> None:
    bad = ledger(job_redone=256, sweep_redone=3072, recover_s=22.0)
    bad["jobs"][0]["seconds"]["idle"] = 1.0  # no longer sums to its wall time
    bad["jobs"][1]["wall_s"] = 110.0  # the sweep ran 99 s by the drill's clock
    lines = LOSSES[:1] + [x for x in LOSSES[1:] if x.run != "sw-1"]  # sw-1's last point lost
    got = check(bad, {"inc-1": 20.0, "inc-2": 5.0}, TRAINERS, lines, truths())
    text = "\n".join(got.problems)
    assert "the job (J1) counts 256 redone steps; its trainers' log lines say 0" in text
    assert "the sweep (S1) counts 3072 redone steps; its trainers' log lines say 2048" in text
    assert "causes sum to 101.000s, its wall time is 100.000s" in text
    assert "wall time 110.0s, the drill's own 99.0s" in text
    assert "incident inc-1 cost 22.50s" in text and "MTTR 20.00s" in text
    assert "incident inc-2 (MTTR 5.0s) is missing" in text
    assert got.notes == [
        "sweep: the trainers' log lines say 2048 steps redone, their W&B run files 4096 "
        "(sw-1 2048, sw-2 2048): the files are no count of trainers (a SIGKILL leaves one "
        "short; a notice's fresh W&B session writes a second file, from step 0 by its config)"
    ]
