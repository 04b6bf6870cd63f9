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

AUTO: tuple[AutoRow, ...] = (
    AutoRow("cpu", "kl", 1, "reference", "fp32", _CPU),
    AutoRow("cpu", "js", 1, "reference", "fp32", _CPU),
    AutoRow("cpu", "tv", 1, "reference", "fp32", _CPU),
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
    metric: str,
    impl: str = "auto",
    backend: str | None = None,
    n_agents: int = 1,
    precision: str = "auto",
) -> str:
    """The implementation ``impl`` stands for on ``backend`` (default: JAX's default) for
    ``n_agents`` candidates (KL: at ``precision``)."""
    check(metric, impl, precision)
    if impl == "auto":
        row = _row(metric, n_agents, backend)
        impl = "reference" if row is None else row.impl
    if metric == "kl" and impl != "reference":
        # XLA's dot already reads the bank once; the Pallas product does bf16 splits only
        prec = resolve_precision(metric, precision, backend, n_agents)
        return "pallas" if impl == "pallas" and prec in ("bf16x3", "bf16") else "reference"
    return impl


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
