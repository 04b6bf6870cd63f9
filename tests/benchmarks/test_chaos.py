"""The chaos drill in CI's slow run, small: four preemptions covering head/worker x with/without
notice (the head with notice during a single training job, the other three during a Ray Tune
sweep of run cap 4), then seed 000's sweep on W&B (``benchmarks.chaos_wandb``) with a worker,
then the head, preempted; the console's watchdog alone recovering, all on one pod bring-up
(a second pod and Ray for the W&B phase cost CI a minute and a half). The drill's checks are
the assertions (see ``benchmarks.chaos``); ``make chaos`` runs a larger one. Among them, the
ledger against the drill's ground truth (``benchmarks.chaos_ledger``): read from the drill's
journal and the trainers' logs as ``phantom report --format json --logs`` reads them, each
job's redone steps within 2% of what the trainers' own lines say (SIGKILLed ones too), each incident's recovery seconds are within 1 s of the watchdog's MTTR
and each job's causes sum to its wall time."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.chaos import DrillSettings, run_drill
from benchmarks.chaos_wandb import WANDB
from tests.benchmarks import TPU_DRILLS


@pytest.mark.slow
@pytest.mark.xdist_group(TPU_DRILLS)
@pytest.mark.timeout(1500)
async def test_a_small_chaos_drill_survives_every_preemption(tmp_path: Path) -> None:
    """Then the W&B phase, end to end on the same pod: the console submits seed 000's sweep
    with the W&B backend (2 nodes x 2 agents, W&B online against the W&B emulator, the key
    read by name); a worker, then the head, preempted mid-sweep; the watchdog relaunches the
    agents with the same sweep id. The sweep ends FINISHED at its run cap, every run
    finished, none restarted from step 0 after a checkpoint, each run's final weights
    downloadable by ``latest`` and ``step-N`` (checked by the real ``wandb.Api()``)."""
    settings = DrillSettings(seed=1, count=4, run_cap=4, notice_grace_s=20.0, wandb_run_cap=5)
    result = await run_drill(settings, tmp_path / "drill", say=print)
    print(result.table)
    print(json.dumps(result.figures))
    assert not result.problems, "\n".join(result.problems)
    figs = result.figures
    assert figs["survived"] == figs["preemptions"] == 4 + 2
    assert figs["trials_final"] == figs["run_cap"] == 4
    assert figs["job_final_step"] == figs["job_total_timesteps"]
    # the preemptions hit trainers, in both modes: a drill that hit nothing proves nothing
    hit = {loss.shot for loss in result.losses if loss.lost is not None}
    drilled = [r.shot for r in result.records if r.shot.phase != WANDB]
    assert any(s.index in hit for s in drilled if s.notice), "no shot with notice hit a trainer"
    assert any(s.index in hit for s in drilled if not s.notice), "no abrupt shot hit a trainer"
    assert figs["notice_to_checkpoint_s"]["n"] >= 1
    # the ledger's own numbers beside the ground truth (any disagreement is a problem above)
    ledger = figs["ledger"]
    for phase in ("job", "sweep"):
        job = ledger["jobs"][phase]
        # the ground truth is the trainers' own lines (a SIGKILL leaves W&B files short)
        assert (
            abs(job["redone_ledger"] - job["redone_log_lines"]) <= 0.02 * job["redone_log_lines"]
        ), (phase, job)
        assert job["causes_sum_s"] == pytest.approx(job["wall_ledger_s"], abs=0.01)
    # the abrupt preemptions cost steps: a check of 0 == 0 would prove nothing
    assert sum(ledger["jobs"][phase]["redone_log_lines"] for phase in ("job", "sweep")) > 0
    assert len(ledger["incidents"]) >= 4 + 2
    assert all(abs(i["diff_s"]) <= 1.0 for i in ledger["incidents"])
    # the W&B phase
    print(
        "W&B sweep figures: "
        + json.dumps(
            {
                "runs_final/run_cap": f"{figs.get('wandb_runs_final')}/{figs.get('wandb_run_cap')}",
                "restarted_from_zero": figs.get("wandb_restarted_from_zero"),
                "steps_lost_per_preemption": figs.get("wandb_steps_lost_per_preemption"),
                "mttr_s": figs.get("wandb_mttr_s"),
            }
        )
    )
    assert figs["wandb_runs_final"] == figs["wandb_run_cap"] == 5
    assert figs["wandb_restarted_from_zero"] == 0
    # both shots hit a run: a preemption that hit nothing proves nothing
    shot_on_wandb = [r.shot for r in result.records if r.shot.phase == WANDB]
    assert len(shot_on_wandb) == len(figs["wandb_steps_lost_per_preemption"]) == 2
    assert all(s.index in hit and not s.notice for s in shot_on_wandb), (hit, shot_on_wandb)
