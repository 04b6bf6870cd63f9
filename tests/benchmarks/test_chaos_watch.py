"""The TPU VM chaos drill under the real `phantom watch` (``benchmarks.chaos_watch``), small,
in CI's slow run: a Ray Tune sweep submitted by a session that exits, then 8 kills with the
watcher as the only watchdog (workers, the head, the whole slice; 2 overlapping a running
recovery), the watcher SIGKILLed once mid-recovery and started again. The drill's checks are
the assertions: every trial final, none restarted from zero, no step lost past a checkpoint,
every kill journaled, no incident left open, no recovery failed, the counters equal to the
journal's lost hosts, journal rows under 16 KB, nothing left running."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.chaos_watch import WatchDrillSettings, main, run_watch_drill
from tests.benchmarks import TPU_DRILLS


@pytest.mark.slow
@pytest.mark.xdist_group(TPU_DRILLS)
@pytest.mark.timeout(1500)
async def test_a_small_watch_drill_loses_no_trial_with_the_watcher_killed(tmp_path: Path) -> None:
    settings = WatchDrillSettings(seed=1, kills=6, overlaps=2, watcher_kills=1, slices=1)
    result = await run_watch_drill(settings, tmp_path / "drill", say=print)
    print(json.dumps(result.figures))
    assert not result.problems, "\n".join(result.problems)
    figs = result.figures
    assert figs["kills"] == 8 and figs["overlaps"] == 2 and figs["watcher_kills"] == 1
    assert figs["kills_by_kind"]["slice"] == 1 and figs["kills_by_kind"]["worker"] >= 1
    assert figs["trials_final"] == figs["run_cap"]
    assert figs["trials_restarted_from_zero"] == 0 and figs["steps_lost_past_checkpoint"] == 0
    assert figs["incidents_left_open"] == 0 and figs["recoveries_failed"] == 0
    assert figs["prometheus_preemptions_summed"] == figs["preemptions_journaled"] > 0


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["--wandb-run-cap", "-1"], "--wandb-run-cap must be >= 0"),
        (["--wandb-kills", "0"], "--wandb-kills must be >= 1"),
        (["--wandb-kills", "2", "--wandb-overlaps", "3"], "--wandb-overlaps must be between"),
        (["--wandb-watcher-kills", "9"], "--wandb-watcher-kills must be between 0 and"),
    ],
)
def test_the_wandb_phases_bad_flags_are_named_before_anything_starts(
    argv: list[str], named: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert named in err and "Traceback" not in err
