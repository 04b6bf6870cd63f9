"""The Cadence screen's rows say when a run's numbers are not current (its source is slow or
down) and why, instead of showing them as if they were."""

from __future__ import annotations

from console.screens.cadence import run_cells, run_detail
from console.services.model import RunCadence


def _run(**kw: object) -> RunCadence:
    base: dict[str, object] = {
        "run_id": "r1",
        "name": "ppo-a0.3",
        "source": "online",
        "last_step": 40,
        "last_at": 1000.0,
        "seconds_since": 3.0,
        "median_interval_s": 2.0,
        "steps_per_min": 30.0,
        "state": "running",
    }
    base.update(kw)
    return RunCadence(**base)  # type: ignore[arg-type]


def test_a_stale_run_shows_stale_and_why_and_a_stalled_one_still_shows_stalled() -> None:
    why = "online cadence: no answer for 5s"
    assert run_cells(_run())[-1][0] == "running"
    stale = _run(stale=why)
    assert run_cells(stale)[-1] == ("STALE", "yellow")
    assert run_cells(stale)[4][0] == "40"  # its last numbers, kept
    assert f"STALE: {why}" in run_detail(stale).plain
    assert run_cells(_run(stale=why, stalled=True))[-1][0] == "STALLED"
