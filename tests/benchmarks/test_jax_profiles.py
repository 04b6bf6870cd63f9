"""The JAX scoring bench stays runnable: a tiny shape, every figure printed, every path
agreeing with the reference and the NumPy loop (no timing is asserted: the figures are
the bench's to report)."""

from __future__ import annotations

import json

import pytest

from benchmarks import jax_profiles as bench

# All JAX tests share one xdist worker: JAX is imported and common programs compile once.
pytestmark = pytest.mark.xdist_group("jax")

SMALL = ["--profiles", "9", "--levels", "2", "--states", "16", "--actions", "3"]
QUICK = ["--candidates", "4", "--repeats", "2", "--baseline-repeats", "1", "--compile-cache", "off"]


def _figures(out: str) -> dict:
    return json.loads(out.strip().splitlines()[-1])


def _check_figures(out: str, metric: str) -> dict:
    """What every run prints, with ``metric`` (the first one asked for) as its primary pass."""
    assert "smaller than the target size" in out
    figures = _figures(out)
    assert figures["metric"] == metric and figures["profiles"] == 9
    assert figures["same_choice"] is True and figures["max_abs_err"] < 1e-4
    assert figures["jax_pass_ms"] > 0 and figures["copy_bandwidth_gbs"] > 0
    assert figures["read_only_ms"] > 0 and "read-only pass of the bank" in out
    if metric == "kl":  # the product bounds are KL's
        assert set(figures["product_ms"]) == {"fp32", "bf16x3", "bf16"}
        assert figures["numpy_matmul_pass_ms"] > 0
    else:
        assert figures["product_ms"] == {} and set(figures["elementwise_ms"]) == {"tv"}
    assert set(figures["auto"]) == {metric} or metric == "kl"
    return figures


def test_bench_prints_its_figures_at_a_small_shape(capsys: pytest.CaptureFixture[str]) -> None:
    """TV alone: no product bounds, only TV's elementwise bound. (KL's figures, once its own
    parametrization here, are checked on the run of every path below, whose first metric
    and so primary pass is KL: one bench run fewer, the same assertions.)"""
    assert bench.main([*SMALL, *QUICK, "--metric", "tv"]) == 0
    _check_figures(capsys.readouterr().out, "tv")


def test_bench_scores_every_path_against_its_bound(capsys: pytest.CaptureFixture[str]) -> None:
    """Every metric and implementation, KL in fp32 and bf16x3 (the precisions auto takes;
    every precision's error is test_pallas_kernels'), each pass against its bound; also
    the printed figures of the primary pass, KL (see the test above)."""
    argv = [*SMALL, *QUICK, "--metric", "all", "--impl", "auto,reference,tiled,pallas"]
    assert bench.main([*argv, "--precision", "auto,fp32,bf16x3"]) == 0
    figures = _check_figures(capsys.readouterr().out, "kl")
    rows = {(r["metric"], r["impl"], r["precision"]): r for r in figures["rows"]}
    # auto is the reference in fp32 on a CPU; KL's product is XLA's dot on every path
    expected = {("kl", "reference", p) for p in ("fp32", "bf16x3")}
    expected |= {(m, i, "fp32") for m in ("js", "tv") for i in ("reference", "tiled", "pallas")}
    assert set(rows) == expected and figures["failed"] == []
    assert figures["auto"] == {m: ["reference", "fp32"] for m in ("kl", "js", "tv")}
    for key, row in rows.items():
        assert row["pass_ms"] > 0 and row["bound_ms"] > 0 and row["pass_over_bound"] > 0
        assert row["same_choice_as_reference"] and row["same_choice_as_numpy"], key
        if key[2] == "fp32":
            assert row["rel_err_vs_reference"] < 1e-5, key
    assert rows[("kl", "reference", "fp32")]["vs_reference"] == 1.0
    assert "pass_over_bf16x3_product" in rows[("kl", "reference", "bf16x3")]
    for m in ("js", "tv"):
        assert rows[(m, "pallas", "fp32")]["pass_over_elementwise"] > 0


def test_bench_rejects_unknown_choices(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        bench.main([*SMALL, "--impl", "cuda"])
    assert exc.value.code == 2
    assert "--impl: cuda not in" in capsys.readouterr().err


def test_tile_sweep_runs_at_a_small_shape(capsys: pytest.CaptureFixture[str]) -> None:
    from benchmarks import jax_profiles_sweep as sweep

    argv = ["--profiles", "9", "--levels", "2", "--states", "5", "--actions", "3"]
    argv += ["--candidates", "3", "--metric", "tv,kl", "--repeats", "1", "--configs", "0"]
    assert sweep.main(argv) == 0
    rows = _figures(capsys.readouterr().out)["rows"]
    assert {r["metric"] for r in rows} == {"tv", "kl"}
    tv = [r for r in rows if r["metric"] == "tv"]
    assert [r["default"] for r in tv] == [True] and tv[0]["ms"] > 0
    assert tv[0]["roofline_ms"] > 0 and tv[0]["rel_err_vs_default"] == 0
    (kl,) = (r for r in rows if r["metric"] == "kl")
    assert kl["bf16x3_rel_err"] < 1e-4 and kl["fp32_ms"] > 0
