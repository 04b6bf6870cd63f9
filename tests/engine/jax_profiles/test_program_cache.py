"""The compiled-program cache (``program_cache``): a stored program is used only for the
same program, argument types, code and environment; a damaged file or a cache that
cannot be written falls back to compiling, and never fails the run.

(The second-process figures are the bench's: ``python -m benchmarks.jax_profiles_cache``;
that a second process loads every program is ``test_compile_cache``'s.)
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import monitoring

from engine.jax_profiles import program_cache as PC
from engine.jax_profiles.compile_cache import active_cache_dir, compilation_cache

pytestmark = pytest.mark.xdist_group("jax")

_LOGGER = "engine.jax_profiles.program_cache"


def _affine(x: jax.Array, y: jax.Array, *, scale: float) -> jax.Array:
    return x * scale + y


class _Events:
    def __init__(self) -> None:
        self.hits = 0
        self.misses = 0

    def __call__(self, event: str, **kwargs: Any) -> None:
        if event == PC.HIT_EVENT:
            self.hits += 1
        elif event == PC.MISS_EVENT:
            self.misses += 1


@pytest.fixture
def events() -> Iterator[_Events]:
    counter = _Events()
    monitoring.register_event_listener(counter)
    try:
        yield counter
    finally:
        monitoring.unregister_event_listener(counter)


def _fresh() -> PC.CachedProgram:
    """A new ``CachedProgram`` of the same function: what a second process holds (nothing
    loaded yet, the same name and key)."""
    return PC.CachedProgram(_affine, static_argnames=("scale",))


def _stored(directory: Path) -> list[Path]:
    return sorted(p for p in (directory / PC.SUBDIR).glob("*.bin") if not p.name.startswith("."))


X = np.arange(6, dtype=np.float32)
Y = np.ones(6, np.float32)


def _key(*args: Any, name: str = "p", **statics: Any) -> str | None:
    return PC.program_key(name, args, statics)


# ----------------------------------------------------------------------------- the key


def test_key_is_the_same_for_the_same_types_whatever_the_values() -> None:
    k = _key(X, Y, scale=2.0)
    assert k is not None
    assert _key(X * 3, Y - 1, scale=2.0) == k
    assert _key(jnp.asarray(X), Y, scale=2.0) == k  # host or device, one type


@pytest.mark.parametrize(
    ("args", "statics", "name"),
    [
        ((X[:5], Y[:5]), {"scale": 2.0}, "p"),  # shape
        ((X.astype(np.int32), Y), {"scale": 2.0}, "p"),  # dtype
        ((X, Y), {"scale": 3.0}, "p"),  # a static argument
        ((X, Y), {"scale": 2}, "p"),  # ... its type
        ((X, Y), {"scale": 2.0}, "q"),  # another program
        (((X, Y),), {"scale": 2.0}, "p"),  # the pytree structure
        ((X, 1.0), {"scale": 2.0}, "p"),  # a weakly typed scalar for an array
        ((X, np.float32(1.0)), {"scale": 2.0}, "p"),  # ... and a float32 scalar
    ],
)
def test_key_changes_with_every_input_type(
    args: tuple[Any, ...], statics: dict[str, Any], name: str
) -> None:
    assert _key(*args, name=name, **statics) != _key(X, Y, scale=2.0)
    assert _key(X, 1.0, scale=2.0) != _key(X, np.float32(1.0), scale=2.0)


def test_key_changes_with_the_code_and_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    base = _key(X, Y, scale=2.0)
    with monkeypatch.context() as m:
        m.setattr(PC, "code_version", lambda: "an edited package")
        assert _key(X, Y, scale=2.0) != base
    with monkeypatch.context() as m:
        m.setattr(jax, "__version__", "0.0.1")
        assert _key(X, Y, scale=2.0) != base
    with monkeypatch.context() as m:
        m.setattr(np, "__version__", "1.0.0")
        assert _key(X, Y, scale=2.0) != base
    with monkeypatch.context() as m:
        m.setenv("XLA_FLAGS", "--xla_cpu_enable_fast_math=true")
        assert _key(X, Y, scale=2.0) != base
    with jax.default_matmul_precision("highest"):  # a JAX setting that changes lowering
        assert _key(X, Y, scale=2.0) != base
    assert _key(X, Y, scale=2.0) == base


def test_code_version_covers_every_module_of_the_package() -> None:
    import engine.jax_profiles as pkg

    assert len(PC.code_version()) == 64
    sources = sorted(p.name for p in Path(pkg.__file__).parent.glob("*.py"))
    assert {"bank.py", "alpha.py", "divergence.py", "program_cache.py"} <= set(sources)


def test_uncacheable_calls_have_no_key() -> None:
    assert _key(X, Y, scale=np.float32(2.0)) is None  # not a plain value
    assert _key(X, Y, scale=[2.0]) is None

    @jax.jit
    def inside(x: jax.Array) -> jax.Array:
        assert PC.program_key("p", (x,), {}) is None  # a tracer
        return x

    inside(X)


# ----------------------------------------------------------------------------- store and load


def test_a_second_holder_loads_the_stored_program(tmp_path: Path, events: _Events) -> None:
    want = np.asarray(_affine(X, Y, scale=2.0))
    with compilation_cache(tmp_path) as directory:
        assert active_cache_dir() == directory == tmp_path
        out = _fresh()(X, Y, scale=2.0)
        assert (events.misses, events.hits) == (1, 0)
        assert len(_stored(tmp_path)) == 1
        again = _fresh()
        np.testing.assert_array_equal(np.asarray(again(X + 1, Y, scale=2.0)), want + 2)
        assert (events.misses, events.hits) == (1, 1)
        again(X, Y, scale=2.0)  # held in memory now: no second load
        assert (events.misses, events.hits) == (1, 1)
        _fresh()(X, Y, scale=3.0)  # another static value: another program
        assert (events.misses, events.hits) == (2, 1)
        assert len(_stored(tmp_path)) == 2
    np.testing.assert_array_equal(np.asarray(out), want)
    assert active_cache_dir() is None


def test_the_store_keeps_to_its_budget_least_recently_used_out(
    tmp_path: Path, events: _Events, monkeypatch: pytest.MonkeyPatch
) -> None:
    programs = tmp_path / PC.SUBDIR
    with compilation_cache(tmp_path):
        _fresh()(X, Y, scale=1.0)
        [used] = _stored(tmp_path)
        _fresh()(X, Y, scale=2.0)
        [unused] = [p for p in _stored(tmp_path) if p != used]
        # scale=1.0's file is the older one, but it is the one a process loads again
        for path, age in ((used, 300), (unused, 200)):
            os.utime(path, (time.time() - age, time.time() - age))
        _fresh()(X, Y, scale=1.0)
        assert (events.misses, events.hits) == (2, 1)
        # a writer killed mid-write long ago left a temporary file; a live writer's is fresh
        stale, live = programs / ".tmp-dead.bin", programs / ".tmp-live.bin"
        stale.write_bytes(b"x")
        live.write_bytes(b"x")
        old = time.time() - PC.STALE_TMP_S - 60
        os.utime(stale, (old, old))
        # room for two programs and a half: a third one's write sends one away
        size = max(used.stat().st_size, unused.stat().st_size)
        monkeypatch.setattr(PC.compile_cache, "max_bytes", lambda: 2 * size + size // 2)
        _fresh()(X, Y, scale=3.0)
    names = {p.name for p in programs.iterdir()}
    assert len(_stored(tmp_path)) == 2
    assert used.name in names and unused.name not in names  # least recently used out
    assert live.name in names and stale.name not in names


def test_arguments_it_cannot_key_go_to_jit(tmp_path: Path, events: _Events) -> None:
    def positional(x: jax.Array, n: int) -> jax.Array:
        return x[:n]

    prog = PC.CachedProgram(positional, static_argnames=("n",))
    with compilation_cache(tmp_path):
        np.testing.assert_array_equal(np.asarray(prog(X, 2)), X[:2])  # a static by position
        np.testing.assert_array_equal(np.asarray(_fresh()(X, y=Y, scale=2.0)), X * 2 + Y)
        assert (events.misses, events.hits) == (0, 0)
        np.testing.assert_array_equal(np.asarray(prog(X, n=3)), X[:3])
        assert (events.misses, events.hits) == (1, 0)


def test_outside_a_cache_block_it_is_jit(tmp_path: Path, events: _Events) -> None:
    prog = _fresh()
    np.testing.assert_array_equal(np.asarray(prog(X, Y, scale=2.0)), X * 2 + Y)
    with compilation_cache("off") as directory:
        assert directory is None and active_cache_dir() is None
        prog(X, Y, scale=2.0)
    assert (events.misses, events.hits) == (0, 0)


def test_another_code_version_does_not_load_the_stored_program(
    tmp_path: Path, events: _Events, monkeypatch: pytest.MonkeyPatch
) -> None:
    with compilation_cache(tmp_path):
        _fresh()(X, Y, scale=2.0)
        monkeypatch.setattr(PC, "code_version", lambda: "an edited package")
        _fresh()(X, Y, scale=2.0)
    assert (events.misses, events.hits) == (2, 0)
    assert len(_stored(tmp_path)) == 2


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda b: b[: len(b) // 2], id="truncated"),
        pytest.param(lambda b: b[:10], id="truncated-header"),
        pytest.param(lambda b: b[:-1] + bytes([b[-1] ^ 0xFF]), id="corrupt-payload"),
        pytest.param(lambda b: b"garbage", id="not-a-program"),
        pytest.param(lambda b: b"", id="empty"),
    ],
)
def test_a_damaged_file_is_compiled_again_with_a_debug_log(
    tmp_path: Path, events: _Events, caplog: pytest.LogCaptureFixture, damage: Any
) -> None:
    with compilation_cache(tmp_path):
        _fresh()(X, Y, scale=2.0)
        (path,) = _stored(tmp_path)
        path.write_bytes(damage(path.read_bytes()))
        with caplog.at_level(logging.DEBUG, logger=_LOGGER):
            out = _fresh()(X, Y, scale=2.0)
        np.testing.assert_array_equal(np.asarray(out), X * 2 + Y)
        assert (events.misses, events.hits) == (2, 0)
        assert any(
            "unusable" in r.getMessage() and str(path) in r.getMessage() for r in caplog.records
        )
        _fresh()(X, Y, scale=2.0)  # the file was written again, whole
        assert (events.misses, events.hits) == (2, 1)


def test_a_file_of_another_format_version_is_not_loaded(
    tmp_path: Path, events: _Events, monkeypatch: pytest.MonkeyPatch
) -> None:
    with compilation_cache(tmp_path):
        monkeypatch.setattr(PC, "_FORMAT", PC._FORMAT + 1)
        _fresh()(X, Y, scale=2.0)
        monkeypatch.undo()
        _fresh()(X, Y, scale=2.0)
    assert (events.misses, events.hits) == (2, 0)


def test_a_cache_that_cannot_be_written_never_fails_the_run(
    tmp_path: Path, events: _Events, caplog: pytest.LogCaptureFixture
) -> None:
    # programs/ is a file: nothing can be created under it (as for a read-only or full
    # disk, and it holds for root too, whom permissions do not stop)
    (tmp_path / PC.SUBDIR).write_bytes(b"in the way")
    with compilation_cache(tmp_path), caplog.at_level(logging.DEBUG, logger=_LOGGER):
        out = _fresh()(X, Y, scale=2.0)
        np.testing.assert_array_equal(np.asarray(out), X * 2 + Y)
        assert _fresh()(X, Y, scale=2.0) is not None
    assert (events.misses, events.hits) == (2, 0)
    assert any("cannot write" in r.getMessage() for r in caplog.records)
    assert not list(tmp_path.glob("**/.tmp-*"))


def test_a_cache_dir_that_cannot_be_made_means_no_cache(
    tmp_path: Path, events: _Events, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "file").write_bytes(b"")
    with caplog.at_level(logging.DEBUG), compilation_cache(tmp_path / "file" / "jax") as d:
        assert d is None and active_cache_dir() is None
        np.testing.assert_array_equal(np.asarray(_fresh()(X, Y, scale=2.0)), X * 2 + Y)
    assert (events.misses, events.hits) == (0, 0)
    assert any("cannot create" in r.getMessage() for r in caplog.records)


def test_a_stored_program_checks_its_arguments_itself(tmp_path: Path) -> None:
    """The last guard: an executable called with other types refuses (JAX's check), so
    even a key collision could not run a program on inputs it was not built for."""
    with compilation_cache(tmp_path):
        _fresh()(X, Y, scale=2.0)
    (path,) = _stored(tmp_path)
    import pickle

    from jax.experimental import serialize_executable

    payload, in_tree, out_tree = pickle.loads(PC._unpack(path.read_bytes()))
    compiled = serialize_executable.deserialize_and_load(payload, in_tree, out_tree)
    np.testing.assert_array_equal(np.asarray(compiled(X, Y)), X * 2 + Y)
    with pytest.raises(TypeError):
        compiled(X[:5], Y[:5])


def test_the_bank_build_from_a_stored_program_is_the_same_bank(
    tmp_path: Path, events: _Events
) -> None:
    from engine.jax_profiles import bank as B

    rng = np.random.default_rng(3)
    humans = rng.random((2, 3, 4, 5)).astype(np.float32)
    humans /= humans.sum(-1, keepdims=True)
    mask = rng.random((3, 4)) < 0.8
    key = jax.random.PRNGKey(7)
    want = B.build_bank(humans, mask, key=key, epsilons=(0.1, 0.3), n_biased=2)
    with compilation_cache(tmp_path):
        B._assemble._loaded.clear()
        first = B.build_bank(humans, mask, key=key, epsilons=(0.1, 0.3), n_biased=2)
        B._assemble._loaded.clear()  # as a new process: load it from disk
        loaded = B.build_bank(humans, mask, key=key, epsilons=(0.1, 0.3), n_biased=2)
    assert (events.misses, events.hits) == (1, 1)
    for got in (first, loaded):
        for a, b in zip(
            jax.tree_util.tree_leaves(want), jax.tree_util.tree_leaves(got), strict=True
        ):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_the_selection_from_a_stored_program_is_the_same_selection(
    tmp_path: Path, events: _Events
) -> None:
    from engine.jax_profiles import alpha as AL
    from engine.jax_profiles import bank as B

    rng = np.random.default_rng(5)
    humans = rng.random((2, 3, 4, 5)).astype(np.float32)
    humans /= humans.sum(-1, keepdims=True)
    bank = B.build_bank(humans, np.ones((3, 4), bool), key=jax.random.PRNGKey(1))
    agents = rng.random((3, 3, 4, 5)).astype(np.float32)
    agents /= agents.sum(-1, keepdims=True)
    args = (bank, np.linspace(0, 1, 3, dtype=np.float32), agents, np.ones(3, np.float32), None)
    want = AL.select_alpha(*args, metric="js")
    got = []
    with compilation_cache(tmp_path):
        for _ in range(2):  # compiled and stored, then loaded as a new process would
            AL._selection_jit._loaded.clear()
            AL._robust_set._loaded.clear()
            got.append(AL.select_alpha(*args, metric="js"))
    assert len(_stored(tmp_path)) == 2  # the robust set and the pass
    assert (events.misses, events.hits) == (2, 2)
    for sel in got:
        for a, b in zip(
            jax.tree_util.tree_leaves(want), jax.tree_util.tree_leaves(sel), strict=True
        ):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
