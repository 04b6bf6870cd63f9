"""JAX's persistent compilation cache for the profile programs.

A cold process pays XLA's compile for the bank build and the scoring pass (about 10 s
on a TPU v5e at the bench's default size); with ``jax_compilation_cache_dir`` set, a second process with the
same shapes loads the executables from disk instead.

Where: ``$PHANTOM_JAX_CACHE_DIR`` when set (``off`` disables it), else
``$XDG_CACHE_HOME/phantom/jax`` (``~/.cache/phantom/jax`` when unset), beside the
console's ``$XDG_CONFIG_HOME`` / ``$XDG_STATE_HOME`` directories.

Nothing here runs at import: entry points opt in with ``compilation_cache()``, a context
manager that restores JAX's previous settings on exit, so a test (or a bench run inside
pytest) never leaves the process writing to the user's cache; tests point it at a
temporary directory. Every compile is cached (``min_compile_time_secs = 0``): the bank
build is several small programs on CPU and each costs a compile.

Inside the block ``program_cache`` also keeps the compiled programs themselves under
``programs/`` (a second process skips tracing and lowering too; ``program_cache.py``).

Bounded: JAX's cache and the program store are each kept under
``$PHANTOM_JAX_CACHE_MAX_MB`` (default 2048), least recently used first out (JAX's own
``jax_compilation_cache_max_size``; ``program_cache.prune``). Every edit of this package
and every JAX upgrade makes new keys, so without a bound the old files would pile up.

The cache is trusted code (JAX's warning): it lives in the user's own cache dir.
"""

from __future__ import annotations

import contextlib
import contextvars
import importlib.util
import logging
import os
from collections.abc import Iterator
from pathlib import Path

import jax
from jax.experimental.compilation_cache import compilation_cache as _jax_cache

__all__ = [
    "ENV_VAR",
    "OFF",
    "active_cache_dir",
    "compilation_cache",
    "default_cache_dir",
    "max_bytes",
    "resolve_cache_dir",
]

log = logging.getLogger(__name__)

ENV_VAR = "PHANTOM_JAX_CACHE_DIR"
OFF = "off"
MAX_MB_ENV = "PHANTOM_JAX_CACHE_MAX_MB"
DEFAULT_MAX_MB = 2048
_SETTINGS = (
    "jax_compilation_cache_dir",
    "jax_persistent_cache_min_compile_time_secs",
    "jax_compilation_cache_max_size",
)
_ACTIVE: contextvars.ContextVar[Path | None] = contextvars.ContextVar(
    "phantom_jax_cache_dir", default=None
)


def active_cache_dir() -> Path | None:
    """The directory of the innermost ``compilation_cache()`` block now open, or ``None``
    (no block, or the cache is off): where ``program_cache`` keeps its executables."""
    return _ACTIVE.get()


def default_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/phantom/jax`` (``~/.cache/phantom/jax``)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "phantom" / "jax"


def max_bytes() -> int:
    """The budget of each of the two caches, from ``$PHANTOM_JAX_CACHE_MAX_MB`` (a whole
    number of MiB; a value that is not one costs a warning naming it, and the default)."""
    raw = os.environ.get(MAX_MB_ENV, "").strip()
    if not raw:
        return DEFAULT_MAX_MB << 20
    try:
        mb = int(raw)
        if mb <= 0:
            raise ValueError
    except ValueError:
        log.warning(
            "%s=%r is not a whole number of MiB above 0; the JAX caches keep to the default "
            "%d MiB (set it to e.g. 512, or unset it)",
            MAX_MB_ENV,
            raw[:40],
            DEFAULT_MAX_MB,
        )
        return DEFAULT_MAX_MB << 20
    return mb << 20


def resolve_cache_dir(directory: str | os.PathLike[str] | None = None) -> Path | None:
    """The cache directory to use: ``directory``, else ``$PHANTOM_JAX_CACHE_DIR``, else
    the default; ``None`` when either says ``off``."""
    chosen = os.fspath(directory) if directory is not None else os.environ.get(ENV_VAR, "")
    if chosen.strip().lower() == OFF:
        return None
    return Path(chosen).expanduser() if chosen.strip() else default_cache_dir()


@contextlib.contextmanager
def compilation_cache(directory: str | os.PathLike[str] | None = None) -> Iterator[Path | None]:
    """Compile with the persistent cache in ``directory`` (see ``resolve_cache_dir``)
    inside the block; JAX's previous cache settings come back on exit.

    Yields the directory in use, or ``None`` when the cache is off.
    """
    path = resolve_cache_dir(directory)
    if path is not None:
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:  # a cache that cannot be made never fails the run: no cache
            log.debug("compile cache: cannot create %s (%s); compiling without it", path, exc)
            path = None
    if path is None:
        token = _ACTIVE.set(None)
        try:
            yield None
        finally:
            _ACTIVE.reset(token)
        return
    before = {name: getattr(jax.config, name) for name in _SETTINGS}
    jax.config.update("jax_compilation_cache_dir", str(path))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    if importlib.util.find_spec("filelock") is not None:  # JAX's eviction locks with it
        jax.config.update("jax_compilation_cache_max_size", max_bytes())
    _jax_cache.reset_cache()  # JAX opens its cache once; make it open this directory
    token = _ACTIVE.set(path)
    try:
        yield path
    finally:
        _ACTIVE.reset(token)
        for name, value in before.items():
            jax.config.update(name, value)
        _jax_cache.reset_cache()
