"""The chaos drill in CI's slow run, small: four preemptions covering head/worker x with/without
notice (the head with notice during a single training job, the other three during a Ray Tune
sweep of run cap 4), the console's watchdog alone recovering. The drill's checks are the
assertions (see ``benchmarks.chaos``); ``make chaos`` runs a larger one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.chaos import DrillSettings, run_drill


@pytest.mark.slow
@pytest.mark.timeout(900)
async def test_a_small_chaos_drill_survives_every_preemption(tmp_path: Path) -> None:
    settings = DrillSettings(seed=1, count=4, run_cap=4, notice_grace_s=20.0)
    result = await run_drill(settings, tmp_path / "drill", say=print)
    print(result.table)
    print(json.dumps(result.figures))
    assert not result.problems, "\n".join(result.problems)
    figs = result.figures
    assert figs["survived"] == figs["preemptions"] == 4
    assert figs["trials_final"] == figs["run_cap"] == 4
    assert figs["job_final_step"] == figs["job_total_timesteps"]
    # the preemptions hit trainers, in both modes: a drill that hit nothing proves nothing
    assert figs["steps_lost_notice"]["n"] >= 1 and figs["steps_lost_abrupt"]["n"] >= 1
    assert figs["notice_to_checkpoint_s"]["n"] >= 1
