"""Who does what when several front ends drive one pod (the TUI in tmux, cron scripts,
``phantom status`` under ``watch``).

Two crash-safe claims per pod, each an ``fcntl.flock`` on a file in the state dir, so the
kernel releases it the moment its process dies, SIGKILL included:

* ``watch``: the one process that detects, journals what it detects, and recovers. Others
  follow: they read the journal instead (``Facade`` tails it) and show "recovery run by
  <pid> on <host>". A process tries to take it at every poll, so a crashed owner's place is
  taken within one poll.
* ``actions``: one cluster-reshaping action at a time across processes (bring-up,
  teardown, a recovery). The owner's auto recovery never starts while another process
  reshapes the cluster.

The holder writes who it is (pid, host, since) into the file; ``holder()`` reads it only
when the lock is really held, so a stale file never names a dead process.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import json
import os
import socket
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Holder:
    pid: int
    host: str
    since: float
    role: str = ""

    def describe(self) -> str:
        return f"pid {self.pid} on {self.host}"


class FileLease:
    """An exclusive claim on ``path`` for as long as this object holds it."""

    def __init__(self, path: Path, role: str) -> None:
        self.path = path
        self.role = role
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def try_acquire(self) -> bool:
        """Take it if nobody holds it; True when this process holds it (now or already)."""
        if self._fd is not None:
            return True
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        me = Holder(os.getpid(), socket.gethostname(), time.time(), self.role)
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(me.__dict__).encode(), 0)
        self._fd = fd
        return True

    async def acquire(self, poll_s: float = 0.2) -> None:
        """Wait until this process holds it (cancellable; flock itself is not)."""
        # Another process releases it, so there is no event to await: poll.
        while not self.try_acquire():  # noqa: ASYNC110
            await asyncio.sleep(poll_s)

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    @contextlib.asynccontextmanager
    async def hold(self) -> AsyncIterator[None]:
        """Hold it for a block (waiting for it first), unless this process already does."""
        already = self.held
        if not already:
            await self.acquire()
        try:
            yield
        finally:
            if not already:
                self.release()

    def busy_elsewhere(self) -> bool:
        """Another process holds it now."""
        return not self.held and self.holder() is not None

    def holder(self) -> Holder | None:
        """Who holds it now (this process included), or None."""
        if self._fd is not None:
            return Holder(os.getpid(), socket.gethostname(), 0.0, self.role)
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return None
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:  # held: its content names the holder
                raw = os.pread(fd, 4096, 0)
                try:
                    data = json.loads(raw or b"{}")
                    return Holder(int(data["pid"]), str(data["host"]), float(data["since"]))
                except (ValueError, KeyError, TypeError):
                    return Holder(0, "?", 0.0, self.role)
            fcntl.flock(fd, fcntl.LOCK_UN)
            return None
        finally:
            os.close(fd)


class PodLeases:
    """The ``watch`` and ``actions`` claims of one pod (keyed by what identifies it)."""

    def __init__(self, state_dir: Path, pod_key: str) -> None:
        digest = hashlib.sha256(pod_key.encode()).hexdigest()[:16]
        folder = state_dir / "leases"
        self.watch = FileLease(folder / f"{digest}.watch", "watch")
        self.actions = FileLease(folder / f"{digest}.actions", "actions")

    def release(self) -> None:
        self.watch.release()
        self.actions.release()
