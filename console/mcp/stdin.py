"""The MCP session's stdin read on the event loop, so that stopping the session stops it.

The SDK's ``stdio_server()`` reads stdin in a worker thread that cancellation cannot reach:
a session cancelled on SIGTERM waits for the next line or EOF, and the thread (not a
daemon) keeps the process alive after it. Here the same descriptor is read by the loop
(``connect_read_pipe``), which a cancel ends at once. As the SDK does, fd 0 points at the
null device while the session holds the wire, so a child process never reads the agent's
bytes; it is restored after.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import stat
from collections.abc import AsyncIterator

LINE_LIMIT = 64 * 1024 * 1024  # one JSON-RPC message per line; the SDK sets no bound


class StdinLines:
    """``async for line in StdinLines(reader)``: what the SDK's stdin reader iterates."""

    def __init__(self, reader: asyncio.StreamReader) -> None:
        self._reader = reader

    def __aiter__(self) -> StdinLines:
        return self

    async def __anext__(self) -> str:
        line = await self._reader.readline()
        if not line:
            raise StopAsyncIteration
        return line.decode("utf-8", errors="replace")


@contextlib.asynccontextmanager
async def stdin_lines(fd: int = 0) -> AsyncIterator[StdinLines | None]:
    """stdin's lines, read by the loop; None when the loop cannot watch it (a regular file,
    /dev/null): the SDK's own reader serves it, and such input ends by itself."""
    mode = os.fstat(fd).st_mode
    # What epoll can watch: a pipe or socket (an agent host's), a terminal; not a regular
    # file nor /dev/null (connect_read_pipe would take it and never read).
    if not (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or os.isatty(fd)):
        yield None
        return
    wire = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3)
    saved = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3)
    blocking = os.get_blocking(fd)
    null = os.open(os.devnull, os.O_RDONLY)
    try:
        os.dup2(null, fd)
    finally:
        os.close(null)
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=LINE_LIMIT)
    pipe = os.fdopen(wire, "rb", buffering=0)
    try:
        transport, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), pipe
        )
    except BaseException:
        pipe.close()
        _restore(fd, saved, blocking)
        raise
    try:
        yield StdinLines(reader)
    finally:
        transport.close()
        _restore(fd, saved, blocking)


def _restore(fd: int, saved: int, blocking: bool) -> None:
    """fd back on the wire, blocking as it was (the loop made the shared description
    non-blocking: a terminal left so would fail the shell's next read)."""
    try:
        os.set_blocking(saved, blocking)
        os.dup2(saved, fd)
    finally:
        os.close(saved)
