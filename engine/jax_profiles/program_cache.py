"""Compiled profile programs kept on disk, so a second process neither traces nor lowers.

JAX's persistent compilation cache (``compile_cache.py``) saves a second process XLA's
compile, but not what comes before it: tracing the Python function and lowering it to
StableHLO (the cache's key is a hash of that HLO). For the bank build that was most of
what a second process paid on CPU. ``CachedProgram`` wraps ``jax.jit`` and, inside a
``compilation_cache()`` block, keeps the compiled executable itself
(``jax.experimental.serialize_executable``) in ``programs/`` under the same directory:
a second process with the same key loads it and calls it, no trace, no lowering.

The key: what the executable depends on that the arguments' values do not. It is the
SHA-256 of
  * the program's name and the static arguments' values;
  * the code: the source of every module of this package (any edit here invalidates
    every stored program; what the traced functions call inside JAX is covered by the
    version below);
  * the JAX, jaxlib and NumPy versions;
  * the backend: platform, platform version (the PJRT plugin, e.g. libtpu), device
    kind, device count, process count, the default device;
  * every JAX config value but the cache's own settings (x64, matmul precision, the
    PRNG implementation, ...), and ``XLA_FLAGS`` / ``LIBTPU_INIT_ARGS``;
  * the arguments' pytree structure and each leaf's abstract type (shape, dtype, weak
    type), as ``jax.typeof`` prints it.
A call whose leaves are not on the default device alone (a sharded bank) or are tracers
(a call inside another ``jit``), or whose static arguments are not plain values, is not
cached (plain ``jax.jit``). And the loaded
executable checks its arguments' types itself (``jax.stages.Compiled``).

A file is a header (magic, format version, payload length, payload SHA-256) and the
pickled executable; one that is truncated, corrupt or from another format is not
loaded (a debug log; the program is compiled and the file rewritten). Writes go to a
temporary file and are renamed into place; a cache directory that cannot be written
(read-only, full) costs a debug log, never the run. Like JAX's own cache, the files
are trusted code (unpickling runs code): they live in the user's own cache directory.

The store is bounded like JAX's cache (``compile_cache.max_bytes``): after each write,
the least recently used programs (a load touches its file) go until the rest fit, and a
temporary file older than an hour (a writer killed mid-write) goes too.

Outside a ``compilation_cache()`` block (or with it ``off``) a ``CachedProgram`` is
``jax.jit``; executables already loaded in this process are reused either way. Hits and
misses are JAX monitoring events (``/phantom/program_cache/hits``, ``.../misses``), which
``benchmarks/jax_profiles_cache.py`` counts.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import inspect
import json
import logging
import os
import pickle
import struct
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import jax
import jaxlib
import numpy as np

from engine.jax_profiles import compile_cache

__all__ = [
    "HIT_EVENT",
    "MISS_EVENT",
    "SUBDIR",
    "CachedProgram",
    "code_version",
    "program_key",
    "prune",
]

log = logging.getLogger(__name__)

SUBDIR = "programs"
HIT_EVENT = "/phantom/program_cache/hits"
MISS_EVENT = "/phantom/program_cache/misses"
_MAGIC = b"PHANTOM-XLA-PROGRAM\n"
_FORMAT = 1
_HEADER = struct.Struct("<IQ32s")  # format, payload length, payload sha256
_ENV = ("XLA_FLAGS", "LIBTPU_INIT_ARGS")
_CONFIG_SKIP = ("jax_compilation_cache", "jax_persistent_cache")
_STATIC_TYPES = (str, int, float, bool, type(None))
_TMP_PREFIX = ".tmp-"
STALE_TMP_S = 3600.0  # a temporary file this old has no writer left


def prune(directory: Path, budget: int) -> None:
    """Keep ``directory``'s programs under ``budget`` bytes, least recently used (oldest
    mtime) first out, and remove temporary files a killed writer left. Best effort: a
    file another process removes first, or one that cannot be removed, is passed over."""
    now = time.time()
    programs = []
    try:
        names = list(directory.iterdir())
    except OSError:
        return
    for path in names:
        try:
            st = path.stat()
        except OSError:
            continue
        if path.name.startswith(_TMP_PREFIX):
            if now - st.st_mtime > STALE_TMP_S:
                with contextlib.suppress(OSError):
                    path.unlink()
        elif path.suffix == ".bin":
            programs.append((st.st_mtime, st.st_size, path))
    total = sum(size for _, size, _ in programs)
    for _, size, path in sorted(programs):
        if total <= budget:
            break
        with contextlib.suppress(OSError):
            path.unlink()
            log.debug("program cache: removed %s (least recently used, over budget)", path)
        total -= size


@functools.cache
def code_version() -> str:
    """SHA-256 of this package's sources (every ``*.py`` beside this module)."""
    h = hashlib.sha256()
    for path in sorted(Path(__file__).parent.glob("*.py")):
        h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def _environment() -> dict[str, Any]:
    device = jax.devices()[0]
    config = {
        name: repr(value)
        for name, value in sorted(jax.config.values.items())
        if not name.startswith(_CONFIG_SKIP)
    }
    return {
        "code": code_version(),
        "jax": jax.__version__,
        "jaxlib": jaxlib.__version__,
        "numpy": np.__version__,  # host constants folded in at trace time
        "platform": device.platform,
        "platform_version": device.client.platform_version,
        "device_kind": device.device_kind,
        "device": device.id,
        "devices": jax.device_count(),
        "processes": jax.process_count(),
        "env": {name: os.environ.get(name) for name in _ENV},
        "config": config,
    }


def _static_ok(value: Any) -> bool:
    if isinstance(value, tuple):
        return all(_static_ok(v) for v in value)
    return isinstance(value, _STATIC_TYPES)


def program_key(name: str, args: tuple[Any, ...], statics: dict[str, Any]) -> str | None:
    """The cache key of calling program ``name`` on ``args`` with ``statics``, or
    ``None`` when the call is not cacheable (see the module doc)."""
    if not all(_static_ok(v) for v in statics.values()):
        return None
    leaves, treedef = jax.tree_util.tree_flatten(args)
    default = jax.devices()[0]
    types = []
    for leaf in leaves:
        if isinstance(leaf, jax.core.Tracer):
            return None  # called inside another trace: that one compiles it
        if isinstance(leaf, jax.Array) and leaf.sharding.device_set != {default}:
            return None
        types.append(str(jax.typeof(leaf)))
    material = {
        "name": name,
        "statics": {k: repr(v) for k, v in sorted(statics.items())},
        "tree": str(treedef),
        "types": types,
        **_environment(),
    }
    return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()


def _pack(payload: bytes) -> bytes:
    return _MAGIC + _HEADER.pack(_FORMAT, len(payload), hashlib.sha256(payload).digest()) + payload


def _unpack(blob: bytes) -> bytes:
    """The payload of a stored file; ``ValueError`` when it is not a whole, intact one."""
    if not blob.startswith(_MAGIC):
        raise ValueError("not a program file")
    head = blob[len(_MAGIC) : len(_MAGIC) + _HEADER.size]
    if len(head) != _HEADER.size:
        raise ValueError("truncated header")
    fmt, length, digest = _HEADER.unpack(head)
    if fmt != _FORMAT:
        raise ValueError(f"format {fmt}, this code reads {_FORMAT}")
    payload = blob[len(_MAGIC) + _HEADER.size :]
    if len(payload) != length:
        raise ValueError(f"truncated: {len(payload)} of {length} bytes")
    if hashlib.sha256(payload).digest() != digest:
        raise ValueError("checksum mismatch")
    return payload


class CachedProgram:
    """``jax.jit(fun, static_argnames=...)`` whose compiled executable is kept on disk
    inside a ``compilation_cache()`` block (module doc). Static arguments are passed by
    keyword."""

    def __init__(self, fun: Callable[..., Any], *, static_argnames: Iterable[str] = ()) -> None:
        self._static = tuple(static_argnames)
        self._jit = jax.jit(fun, static_argnames=self._static)
        params = list(inspect.signature(fun).parameters)
        # a static argument passed by position is jit's to handle: not cached
        self._positional = min((params.index(n) for n in self._static), default=len(params))
        self.name = f"{fun.__module__}.{fun.__qualname__}"
        self._loaded: dict[str, Any] = {}
        functools.update_wrapper(self, fun)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        statics = {k: v for k, v in kwargs.items() if k in self._static}
        if len(statics) != len(kwargs) or len(args) > self._positional:
            return self._jit(*args, **kwargs)  # dynamic keywords, positional statics
        key = program_key(self.name, args, statics)
        if key is None:
            return self._jit(*args, **kwargs)
        compiled = self._loaded.get(key)
        if compiled is None:
            directory = compile_cache.active_cache_dir()
            if directory is None:
                return self._jit(*args, **kwargs)
            path = directory / SUBDIR / f"{self.name}-{key}.bin"
            compiled = self._load(path)
            if compiled is None:
                jax.monitoring.record_event(MISS_EVENT)
                compiled = self._jit.lower(*args, **kwargs).compile()
                self._store(path, compiled)
            else:
                jax.monitoring.record_event(HIT_EVENT)
                with contextlib.suppress(OSError):
                    os.utime(path)  # used: the last to go when the store is over budget
            self._loaded[key] = compiled
        return compiled(*args)

    def lower(self, *args: Any, **kwargs: Any) -> Any:
        return self._jit.lower(*args, **kwargs)

    def _cache_size(self) -> int:
        """Programs this process holds: ``jax.jit``'s own plus those loaded or compiled here."""
        return int(self._jit._cache_size()) + len(self._loaded)  # type: ignore[attr-defined]

    def _load(self, path: Path) -> Any:
        from jax.experimental import serialize_executable

        try:
            blob = path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            log.debug("program cache: cannot read %s (%s); compiling", path, exc)
            return None
        try:
            payload, in_tree, out_tree = pickle.loads(_unpack(blob))
            return serialize_executable.deserialize_and_load(payload, in_tree, out_tree)
        except Exception as exc:  # a damaged file of any kind: compile instead
            log.debug("program cache: %s is unusable (%s); compiling", path, exc)
            return None

    def _store(self, path: Path, compiled: Any) -> None:
        from jax.experimental import serialize_executable

        try:
            blob = _pack(pickle.dumps(serialize_executable.serialize(compiled)))
        except Exception as exc:  # a backend or program that cannot be serialized
            log.debug("program cache: %s cannot be serialized (%s)", self.name, exc)
            return
        tmp = None
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=_TMP_PREFIX, suffix=".bin")
            with os.fdopen(fd, "wb") as f:
                f.write(blob)
            os.replace(tmp, path)
            tmp = None
            prune(path.parent, compile_cache.max_bytes())
        except OSError as exc:  # read-only, full, gone: the run goes on without it
            log.debug("program cache: cannot write %s (%s)", path, exc)
        finally:
            if tmp is not None:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
