"""What ``impl="auto"`` and ``precision="auto"`` stand for, per backend and shape: a table
of measured choices (``AUTO``), each row with the run that decided it.

Implementations (``divergence.py``): ``reference`` (per-agent ``lax.map``; for KL one XLA
matrix product), ``tiled`` (an XLA loop over blocks of profiles), ``pallas`` (the Mosaic
kernels of ``pallas_kernels.py`` for JS and TV; KL's product is XLA's dot on every path).
KL's product precisions: ``fp32`` (float32 inputs, ``HIGHEST``), ``bf16x3`` (each input
split into two bfloat16 parts, three products), ``tf32`` (TF32 on a GPU; the 3-pass bf16
algorithm on a TPU), ``bf16`` (bfloat16 inputs); always float32 accumulation.

A row applies to its backend and metric from ``min_agents`` candidates up (the last
matching row wins). A backend without rows gets the reference path in fp32: the
definition, today's CPU choice, and what nobody has measured better.
"""

from __future__ import annotations

from typing import NamedTuple

import jax

__all__ = [
    "AUTO",
    "IMPLS",
    "METRICS",
    "PRECISIONS",
    "AutoRow",
    "check",
    "resolve_impl",
    "resolve_precision",
]

METRICS = ("kl", "js", "tv")
IMPLS = ("auto", "reference", "tiled", "pallas")
PRECISIONS = ("auto", "fp32", "bf16x3", "tf32", "bf16")


class AutoRow(NamedTuple):
    backend: str  # jax.default_backend(): "cpu", "tpu", ...
    metric: str
    min_agents: int  # applies from this many agents (candidates) up
    impl: str
    precision: str  # KL's product ("fp32" for JS and TV)
    measured: str  # the run that decided it


_CPU = (
    "XLA:CPU, 2 shared cores, default size (256 x 16 x 1536 x 4, 16 candidates), "
    "`python -m benchmarks.jax_profiles --metric all --impl auto,reference --repeats 3 "
    "--baseline-repeats 1` and `--impl tiled`: JS reference 1.1 s vs tiled 3.6 s, TV 1.3 s "
    "vs 2.1 s; KL's dot reads the bank once on every path"
)

_TPU = (
    "one TPU v5e, JAX 0.10.2, 16 x 1536 x 4 per profile, `bash benchmarks/jax_profiles_device.sh` "
    "(issue 46's runs): "
)
_TPU_JS_TV = _TPU + (
    "pallas (action planes held by the bank) against reference and tiled, same run: 256 "
    "profiles x 16 agents JS 1.39 vs 4.55 and 37.3 ms, TV 1.26 vs 3.37 and 4.52; 4096 x 16 "
    "JS 7.72 vs 71.8 and 586, TV 4.20 vs 57.2 and 62.3; 4096 x 256 JS 96.6 vs 1,087 and "
    "2,529, TV 43.8 vs 897 and 437"
)
_TPU_KL = _TPU + (
    "XLA's product at 4096 profiles, 16 / 64 / 128 / 256 agents (sweep): fp32 2.94 / 2.99 / "
    "4.01 / 7.9 ms, bf16x3 2.88 / 2.91 / 2.92 / 4.1, the read-only pass 2.9. fp32 is free "
    "while reading the bank bounds the pass (up to 64 agents); from 128 its six MXU passes "
    "do, and bf16x3 (relative error 6.2e-6 on the divergences at 256, same choice) takes "
    "them; bf16 (1.2e-3) stays an explicit choice"
)

AUTO: tuple[AutoRow, ...] = (
    AutoRow("cpu", "kl", 1, "reference", "fp32", _CPU),
    AutoRow("cpu", "js", 1, "reference", "fp32", _CPU),
    AutoRow("cpu", "tv", 1, "reference", "fp32", _CPU),
    AutoRow("tpu", "kl", 1, "reference", "fp32", _TPU_KL),
    AutoRow("tpu", "kl", 128, "reference", "bf16x3", _TPU_KL),
    AutoRow("tpu", "js", 1, "pallas", "fp32", _TPU_JS_TV),
    AutoRow("tpu", "tv", 1, "pallas", "fp32", _TPU_JS_TV),
)


def _row(metric: str, n_agents: int, backend: str | None) -> AutoRow | None:
    backend = jax.default_backend() if backend is None else backend
    found = None
    for row in AUTO:
        if row.backend == backend and row.metric == metric and n_agents >= row.min_agents:
            found = row
    return found


def check(metric: str, impl: str = "auto", precision: str = "auto") -> None:
    """Raise ``ValueError`` naming the argument and its choices for an unknown name."""
    if metric not in METRICS:
        raise ValueError(
            f"unknown divergence metric {metric!r}; choose one of {', '.join(METRICS)}"
        )
    if impl not in IMPLS:
        raise ValueError(f"unknown impl {impl!r}; choose one of {', '.join(IMPLS)}")
    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r}; choose one of {', '.join(PRECISIONS)}")


def resolve_impl(
    metric: str, impl: str = "auto", backend: str | None = None, n_agents: int = 1
) -> str:
    """The implementation ``impl`` stands for on ``backend`` (default: JAX's default) for
    ``n_agents`` candidates."""
    check(metric, impl)
    if metric == "kl" and impl in ("tiled", "pallas"):
        return "reference"  # XLA's dot already reads the bank once
    if impl != "auto":
        return impl
    row = _row(metric, n_agents, backend)
    return "reference" if row is None else row.impl


def resolve_precision(
    metric: str, precision: str = "auto", backend: str | None = None, n_agents: int = 1
) -> str:
    """KL's product precision ``precision`` stands for (``fp32`` for JS and TV)."""
    check(metric, "auto", precision)
    if metric != "kl":
        return "fp32"
    if precision != "auto":
        return precision
    row = _row(metric, n_agents, backend)
    return "fp32" if row is None else row.precision
