"""The persistent compilation cache: where it goes, that it stays scoped, and that a
second process building the same-shaped bank loads every program instead of tracing,
lowering and compiling it.

(The time a second process saves is the bench's to report:
``python -m benchmarks.jax_profiles_cache``.)
"""

from __future__ import annotations

from pathlib import Path

import jax
import pytest

from benchmarks import jax_profiles_cache as cache_bench
from engine.jax_profiles import bank as B
from engine.jax_profiles.compile_cache import (
    DEFAULT_MAX_MB,
    ENV_VAR,
    MAX_MB_ENV,
    compilation_cache,
    default_cache_dir,
    max_bytes,
    resolve_cache_dir,
)

# All JAX tests share one xdist worker: JAX is imported and common programs compile once.
pytestmark = pytest.mark.xdist_group("jax")


def test_cache_dir_resolution(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(ENV_VAR, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_cache_dir() == tmp_path / "xdg" / "phantom" / "jax"
    assert resolve_cache_dir() == default_cache_dir()
    assert resolve_cache_dir(tmp_path / "mine") == tmp_path / "mine"
    monkeypatch.setenv(ENV_VAR, str(tmp_path / "env"))
    assert resolve_cache_dir() == tmp_path / "env"
    monkeypatch.setenv(ENV_VAR, "off")
    assert resolve_cache_dir() is None
    assert resolve_cache_dir("OFF") is None


def test_the_budget_comes_from_the_environment_and_a_bad_one_is_named(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.delenv(MAX_MB_ENV, raising=False)
    assert max_bytes() == DEFAULT_MAX_MB << 20
    monkeypatch.setenv(MAX_MB_ENV, "64")
    assert max_bytes() == 64 << 20
    for bad in ("lots", "-1", "0", "1.5"):
        monkeypatch.setenv(MAX_MB_ENV, bad)
        caplog.clear()
        assert max_bytes() == DEFAULT_MAX_MB << 20
        assert MAX_MB_ENV in caplog.text and repr(bad) in caplog.text


def test_cache_is_scoped_to_the_block(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(MAX_MB_ENV, "64")
    before = (
        jax.config.jax_compilation_cache_dir,
        jax.config.jax_persistent_cache_min_compile_time_secs,
        jax.config.jax_compilation_cache_max_size,
    )
    with compilation_cache(tmp_path / "c") as path:
        assert path == tmp_path / "c" and path.is_dir()
        assert jax.config.jax_compilation_cache_dir == str(path)
        assert jax.config.jax_compilation_cache_max_size == 64 << 20  # JAX's LRU keeps to it
        # a fresh program is compiled and written into this directory
        jax.jit(lambda x: x * 7 - 3)(jax.numpy.ones(29)).block_until_ready()
        assert any(path.iterdir())
    after = (
        jax.config.jax_compilation_cache_dir,
        jax.config.jax_persistent_cache_min_compile_time_secs,
        jax.config.jax_compilation_cache_max_size,
    )
    assert after == before
    with compilation_cache("off") as path:
        assert path is None
        assert jax.config.jax_compilation_cache_dir == before[0]


def test_bank_build_is_one_program_per_shape() -> None:
    from jax import monitoring

    names: list[str] = []

    def on_compile(event: str, duration: float, **kwargs: object) -> None:
        if event == "/jax/core/compile/backend_compile_duration":
            names.append(str(kwargs.get("fun_name", "")))

    import numpy as np

    rng = np.random.default_rng(0)
    humans = rng.random((2, 3, 4, 5)).astype(np.float32)
    humans /= humans.sum(-1, keepdims=True)
    mask = rng.random((3, 4)) < 0.8
    key = jax.random.PRNGKey(0)
    monitoring.register_event_duration_secs_listener(on_compile)
    try:
        B.build_bank(humans, mask, key=key, epsilons=(0.1, 0.2, 0.3), n_biased=3)
        first = len(names)
        B.build_bank(humans * 0.5 + 0.1, mask, key=key, epsilons=(0.4, 0.5, 0.6), n_biased=3)
    finally:
        monitoring.unregister_event_duration_listener(on_compile)
    assert first <= 1, f"{first} compiles for one bank build"
    assert len(names) == first, "the same shape compiled again"


def test_second_process_loads_the_bank_build_from_the_cache(tmp_path: Path) -> None:
    args = cache_bench._parse(
        ["--profiles=9", "--levels=2", "--states=8", "--actions=3", "--candidates=3"]
    )
    cache = str(tmp_path / "jax")
    cold = cache_bench.run_child(args, cache)
    warm = cache_bench.run_child(args, cache)
    # cold: the bank build (_assemble, the slice) and the pass (robust set, selection)
    # are compiled, through JAX's cache, and kept as programs
    assert cold["build_program_misses"] == 2 and cold["build_program_hits"] == 0
    assert cold["program_misses"] == 4 and cold["program_hits"] == 0
    assert cold["build_misses"] >= 2 and cold["build_hits"] == 0
    # second process: every program is loaded, nothing traced, lowered or compiled
    assert warm["build_program_hits"] == 2 and warm["build_program_misses"] == 0
    assert warm["program_hits"] == 4 and warm["program_misses"] == 0
    assert warm["misses"] == 0 and warm["hits"] == 0
    assert "jaxpr_trace_duration" not in warm["compile_stages_s"]
