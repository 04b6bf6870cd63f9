"""JAX's CPU backend for the JAX tests: XLA's LLVM stage at optimisation level 0.

These tests check what the kernels compute (against NumPy and the reference path), on
inputs of a few hundred numbers, so nearly all their CPU went to compiling: LLVM's
optimisation of each small program. At level 0 the same HLO (every XLA pass, fusion and
buffer assignment, which ``memory_analysis`` reads) is lowered with fewer LLVM passes;
the arithmetic stays IEEE (XLA:CPU's fast-math is off at every level), so the numbers
agree with the default level's within every test's tolerance (each test passes at both),
and the tests' CPU drops by about a third (same-run figures in issue 33's closing note).

XLA reads ``XLA_FLAGS`` once, when the backend starts, so it starts here, at collection,
before any test runs (tests/benchmarks/test_jax_profiles.py too: it shares the worker);
the variable is put back at once, so no process a test starts (the second process of
the compile-cache test, trainers) inherits it. Product code and the benchmarks run at
XLA's default level.
"""

from __future__ import annotations

import os

import jax

_FLAG = "--xla_backend_optimization_level=0"


def _start_backend_with_quick_compiles() -> None:
    before = os.environ.get("XLA_FLAGS")
    if before is not None and "xla_backend_optimization_level" in before:
        return  # the caller chose a level
    os.environ["XLA_FLAGS"] = f"{before} {_FLAG}" if before else _FLAG
    try:
        jax.devices()
    finally:
        if before is None:
            del os.environ["XLA_FLAGS"]
        else:
            os.environ["XLA_FLAGS"] = before


_start_backend_with_quick_compiles()
