"""Preemption-safe checkpoint storage on any fsspec URI (local path, ``file://``, ``gs://``).

Layout under ``<storage>/<run-name>/``::

    checkpoints/step-000000002048/   model.zip [replay_buffer.pkl] [vecnormalize.pkl] MANIFEST.json
    final/                           model.zip [vecnormalize.pkl] MANIFEST.json

A checkpoint is valid only when its ``MANIFEST.json`` exists, parses, and lists
files whose sizes (and, when fetched, SHA-256) match. The manifest is always
written last. On a local filesystem the whole directory is first assembled
under ``checkpoints/.tmp-*`` and renamed into place (rename is atomic), so a
process killed mid-write leaves only a ``.tmp-*`` directory that is ignored and
cleaned up. On object stores (no atomic rename) the data files are uploaded
first and the manifest last, so a partial upload has no manifest and is skipped.
Pruning invalidates before deleting (rename aside locally, manifest first on object
stores), so a kill mid-prune never leaves a manifest over missing files either.

A trainer writing a checkpoint on a preemption notice first puts ``NOTICE.json`` in the run
directory (who, the step, until when) and removes it once the checkpoint is published. A
trainer that starts on the same run while that marker is fresh waits for it (at most until
its deadline), so a retried trainer resumes from the notice checkpoint rather than racing it.

``latest_checkpoint_step(storage, run_name)`` is the one-call answer to "where would this run
resume?" for tests, benchmarks and the console.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import socket
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import fsspec
from fsspec.implementations.local import LocalFileSystem

from engine.logs import log

MANIFEST = "MANIFEST.json"
NOTICE = "NOTICE.json"
MANIFEST_FORMAT = 1
_STEP_DIR = re.compile(r"^step-(\d{12})$")


class StorageError(ValueError):
    """The storage URI cannot be used (unknown protocol, missing driver, ...)."""


def resolve_storage(uri: str) -> tuple[fsspec.AbstractFileSystem, str]:
    """Return ``(filesystem, root path)`` for a storage URI, or raise StorageError."""
    if not uri or not uri.strip():
        raise StorageError("storage URI is empty")
    protocol = uri.split("://", 1)[0] if "://" in uri else "file"
    try:
        fsspec.get_filesystem_class(protocol)
    except ImportError as exc:
        hint = " (pip install 'phantom-console[gcs]')" if protocol in ("gs", "gcs") else ""
        raise StorageError(
            f"storage {uri!r} needs the {protocol}:// driver, which is not installed{hint}"
        ) from exc
    except ValueError as exc:
        raise StorageError(
            f"storage {uri!r}: unknown protocol {protocol!r}; use a local path, file://, or gs://"
        ) from exc
    if protocol == "file" and "://" not in uri:
        uri = os.path.abspath(os.path.expanduser(uri))
    fs, path = fsspec.core.url_to_fs(uri)
    return fs, path.rstrip("/") or "/"


def is_local(fs: fsspec.AbstractFileSystem) -> bool:
    return isinstance(fs, LocalFileSystem)


def _nearest_existing(path: str) -> str:
    while not os.path.lexists(path):
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return path


def check_storage_writable(storage: str, run_name: str = "") -> None:
    """Raise StorageError unless a run's directories could be created and written.

    Local directories only: an object store's bucket and credentials are checked by its
    first write, but a run on one still keeps its TensorBoard events in a local directory
    (``local_run_dir``), which is checked instead. Nothing is left behind: the nearest
    existing ancestor of the run directory and of its ``checkpoints/`` must be a directory
    this process may create a directory in (probed by creating and removing one).
    """
    fs, root = resolve_storage(storage)
    if is_local(fs):
        run_path = os.path.join(root, run_name) if run_name else root
        targets = [os.path.join(run_path, "checkpoints"), run_path]
    elif run_name:
        run_path = os.path.abspath(local_run_dir(storage, run_name))
        root = run_path
        targets = [os.path.join(run_path, "tensorboard")]
    else:
        return
    effective = os.access in os.supports_effective_ids
    try:
        name_max = os.pathconf(_nearest_existing(root), "PC_NAME_MAX")
        long_part = next((p for p in run_path.split("/") if len(p.encode()) > name_max), None)
        if long_part is not None or len(run_path.encode()) > os.pathconf("/", "PC_PATH_MAX"):
            raise StorageError(
                f"{storage[:80]!r}...: a path component or the whole path is longer than the "
                f"filesystem allows ({name_max} bytes per name); use a shorter path"
            )
        for target in targets:
            existing = _nearest_existing(target)
            if not os.path.isdir(existing):
                kind = "a file" if os.path.isfile(existing) else "not a directory"
                raise StorageError(
                    f"{storage!r} cannot hold checkpoints: {existing} is {kind}; "
                    "give a directory (or a path where one can be created)"
                )
            if not os.access(existing, os.W_OK | os.X_OK, effective_ids=effective):
                raise StorageError(
                    f"{storage!r} is not writable: {existing} does not allow this user "
                    f"(uid {os.geteuid()}) to create files; choose a writable directory "
                    "or fix its permissions"
                )
            _probe_mkdir(storage, existing)
    except OSError as exc:  # e.g. a path too long for the filesystem
        raise StorageError(f"{storage[:200]!r} cannot be used: {exc.strerror or exc}") from None


def _probe_mkdir(storage: str, existing: str) -> None:
    """Create and remove one directory in ``existing``: the mode bits do not tell root that
    /proc, /sys, an immutable directory or a read-only mount refuse new entries."""
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".phantom-probe-", dir=existing))
    except OSError as exc:
        raise StorageError(
            f"{storage!r} is not writable: a directory cannot be created in {existing} "
            f"({exc.strerror or exc}); choose a writable directory"
        ) from None


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _join(*parts: str) -> str:
    return "/".join(p.rstrip("/") for p in parts if p)


@dataclass(frozen=True)
class CheckpointInfo:
    """A valid checkpoint found in storage."""

    step: int
    uri: str
    manifest: dict[str, Any]


class CheckpointStore(Protocol):
    """Where a trainer persists and finds its checkpoints."""

    description: str

    def latest(self) -> CheckpointInfo | None: ...

    def fetch(self, info: CheckpointInfo, into: Path) -> Path: ...

    def save(
        self, local_dir: Path, step: int, manifest: dict[str, Any], metrics: dict[str, Any]
    ) -> str: ...

    def save_final(
        self, local_dir: Path, step: int, manifest: dict[str, Any], metrics: dict[str, Any]
    ) -> str: ...


def build_manifest(local_dir: Path, step: int, extra: dict[str, Any]) -> dict[str, Any]:
    files = {
        p.name: {"size": p.stat().st_size, "sha256": sha256_file(p)}
        for p in sorted(local_dir.iterdir())
        if p.is_file() and p.name != MANIFEST
    }
    return {
        "format": MANIFEST_FORMAT,
        "step": int(step),
        "files": files,
        "created_unix": time.time(),
        **extra,
    }


class FsspecCheckpointStore:
    """Checkpoints of one run under ``<storage>/<run-name>/`` on an fsspec filesystem."""

    def __init__(self, storage: str, run_name: str, keep: int = 3) -> None:
        self.fs, root = resolve_storage(storage)
        self.storage = storage
        self.run_name = run_name
        self.keep = max(1, keep)
        self.run_path = _join(root, run_name)
        self.ckpt_path = _join(self.run_path, "checkpoints")
        self.description = self.uri(self.run_path)

    def uri(self, path: str) -> str:
        if is_local(self.fs):
            return path
        return self.fs.unstrip_protocol(path)

    # -- reading ---------------------------------------------------------------------------
    def _read_manifest(self, ckpt_dir: str) -> dict[str, Any] | None:
        try:
            with self.fs.open(_join(ckpt_dir, MANIFEST), "rb") as fh:
                manifest = json.loads(fh.read().decode())
            if manifest.get("format") != MANIFEST_FORMAT or not isinstance(
                manifest.get("files"), dict
            ):
                return None
            for name, meta in manifest["files"].items():
                if self.fs.size(_join(ckpt_dir, name)) != meta["size"]:
                    return None
            return dict(manifest)
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def list_steps(self) -> list[tuple[int, str]]:
        """All step directories (valid or not), newest first."""
        try:
            entries = self.fs.ls(self.ckpt_path, detail=False)
        except (FileNotFoundError, OSError):
            return []
        found = []
        for entry in entries:
            name = str(entry).rstrip("/").rsplit("/", 1)[-1]
            match = _STEP_DIR.match(name)
            if match:
                found.append((int(match.group(1)), _join(self.ckpt_path, name)))
        return sorted(found, reverse=True)

    def latest(self, quiet: bool = False) -> CheckpointInfo | None:
        """The newest complete checkpoint (incomplete ones are skipped, with a log line)."""
        for step, path in self.list_steps():
            manifest = self._read_manifest(path)
            if manifest is not None and manifest.get("step") == step:
                return CheckpointInfo(step=step, uri=self.uri(path), manifest=manifest)
            if not quiet:
                log(f"skipping incomplete checkpoint {self.uri(path)}")
        return None

    def fetch(self, info: CheckpointInfo, into: Path) -> Path:
        """Copy a checkpoint's files into ``into`` and verify their SHA-256."""
        into.mkdir(parents=True, exist_ok=True)
        src = self.fs._strip_protocol(info.uri) if not is_local(self.fs) else info.uri
        for name, meta in info.manifest["files"].items():
            target = into / name
            self.fs.get_file(_join(src, name), str(target))
            if sha256_file(target) != meta["sha256"]:
                raise OSError(f"checkpoint file {name} in {info.uri} is corrupt (sha256 mismatch)")
        (into / MANIFEST).write_text(json.dumps(info.manifest))
        return into

    # -- writing ---------------------------------------------------------------------------
    def _publish(self, local_dir: Path, final_path: str, manifest: dict[str, Any]) -> str:
        if is_local(self.fs):
            parent = final_path.rsplit("/", 1)[0]
            os.makedirs(parent, exist_ok=True)
            tmp = _join(parent, f".tmp-{final_path.rsplit('/', 1)[-1]}-{uuid.uuid4().hex[:8]}")
            shutil.copytree(local_dir, tmp)
            with open(_join(tmp, MANIFEST), "w") as fh:
                json.dump(manifest, fh, indent=1)
                fh.flush()
                os.fsync(fh.fileno())
            if os.path.exists(final_path):
                # Same step written again (e.g. a resumed run that was already complete):
                # move the old one aside first so the final name is never half-written.
                old = f"{tmp}-old"
                os.rename(final_path, old)
                os.rename(tmp, final_path)
                shutil.rmtree(old, ignore_errors=True)
            else:
                os.rename(tmp, final_path)
        else:
            if self.fs.exists(_join(final_path, MANIFEST)):
                self.fs.rm_file(_join(final_path, MANIFEST))
            for path in sorted(local_dir.iterdir()):
                if path.is_file() and path.name != MANIFEST:
                    self.fs.put_file(str(path), _join(final_path, path.name))
            with self.fs.open(_join(final_path, MANIFEST), "wb") as fh:
                fh.write(json.dumps(manifest, indent=1).encode())
        return self.uri(final_path)

    def save(
        self, local_dir: Path, step: int, manifest: dict[str, Any], metrics: dict[str, Any]
    ) -> str:
        uri = self._publish(local_dir, _join(self.ckpt_path, f"step-{step:012d}"), manifest)
        self.prune()
        return uri

    def save_final(
        self, local_dir: Path, step: int, manifest: dict[str, Any], metrics: dict[str, Any]
    ) -> str:
        return self._publish(local_dir, _join(self.run_path, "final"), manifest)

    def _remove(self, path: str) -> None:
        """Delete a checkpoint so that no moment shows a manifest over missing files."""
        if is_local(self.fs):
            parent, name = path.rsplit("/", 1)
            doomed = _join(parent, f".tmp-del-{name}-{uuid.uuid4().hex[:8]}")
            os.rename(path, doomed)
            shutil.rmtree(doomed, ignore_errors=True)
        else:
            if self.fs.exists(_join(path, MANIFEST)):
                self.fs.rm_file(_join(path, MANIFEST))
            self.fs.rm(path, recursive=True)

    def prune(self) -> None:
        """Keep the newest ``keep`` valid checkpoints; drop older ones and stale temp dirs."""
        valid = 0
        for _step, path in self.list_steps():
            if valid < self.keep:
                if self._read_manifest(path) is not None:
                    valid += 1
                continue
            self._remove(path)
        if is_local(self.fs) and os.path.isdir(self.ckpt_path):
            for name in os.listdir(self.ckpt_path):
                full = _join(self.ckpt_path, name)
                if name.startswith(".tmp-") and time.time() - os.path.getmtime(full) > 60:
                    shutil.rmtree(full, ignore_errors=True)

    # -- preemption notice marker ------------------------------------------------------------
    @property
    def notice_path(self) -> str:
        return _join(self.run_path, NOTICE)

    def begin_notice(self, info: dict[str, Any]) -> None:
        """Say a notice checkpoint is being written (``info`` has ``deadline_unix``)."""
        data = json.dumps(info, sort_keys=True).encode()
        if is_local(self.fs):
            os.makedirs(self.run_path, exist_ok=True)
            tmp = f"{self.notice_path}.tmp-{os.getpid()}"
            with open(tmp, "wb") as fh:
                fh.write(data)
            os.replace(tmp, self.notice_path)
        else:
            self.fs.pipe_file(self.notice_path, data)

    def end_notice(self) -> None:
        with contextlib.suppress(OSError):
            self.fs.rm_file(self.notice_path)

    def pending_notice(self) -> dict[str, Any] | None:
        """The marker of a notice checkpoint still being written, if its deadline is ahead."""
        try:
            with self.fs.open(self.notice_path, "rb") as fh:
                info = json.loads(fh.read().decode())
        except (OSError, ValueError):
            return None
        if not isinstance(info, dict) or float(info.get("deadline_unix", 0)) <= time.time():
            return None
        if info.get("host") == socket.gethostname() and not _pid_alive(info.get("pid")):
            return None  # its writer was killed on this machine: nothing will come
        return dict(info)

    def wait_for_notice(self, poll_s: float = 0.2) -> dict[str, Any] | None:
        """Block while another trainer's notice checkpoint is in flight (until its deadline).

        Returns the marker waited for, or None when there was none.
        """
        info = self.pending_notice()
        if info is None:
            return None
        log(
            f"waiting for the notice checkpoint of {self.run_name} at step "
            f"{info.get('step')} from {info.get('node') or '?'} (until its deadline, "
            f"{max(0.0, float(info['deadline_unix']) - time.time()):.0f}s)"
        )
        while self.pending_notice() is not None:
            time.sleep(poll_s)
        return info


def _pid_alive(pid: Any) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie (killed, not yet reaped by its parent) writes nothing more
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def latest_checkpoint_step(storage: str, run_name: str) -> int | None:
    """Step of the newest complete checkpoint of a run (where it would resume), or None.

    ``storage`` is what was passed to ``--storage`` (a path, ``file://`` or ``gs://`` URI);
    ``run_name`` the run's name (``--run-name`` or the derived one printed at start). Only
    complete checkpoints count: a manifest that parses and files of the listed sizes.
    """
    info = FsspecCheckpointStore(storage, run_name).latest(quiet=True)
    return None if info is None else info.step


def local_run_dir(storage: str, run_name: str) -> Path:
    """A local directory for files that only work on a local disk (TensorBoard events)."""
    fs, root = resolve_storage(storage)
    if is_local(fs):
        return Path(root) / run_name
    return Path("runs") / run_name
