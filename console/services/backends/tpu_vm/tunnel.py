"""SSH local port forwards to the Ray head: the seed's ``ssh -L 8265:localhost:8265 -N``.

``Tunnel(connect, forwards)`` opens one SSH connection (``connect`` is e.g.
``lambda: fanout.connect(head)``) and one asyncssh local forward per
``(local_host, local_port, remote_host, remote_port)``. ``watch()`` keeps it open: when
the connection drops (head preempted, network blip) it is re-opened with exponential
backoff as soon as the head answers again, and every up/down transition goes to
``on_change(up, reason)``.

Emulator note: every emulated host shares this machine's loopback, so the head's
"localhost:8265" is ours too; the local port must differ from the remote one there
(tests use free ports).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import socket
import time
from collections.abc import Awaitable, Callable, Sequence

import asyncssh

from console.config import RayConfig
from console.services.errors import BackendError

log = logging.getLogger(__name__)

Forward = tuple[str, int, str, int]  # local_host, local_port, remote_host, remote_port
ChangeCallback = Callable[[bool, str], None]


class TunnelError(BackendError):
    """The tunnel could not be opened; one line naming the forward and the cause."""


def default_forwards(ray: RayConfig, head_ip: str) -> list[Forward]:
    """Dashboard and Ray client ports, local ends from ``ray.local_*_port``. The dashboard
    listens on the head's 127.0.0.1; Ray's client server on the head's node IP (``ray
    start`` binds it there), so that forward targets ``head_ip``."""
    return [
        ("127.0.0.1", ray.local_dashboard_port, "127.0.0.1", ray.dashboard_port),
        ("127.0.0.1", ray.local_client_port, head_ip, ray.client_port),
    ]


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


class Tunnel:
    """Local forwards over one SSH connection, re-opened by ``watch()`` when it drops.

    Interface used by the facade/watchdog: ``await open()``, ``await close()``,
    ``is_up``, ``start()`` (spawns ``watch()``), ``await wait_up(timeout_s)``,
    ``url(remote_port)``, ``last_error``, ``up_since``.
    """

    def __init__(
        self,
        connect: Callable[[], Awaitable[asyncssh.SSHClientConnection]],
        forwards: Sequence[Forward],
        *,
        on_change: ChangeCallback | None = None,
        backoff_initial_s: float = 0.5,
        backoff_max_s: float = 10.0,
    ) -> None:
        if not forwards:
            raise ValueError("tunnel: no forwards given")
        for lh, lp, _rh, _rp in forwards:
            if not 0 <= lp <= 65535:
                raise ValueError(f"tunnel: local port {lp} on {lh} is not a TCP port")
        self._connect = connect
        self.forwards = list(forwards)
        self._on_change = on_change
        self.backoff_initial_s = backoff_initial_s
        self.backoff_max_s = backoff_max_s
        self._conn: asyncssh.SSHClientConnection | None = None
        self._listeners: list[asyncssh.SSHListener] = []
        self._watch_task: asyncio.Task[None] | None = None
        self._closing = False
        self._up_event = asyncio.Event()
        self._lock = asyncio.Lock()
        self.last_error = ""
        self.up_since: float | None = None
        self.reopens = 0
        self.bound: dict[int, int] = {}  # remote port -> local port actually bound

    def set_forwards(self, forwards: Sequence[Forward]) -> None:
        """New targets (the head moved to another address); used from the next ``open``."""
        if not forwards:
            raise ValueError("tunnel: no forwards given")
        self.forwards = list(forwards)

    @property
    def is_up(self) -> bool:
        return self._conn is not None and not self._conn.is_closed() and bool(self._listeners)

    def url(self, remote_port: int, scheme: str = "http") -> str:
        """Local URL reaching ``remote_port`` on the head (e.g. the dashboard)."""
        for lh, lp, _rh, rp in self.forwards:
            if rp == remote_port:
                return f"{scheme}://{lh}:{self.bound.get(rp, lp)}"
        raise KeyError(f"no forward to remote port {remote_port}")

    async def open(self) -> None:
        """Connect and bind every forward. Idempotent. Raises TunnelError or SshError."""
        async with self._lock:
            if self.is_up:
                return
            await self._teardown()
            self._closing = False
            conn = await self._connect()
            listeners: list[asyncssh.SSHListener] = []
            try:
                moved: list[str] = []
                for lh, lp, rh, rp in self.forwards:
                    listener = await self._bind(conn, lh, lp, rh, rp)
                    listeners.append(listener)
                    self.bound[rp] = listener.get_port()
                    if lp and self.bound[rp] != lp:
                        moved.append(f"{lp} in use, using {self.bound[rp]}")
            except BaseException:
                for listener in listeners:
                    listener.close()
                conn.close()
                raise
            self._conn = conn
            self._listeners = listeners
            self.up_since = time.time()
            self.last_error = ""
            self._up_event.set()
        note = f" (local port {'; '.join(moved)}: another console has it)" if moved else ""
        self._emit(True, "tunnel open: " + ", ".join(self._describe()) + note)

    async def _bind(
        self, conn: asyncssh.SSHClientConnection, lh: str, lp: int, rh: str, rp: int
    ) -> asyncssh.SSHListener:
        """The configured local port; when another process has it (a console in tmux and a
        script side by side), the port this tunnel had before, else any free one."""
        candidates = [lp]
        if lp:
            candidates += [p for p in (self.bound.get(rp, 0), 0) if p != lp]
        for port in dict.fromkeys(candidates):
            try:
                return await conn.forward_local_port(lh, port, rh, rp)
            except OSError as exc:
                if exc.errno != errno.EADDRINUSE:
                    raise TunnelError(f"tunnel {lh}:{port} -> {rh}:{rp}: {exc}") from None
        raise TunnelError(f"tunnel {lh}:{lp} -> {rh}:{rp}: no free local port on {lh}")

    def _describe(self) -> list[str]:
        return [f"{lh}:{self.bound.get(rp, lp)} -> {rh}:{rp}" for lh, lp, rh, rp in self.forwards]

    async def _teardown(self) -> None:
        for listener in self._listeners:
            listener.close()
        self._listeners = []
        conn, self._conn = self._conn, None
        self._up_event.clear()
        if conn is not None:
            conn.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(conn.wait_closed(), 5.0)

    async def close(self) -> None:
        """Stop watching and close the forwards and the connection."""
        self._closing = True
        task, self._watch_task = self._watch_task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        was_up = self.is_up
        async with self._lock:
            await self._teardown()
        if was_up:
            self._emit(False, "tunnel closed")

    def start(self) -> asyncio.Task[None]:
        """Run ``watch()`` in the background (idempotent); ``close()`` stops it."""
        if self._watch_task is None or self._watch_task.done():
            self._closing = False
            self._watch_task = asyncio.create_task(self.watch(), name="tunnel-watch")
        return self._watch_task

    async def wait_up(self, timeout_s: float) -> bool:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_s):
                await self._up_event.wait()
        return self.is_up

    async def watch(self) -> None:
        """Keep the tunnel open until ``close()``: re-open with backoff after every drop."""
        delay = self.backoff_initial_s
        while not self._closing:
            if not self.is_up:
                try:
                    await self.open()
                except Exception as exc:  # any failure: report and try again later
                    msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                    if msg != self.last_error:
                        log.info("tunnel down: %s", msg)
                    self.last_error = msg
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, self.backoff_max_s)
                    continue
                delay = self.backoff_initial_s
            conn = self._conn
            if conn is None:
                continue
            await conn.wait_closed()
            if self._closing:
                break
            self.reopens += 1
            async with self._lock:
                await self._teardown()
            self.last_error = "connection to the head closed"
            self._emit(False, "tunnel down: connection to the head closed; re-opening")

    def _emit(self, up: bool, reason: str) -> None:
        log.info("%s", reason)
        if self._on_change is not None:
            try:
                self._on_change(up, reason)
            except Exception:
                log.exception("tunnel on_change callback failed")
