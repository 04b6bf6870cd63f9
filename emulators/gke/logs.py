"""Container log files in the CRI format (``<RFC3339Nano> <stream> F <line>``), one per
container instance, and the reader behind ``pods/{name}/log`` (tail, since, follow)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path


def rfc3339nano(t: datetime | None = None) -> str:
    t = t or datetime.now(UTC)
    return t.strftime("%Y-%m-%dT%H:%M:%S.%f") + "000Z"


def parse_cri(line: str) -> tuple[str, str, str]:
    """(timestamp, stream, text) of one CRI log line."""
    ts, stream, _tag, text = [*line.split(" ", 3), "", "", ""][:4]
    return ts, stream, text


def ts_to_dt(ts: str) -> datetime:
    # RFC3339Nano: trim to microseconds for fromisoformat.
    base, _, frac = ts.rstrip("Z").partition(".")
    return datetime.fromisoformat(f"{base}.{(frac + '000000')[:6]}+00:00")


class LogFile:
    """Append-only log of one container instance; followers wait on ``_more``."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fh = open(path, "ab")  # noqa: SIM115 - kept open while the container runs
        self._more = asyncio.Event()
        self.closed = False

    def write(self, stream: str, data: bytes) -> None:
        if self.closed:
            return
        text = data.decode("utf-8", "replace").replace("\r", "")
        self._fh.write(f"{rfc3339nano()} {stream} F {text}\n".encode())
        self._fh.flush()
        self._wake()

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self._fh.close()
            self._wake()

    def _wake(self) -> None:
        self._more.set()
        self._more = asyncio.Event()

    async def wait(self, timeout: float | None) -> bool:
        """Wait for a new line or close; False on timeout."""
        if self.closed:
            return True
        try:
            await asyncio.wait_for(self._more.wait(), timeout)
        except TimeoutError:
            return False
        return True


@dataclass(frozen=True)
class LogOptions:
    follow: bool = False
    tail_lines: int | None = None
    since: datetime | None = None
    timestamps: bool = False
    limit_bytes: int | None = None
    idle_timeout: float = 0.0  # 0 = never close an idle follow
    max_duration: float = 0.0  # 0 = no cap on a follow
    stream: str = "All"  # All | Stdout | Stderr


def _render(line: str, opts: LogOptions) -> str | None:
    ts, stream, text = parse_cri(line)
    if opts.stream != "All" and stream != opts.stream.lower():
        return None
    if opts.since is not None:
        try:
            if ts_to_dt(ts) < opts.since:
                return None
        except ValueError:
            return None
    return f"{ts} {text}\n" if opts.timestamps else f"{text}\n"


def _read_from(path: Path, offset: int) -> tuple[bytes, int]:
    """What the log file holds past ``offset``, and where that ends (file I/O: a thread)."""
    with open(path, "rb") as fh:
        fh.seek(offset)
        data = fh.read()
        return data, fh.tell()


async def stream_log(log: LogFile, opts: LogOptions) -> AsyncIterator[bytes]:
    """Yield the log's lines as the kubelet serves them, following if asked."""
    head, offset = await asyncio.to_thread(_read_from, log.path, 0)
    lines = head.decode("utf-8", "replace").splitlines()
    if opts.tail_lines is not None:
        lines = lines[-opts.tail_lines :] if opts.tail_lines > 0 else []
    sent = 0
    for line in lines:
        out = _render(line, opts)
        if out is None:
            continue
        data = out.encode()
        if opts.limit_bytes is not None and sent + len(data) > opts.limit_bytes:
            yield data[: opts.limit_bytes - sent]
            return
        sent += len(data)
        yield data
    if not opts.follow:
        return
    loop = asyncio.get_running_loop()
    deadline = loop.time() + opts.max_duration if opts.max_duration > 0 else None
    partial = b""
    while True:
        chunk, offset = await asyncio.to_thread(_read_from, log.path, offset)
        partial += chunk
        *complete, partial = partial.split(b"\n")
        for raw in complete:
            out = _render(raw.decode("utf-8", "replace"), opts)
            if out is None:
                continue
            data = out.encode()
            if opts.limit_bytes is not None and sent + len(data) > opts.limit_bytes:
                yield data[: opts.limit_bytes - sent]
                return
            sent += len(data)
            yield data
        if log.closed and not chunk:
            return
        timeout = opts.idle_timeout if opts.idle_timeout > 0 else None
        if deadline is not None:
            left = deadline - loop.time()
            if left <= 0:
                return
            timeout = left if timeout is None else min(timeout, left)
        if not await log.wait(timeout):
            # Idle timeout or cap: the stream ends as a proxy or the kubelet would end it;
            # the client sees a clean EOF and must resume (sinceTime) on its own.
            return
