"""Helpers for tests that run the engine as a user would (subprocesses, storage on disk).

Reusable by the emulator-driven notice tests: ``notice_from_log`` parses the trainer's one
preemption line, ``assert_only_complete_checkpoints`` checks what a loader could see, and
``engine.storage.latest_checkpoint_step`` says where a run would resume.
"""

from __future__ import annotations

import json
import os
import signal
import struct
import subprocess
import sys
import zlib
from pathlib import Path
from typing import Any

from engine.notice import NOTICE_LINE_RE
from engine.storage import MANIFEST, FsspecCheckpointStore, sha256_file
from tests.support import REPO


def engine_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """Environment of an engine subprocess: offline W&B in tmp, this repo importable."""
    env = {
        **os.environ,
        "WANDB_MODE": "offline",
        "WANDB_SILENT": "true",
        "WANDB_DIR": str(tmp_path / "wandb-dir"),
        "PYTHONPATH": str(REPO),
        "RAY_USAGE_STATS_ENABLED": "0",
        "NO_GCE_CHECK": "True",
    }
    env.pop("WANDB_API_KEY", None)
    env.pop("PHANTOM_STORAGE", None)
    # A test that used wandb in this process left WANDB_SERVICE pointing at its wandb-core;
    # a trainer that inherits it attaches there instead of starting its own, as a job on a
    # VM does (the notice test signals the trainer's own wandb-core).
    env.pop("WANDB_SERVICE", None)
    (tmp_path / "wandb-dir").mkdir(exist_ok=True)
    env.update(extra)
    return env


def start_train(tmp_path: Path, args: list[str], log: Path, **env: str) -> subprocess.Popen[str]:
    """``python -m engine.train ARGS`` in ``tmp_path``, stderr to ``log``."""
    with open(log, "w") as fh:
        return subprocess.Popen(
            [sys.executable, "-m", "engine.train", *args],
            cwd=tmp_path,
            env=engine_env(tmp_path, **env),
            stdout=subprocess.PIPE,
            stderr=fh,
            text=True,
        )


def notice_from_log(text: str) -> dict[str, Any] | None:
    """The preemption notice line of a trainer's log as a dict (step, uri, seconds, ...)."""
    found = list(NOTICE_LINE_RE.finditer(text))
    assert len(found) <= 1, f"more than one notice line: {[m.group(0) for m in found]}"
    if not found:
        return None
    out: dict[str, Any] = found[0].groupdict()
    out["step"], out["seconds"], out["code"] = (
        int(out["step"]),
        float(out["seconds"]),
        int(out["code"]),
    )
    return out


def assert_only_complete_checkpoints(storage: str, run_name: str) -> list[int]:
    """Every ``step-*`` directory a loader would list is complete (manifest parses, every
    listed file present with its size and SHA-256). Returns their steps, newest first."""
    store = FsspecCheckpointStore(storage, run_name)
    steps = []
    for step, path in store.list_steps():
        manifest = json.loads(Path(path, MANIFEST).read_text())
        assert manifest["step"] == step, (path, manifest["step"])
        for name, meta in manifest["files"].items():
            file = Path(path, name)
            assert file.stat().st_size == meta["size"], f"{file} has the wrong size"
            assert sha256_file(file) == meta["sha256"], f"{file} is corrupt"
        steps.append(step)
    return steps


def kill(proc: subprocess.Popen[str], sig: int = signal.SIGKILL) -> None:
    if proc.poll() is None:
        proc.send_signal(sig)
    proc.wait(timeout=60)


def wandb_records(path: Path) -> list[object]:
    """Decode an offline run's ``.wandb`` file.

    wandb 0.31 no longer ships its Python datastore reader (the writer moved to the Go
    wandb-core), so this follows the same framing that module documented (LevelDB log:
    32 KiB blocks, 7-byte headers with CRC-32 of type+data, FULL/FIRST/MIDDLE/LAST
    chunks after a ':W&B' header) and decodes records with wandb's own protobuf.
    """
    from wandb.proto import wandb_internal_pb2 as pb

    data = path.read_bytes()
    ident, magic, version = struct.unpack("<4sHB", data[:7])
    assert (ident, magic, version) == (b":W&B", 0xBEE1, 0)
    pos, pending, out = 7, b"", []
    while pos + 7 <= len(data):
        left = 32768 - pos % 32768
        if left < 7:
            pos += left
            continue
        crc, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        if kind == 0 and length == 0:  # zero padding up to the block end
            pos += left
            continue
        chunk = data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        assert zlib.crc32(chunk, zlib.crc32(bytes([kind]))) & 0xFFFFFFFF == crc
        if kind == 1:
            out.append(chunk)
        elif kind == 2:
            pending = chunk
        elif kind == 3:
            pending += chunk
        elif kind == 4:
            out.append(pending + chunk)
    records = []
    for raw in out:
        rec = pb.Record()
        rec.ParseFromString(raw)
        records.append(rec)
    return records
