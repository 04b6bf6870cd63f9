"""The watch drill in CI's slow run, small (``benchmarks.chaos_watch``): the real `phantom
watch` as the only watchdog, a Tune sweep submitted by a session that exited, eight seeded
kills (a whole slice among them), two of them overlapped by a second kill 2-8 s later, and
the watcher SIGKILLed 1-6 s into one recovery and started again 0-3 s later. The drill's
checks are the assertions; `make chaos-watch` runs a larger one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.chaos_watch import SLICE, WatchDrillSettings, run_watch_drill, table


@pytest.mark.slow
@pytest.mark.timeout(1500)
async def test_a_small_watch_drill_loses_nothing(tmp_path: Path) -> None:
    settings = WatchDrillSettings(seed=1, kills=8, overlaps=2, watcher_kills=1, slices=1)
    result = await run_watch_drill(settings, tmp_path / "drill", say=print)
    figs = result.figures
    print(table(figs))
    print(json.dumps(figs))
    assert not result.problems, "\n".join(result.problems)
    assert figs["kills"] >= 8 and figs["overlaps"] >= 2 and figs["watcher_kills"] >= 1
    assert figs["kills_by_kind"][SLICE] >= 1
    assert figs["trials_final"] == figs["run_cap"]
    assert figs["trials_restarted_from_zero"] == 0
    assert figs["steps_lost_past_checkpoint"] == 0
    assert figs["kills_not_journaled"] == 0 and figs["incidents_left_open"] == 0
    assert figs["recoveries_failed"] == 0
    assert figs["longest_row_bytes"] < 16_000
