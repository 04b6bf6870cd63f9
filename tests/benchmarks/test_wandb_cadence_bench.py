"""A tiny run of the W&B-API cadence poll benchmark (``benchmarks.wandb_cadence``): it starts
the emulator, polls every run through the real ``wandb.Api()``, and stops the emulator."""

from __future__ import annotations

from benchmarks.wandb_cadence import run


def test_the_wandb_cadence_benchmark_runs_small() -> None:
    lines: list[str] = []
    figures = run([2, 3], rows=10, polls=1, say=lines.append)
    assert [s["runs"] for s in figures["sizes"]] == [2, 3]
    # one Runs listing plus one sampled history per running run
    assert [s["requests"] for s in figures["sizes"]] == [3, 4]
    assert "ratio_3_2" in figures and lines[-1].startswith("ratio 3/2")
