"""Paths and checkpoints of the emulated workloads.

``gs://BUCKET/PATH`` maps to ``$PHANTOM_GCS_ROOT/BUCKET/PATH`` (the kubelet sets it to the
run dir's bucket/), ``file://`` and plain paths are used as they are. A checkpoint is a
directory ``checkpoints/<step>/`` that appears whole: it is written under a temporary
name and renamed, as Orbax does, so a reader never sees a half-written step.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from urllib.parse import urlparse

TMP_MARK = ".orbax-checkpoint-tmp-"


class StorageError(Exception):
    pass


def local_path(uri: str) -> Path:
    if uri.startswith("gs://"):
        root = os.environ.get("PHANTOM_GCS_ROOT")
        if not root:
            raise StorageError(f"{uri}: gs:// is not reachable here (no PHANTOM_GCS_ROOT)")
        return Path(root) / uri[len("gs://") :]
    if uri.startswith("file://"):
        return Path(urlparse(uri).path)
    if "://" in uri:
        raise StorageError(f"{uri}: unsupported scheme (use gs://, file:// or a path)")
    return Path(uri)


def latest_checkpoint(ckpt_dir: Path) -> int | None:
    """The highest complete step under ``ckpt_dir`` (temporary dirs are ignored)."""
    if not ckpt_dir.is_dir():
        return None
    steps = [
        int(p.name)
        for p in ckpt_dir.iterdir()
        if p.is_dir() and p.name.isdigit() and (p / "_CHECKPOINT_METADATA").is_file()
    ]
    return max(steps) if steps else None


def write_checkpoint(ckpt_dir: Path, step: int, state: dict[str, object]) -> Path:
    """Write ``checkpoints/<step>/`` atomically; returns its final path."""
    final = ckpt_dir / str(step)
    if final.exists():
        return final
    tmp = ckpt_dir / f"{step}{TMP_MARK}{time.time_ns()}"
    (tmp / "items").mkdir(parents=True)
    (tmp / "items" / "state.json").write_text(json.dumps(state))
    with open(tmp / "items" / "state.json", "rb") as fh:
        os.fsync(fh.fileno())
    (tmp / "_CHECKPOINT_METADATA").write_text(
        json.dumps({"step": step, "time": time.time(), "format": "phantom-emulated-orbax"})
    )
    os.rename(tmp, final)
    return final


def read_state(ckpt_dir: Path, step: int) -> dict[str, object]:
    data: dict[str, object] = json.loads(
        (ckpt_dir / str(step) / "items" / "state.json").read_text()
    )
    return data


def remove_stale_tmp(ckpt_dir: Path) -> None:
    if ckpt_dir.is_dir():
        for p in ckpt_dir.iterdir():
            if TMP_MARK in p.name:
                shutil.rmtree(p, ignore_errors=True)
