"""The JAX scoring bench stays runnable: a tiny shape, every figure printed, JAX and the
NumPy loop agreeing (no timing is asserted: the figures are the bench's to report)."""

from __future__ import annotations

import json

import pytest

from benchmarks import jax_profiles as bench


@pytest.mark.parametrize("metric", ["kl", "tv"])
def test_bench_prints_its_figures_at_a_small_shape(
    metric: str, capsys: pytest.CaptureFixture[str]
) -> None:
    small = ["--profiles", "8", "--levels", "2", "--states", "16", "--actions", "3"]
    argv = [*small, "--candidates", "4", "--repeats", "2", "--baseline-repeats", "1"]
    assert bench.main([*argv, "--metric", metric]) == 0
    out = capsys.readouterr().out
    assert "smaller than the target size" in out
    figures = json.loads(out.strip().splitlines()[-1])
    assert figures["metric"] == metric and figures["profiles"] == 8
    assert figures["same_choice"] is True and figures["max_abs_err"] < 1e-4
    assert figures["jax_pass_ms"] > 0 and figures["copy_bandwidth_gbs"] > 0
    if metric == "kl":  # only KL's pass is one matrix product
        assert figures["product_only_ms"] > 0 and "the product alone" in out
    else:
        assert figures["product_only_ms"] is None and "the product alone" not in out
