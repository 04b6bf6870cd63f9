"""The W&B phase's checks of the client's view of a finished sweep, and its shots."""

from __future__ import annotations

from typing import Any

from benchmarks.chaos_report import HEAD, WORKER
from benchmarks.chaos_wandb import WANDB, sweep_problems, sweep_url, wandb_shots


def _run(rid: str, state: str = "finished", step: int = 4096) -> dict[str, Any]:
    files = ["model.zip"]
    art = {"aliases": ["latest", f"step-{step}"], "latest_files": files, "step_files": files}
    return {"id": rid, "state": state, "artifact": art}


def test_a_finished_sweep_at_its_cap_has_no_problems() -> None:
    view = {"state": "FINISHED", "runs": [_run("a"), _run("b")]}
    assert sweep_problems(view, run_cap=2, total=4096) == []


def test_each_shortfall_is_named() -> None:
    no_art = {"id": "c", "state": "finished", "artifact": {"error": "CommError: not found"}}
    view = {"state": "RUNNING", "runs": [_run("a", "crashed"), _run("b", step=3072), no_art]}
    problems = sweep_problems(view, run_cap=4, total=4096)
    assert problems == [
        "W&B sweep is RUNNING, not FINISHED",
        "W&B sweep has 3 runs, run cap 4",
        "W&B run a is crashed, not finished",
        "W&B run b: final artifact aliases "
        "{'aliases': ['latest', 'step-3072'], 'latest_files': ['model.zip'], "
        "'step_files': ['model.zip']}",
        "W&B run c: final artifact aliases {'error': 'CommError: not found'}",
    ]


def test_a_worker_then_the_head_and_the_emulators_sweep_page() -> None:
    shots = wandb_shots(5)
    assert [(s.index, s.phase, s.kind, s.notice) for s in shots] == [
        (5, WANDB, WORKER, False),
        (6, WANDB, HEAD, False),
    ]
    assert (
        sweep_url("http://127.0.0.1:9/", "ab12") == "http://127.0.0.1:9/chaos/seed000/sweeps/ab12"
    )
