"""Read W&B's own run files (``run-<id>.wandb``) incrementally, while they are being written.

An offline run (``wandb.init(mode="offline")``, the engine's default) writes every record it
would send to the server into ``<WANDB_DIR>/wandb/offline-run-<time>-<id>/run-<id>.wandb``.
The format is W&B's transaction log: a 7-byte file header (``":W&B"``, magic ``0xBEE1``,
version 0) followed by a LevelDB log (https://github.com/google/leveldb/blob/main/doc/log_format.md):
32 KiB blocks of physical records ``crc32 (4, LE) | length (2, LE) | type (1) | data``, where
type is FULL, or FIRST/MIDDLE.../LAST for a record split across blocks, the checksum is zlib's
CRC-32 of the type byte followed by the data, and a block tail shorter than a record header is
zero padding. Each logical record is a serialized ``wandb_internal_pb2.Record``. wandb 0.31 no
longer ships a Python reader (it lives in the Go ``wandb-core``), so the framing is read here
and the payloads are decoded with wandb's own protobuf classes.

Reading is incremental: ``RecordLogReader.read_new`` returns only records completed since the
previous call and remembers where it stopped. A file being appended to is normal: a record
whose bytes are not all there yet (a partial last block) is left for the next poll. wandb-core
buffers the file and flushes it every ``x_transaction_log_flush_interval`` seconds (15 s by
default; ``WANDB__TRANSACTION_LOG_FLUSH_INTERVAL`` overrides it), so what a reader sees lags
the run by up to that interval; ``OfflineRunSource`` reports that as its ``lag_s``.

No network and no wandb import at module import time (the TUI starts without it).
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import struct
import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

FILE_HEADER = struct.Struct("<4sHB")
FILE_IDENT = b":W&B"
FILE_MAGIC = 0xBEE1
FILE_VERSION = 0
BLOCK_LEN = 32768
RECORD_HEADER = struct.Struct("<IHB")
RECORD_HEADER_LEN = RECORD_HEADER.size  # 7
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4
# W&B's default flush interval of the transaction log (wandb Settings.x_transaction_log_flush_interval).
DEFAULT_FLUSH_INTERVAL_S = 15.0
# A checksum failure at the end of the file may be a write in progress; after this many polls
# with no progress the reader skips to the next block instead of waiting forever.
_CORRUPT_PATIENCE = 3

_TYPE_CRC = {t: zlib.crc32(bytes([t])) for t in (FULL, FIRST, MIDDLE, LAST)}


class WandbFileError(Exception):
    """A file that is not a W&B run file (names the path and what was found)."""


@dataclass(frozen=True)
class HistoryPoint:
    """One ``wandb.log`` row: its step and the writer's wall-clock ``_timestamp``."""

    step: int
    timestamp: float


class RecordLogReader:
    """Incremental reader of one ``.wandb`` file's logical records (raw payload bytes).

    ``offset`` is the file position just after the last complete logical record returned;
    the next ``read_new`` starts there. Not thread-safe: one reader per poller.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.offset = 0
        self.records_read = 0
        self.corrupt_skips = 0  # blocks skipped because of a checksum/framing error
        self._stuck_at: int | None = None
        self._stuck_polls = 0

    def read_new(self, chunk_bytes: int = 4 << 20) -> list[bytes]:
        """Records completed since the last call (empty if nothing new or the file is gone).

        Reads at most ``chunk_bytes`` at a time (more only for a record larger than that), so
        a first look at a large finished run does not load it whole.
        """
        out: list[bytes] = []
        try:
            f = open(self.path, "rb")  # noqa: SIM115 (closed below; FileNotFoundError first)
        except FileNotFoundError:
            return out
        with f:
            while True:
                before = self.offset
                f.seek(before)
                data = f.read(chunk_bytes)
                at_eof = len(data) < chunk_bytes
                out += self._parse(data, at_eof)
                if at_eof:
                    break
                if self.offset == before:
                    chunk_bytes *= 2  # one record larger than the chunk
        if out:
            self._stuck_at, self._stuck_polls = None, 0
        self.records_read += len(out)
        return out

    def _parse(self, data: bytes, at_eof: bool) -> list[bytes]:
        """Complete logical records in ``data`` (read at ``self.offset``); advances offset."""
        base = self.offset
        pos = 0
        if base == 0:
            if len(data) < FILE_HEADER.size:
                return []  # header not written yet
            ident, magic, version = FILE_HEADER.unpack_from(data, 0)
            if ident != FILE_IDENT or magic != FILE_MAGIC:
                raise WandbFileError(
                    f"{self.path}: not a W&B run file (header {data[:7]!r}; expected "
                    f"':W&B' + magic 0x{FILE_MAGIC:X})"
                )
            if version != FILE_VERSION:
                raise WandbFileError(
                    f"{self.path}: W&B run file version {version} is not supported "
                    f"(this reader knows version {FILE_VERSION})"
                )
            pos = FILE_HEADER.size
            self.offset = FILE_HEADER.size
        out: list[bytes] = []
        committed = pos  # relative position after the last complete logical record
        fragments: list[bytes] = []
        while True:
            abs_pos = base + pos
            left_in_block = BLOCK_LEN - abs_pos % BLOCK_LEN
            if left_in_block < RECORD_HEADER_LEN:
                if len(data) - pos < left_in_block:
                    break  # padding not fully written yet
                pos += left_in_block  # zero trailer of the block
                if not fragments:
                    committed = pos
                continue
            if len(data) - pos < RECORD_HEADER_LEN:
                break  # partial header: wait for the writer
            checksum, length, rtype = RECORD_HEADER.unpack_from(data, pos)
            if checksum == 0 and length == 0 and rtype == 0:
                # Zeros where a header should be: preallocated/padded space not written yet.
                more = len(data) - pos > left_in_block or not at_eof
                if self._give_up_waiting(base + committed, more):
                    pos = pos + left_in_block
                    committed, fragments = pos, []
                    continue
                break
            end = pos + RECORD_HEADER_LEN + length
            if length > left_in_block - RECORD_HEADER_LEN or rtype not in _TYPE_CRC:
                if self._give_up_waiting(base + committed, True):
                    pos += left_in_block
                    committed, fragments = pos, []
                    continue
                break
            if end > len(data):
                break  # the record's data is still being written
            payload = data[pos + RECORD_HEADER_LEN : end]
            if zlib.crc32(payload, _TYPE_CRC[rtype]) != checksum:
                # At the tail this may be a torn write still in progress; in the middle of the
                # file it is corruption: skip the rest of the block (as LevelDB's reader does).
                if self._give_up_waiting(base + committed, end < len(data) or not at_eof):
                    pos += left_in_block
                    committed, fragments = pos, []
                    continue
                break
            pos = end
            if rtype == FULL:
                if fragments:
                    log.warning("%s: dropped a record with no LAST fragment", self.path)
                    fragments = []
                out.append(payload)
                committed = pos
            elif rtype == FIRST:
                fragments = [payload]
            elif rtype == MIDDLE:
                if fragments:
                    fragments.append(payload)
            elif rtype == LAST:
                if fragments:
                    fragments.append(payload)
                    out.append(b"".join(fragments))
                fragments = []
                committed = pos
        self.offset = base + committed
        return out

    def _give_up_waiting(self, at: int, more_follows: bool) -> bool:
        """True when bad bytes at ``at`` should be skipped rather than waited for."""
        if more_follows:
            self.corrupt_skips += 1
            log.warning(
                "%s: corrupt record near byte %d, skipping to the next block", self.path, at
            )
            return True
        if self._stuck_at != at:
            self._stuck_at, self._stuck_polls = at, 0
        self._stuck_polls += 1
        if self._stuck_polls > _CORRUPT_PATIENCE:
            self.corrupt_skips += 1
            self._stuck_at, self._stuck_polls = None, 0
            return True
        return False


def _item_key(item: Any) -> str:
    if item.key:
        return str(item.key)
    return ".".join(item.nested_key)


def _item_value(item: Any) -> Any:
    kind = item.WhichOneof("value")
    if kind is not None and kind != "json":
        return None if kind == "none" else getattr(item, kind)
    raw = item.json if kind == "json" else item.value_json
    if not raw:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return None


@dataclass
class OfflineRun:
    """What one offline run file says so far (updated by ``poll``)."""

    path: Path
    run_id: str = ""
    name: str = ""
    project: str = ""
    state: str = "running"  # running / finished / failed / preempting
    exit_code: int | None = None
    start_time: float | None = None
    # the run's config as logged (``wandb.init(config=...)`` and later updates), decoded
    config: dict[str, Any] = field(default_factory=dict)
    reader: RecordLogReader = field(init=False)

    def __post_init__(self) -> None:
        self.reader = RecordLogReader(self.path)
        if not self.run_id:
            # run-<id>.wandb; the run record (first in the file) confirms it.
            stem = self.path.stem
            self.run_id = stem[4:] if stem.startswith("run-") else stem

    def poll(self) -> list[HistoryPoint]:
        """New history points since the last poll (run metadata is updated as a side effect)."""
        pb = record_types()
        points: list[HistoryPoint] = []
        for payload in self.reader.read_new():
            rec = pb.Record()  # type: ignore[attr-defined]
            try:
                rec.ParseFromString(payload)
            except Exception:  # a checksummed record that does not parse: newer wandb?
                log.warning("%s: undecodable record skipped", self.path)
                continue
            kind = rec.WhichOneof("record_type")
            if kind == "history":
                point = _history_point(rec.history)
                if point is not None:
                    points.append(point)
            elif kind == "run":
                run = rec.run
                self.run_id = run.run_id or self.run_id
                self.name = run.display_name or self.name
                self.project = run.project or self.project
                if run.HasField("start_time"):
                    self.start_time = run.start_time.seconds + run.start_time.nanos / 1e9
                self.config.update(_config_items(run.config))
            elif kind == "config":
                self.config.update(_config_items(rec.config))
            elif kind == "exit":
                self.exit_code = int(rec.exit.exit_code)
                self.state = "finished" if self.exit_code == 0 else "failed"
            elif kind == "preempting":
                self.state = "preempting"
        return points


def record_types() -> Any:
    """wandb's protobuf classes of the run file's records (imported on first use: importing
    wandb takes ~0.6 s, more on a busy machine)."""
    from wandb.proto import wandb_internal_pb2

    return wandb_internal_pb2


def _config_items(config: Any) -> dict[str, Any]:
    """A ``ConfigRecord``'s updates as plain values (undecodable ones left out)."""
    out: dict[str, Any] = {}
    for item in config.update:
        key = str(item.key) if item.key else ".".join(item.nested_key)
        try:
            value = json.loads(item.value_json) if item.value_json else None
        except ValueError:
            continue
        # the run record may wrap a value as W&B's config.yaml does
        if isinstance(value, dict) and set(value) <= {"value", "desc"} and "value" in value:
            value = value["value"]
        out[key] = value
    return out


# The engine's step metric (``define_metric("*", step_metric="global_step")``): the training
# step. W&B's own ``_step`` only counts ``log`` calls, and restarts at 0 in a resumed
# trainer's offline file, so where the engine logged its step, that is the step.
STEP_METRIC = "global_step"


def _history_point(history: Any) -> HistoryPoint | None:
    step: int | None = int(history.step.num) if history.HasField("step") else None
    timestamp: float | None = None
    metric_step: int | None = None
    for item in history.item:
        key = _item_key(item)
        if key in ("_step", STEP_METRIC):
            value = _item_value(item)
            if isinstance(value, int | float) and not isinstance(value, bool):
                if key == STEP_METRIC:
                    metric_step = int(value)
                else:
                    step = int(value)
        elif key == "_timestamp":
            value = _item_value(item)
            if isinstance(value, int | float) and not isinstance(value, bool):
                timestamp = float(value)
    step = metric_step if metric_step is not None else step
    if step is None or timestamp is None or not math.isfinite(timestamp):
        return None
    return HistoryPoint(step=step, timestamp=timestamp)


def run_files(wandb_dir: str | os.PathLike[str]) -> list[Path]:
    """Offline run files under ``wandb_dir`` (a WANDB_DIR, or its ``wandb`` subdir), oldest first.

    W&B puts runs in ``<WANDB_DIR>/wandb/offline-run-<YYYYmmdd_HHMMSS>-<id>/run-<id>.wandb``
    whatever WANDB_DIR is called (the console's own default is ``<state>/phantom/wandb``, so
    runs land in ``.../wandb/wandb/``); the directory names sort by start time. Online runs
    (``run-*`` dirs) are included too: they keep the same transaction log locally.
    """
    root = Path(wandb_dir).expanduser()
    bases = [root / "wandb", root]
    found: dict[Path, None] = {}
    for base in bases:
        if not base.is_dir():
            continue
        for pattern in ("offline-run-*/run-*.wandb", "run-*/run-*.wandb"):
            for p in base.glob(pattern):
                found[p] = None
    return sorted(found, key=_start_key)


_RUN_DIR_TIME = re.compile(r"(\d{8}_\d{6})")


def _start_key(path: Path) -> tuple[str, str]:
    match = _RUN_DIR_TIME.search(path.parent.name)
    return (match.group(1) if match else "", path.parent.name)


def read_history(path: str | os.PathLike[str]) -> list[HistoryPoint]:
    """Every history point in one run file (convenience for tools and tests)."""
    return OfflineRun(Path(path)).poll()


def iter_records(path: str | os.PathLike[str]) -> Iterable[Any]:
    """Decoded ``wandb_internal_pb2.Record`` messages of one file (for tools and tests)."""
    from wandb.proto import wandb_internal_pb2 as pb

    for payload in RecordLogReader(path).read_new():
        rec = pb.Record()  # type: ignore[attr-defined]
        rec.ParseFromString(payload)
        yield rec
