"""When a running Tune sweep is worth preempting: shared by the sweep-recovery e2e tests."""

from __future__ import annotations

from pathlib import Path

from engine.sweep import read_status


def sweep_ready_to_preempt(storage: str, sweep_id: str, exp_dir: Path, trials: int) -> bool:
    """Every trial has started, each still running has reported (so has a checkpoint), and
    an experiment state saved after the last trial started knows them all.

    Waiting instead for a state newer than the latest *report* races the trials' reports
    (every ~0.5 s on a fast machine) against Tune's 5 s state cadence and can miss every gap
    until the trials are done. Raises when every trial is already final: nothing is left to
    preempt, and waiting longer cannot help.
    """
    status = read_status(storage, sweep_id)
    if len(status) < trials:
        return False
    running = [t for t in status.values() if not t["final"]]
    if not running:
        raise AssertionError(f"sweep {sweep_id} finished before it could be preempted: {status}")
    if any(t["attempts"][-1]["reports"] < 1 for t in running):
        return False
    states = list(exp_dir.glob("experiment_state-*.json"))
    started = max(t["attempts"][0]["started_unix"] for t in status.values())
    return bool(states) and max(s.stat().st_mtime for s in states) >= started
