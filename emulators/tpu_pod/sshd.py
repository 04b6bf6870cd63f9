"""One emulated host's SSH server (asyncssh) running commands in its sandbox.

Behaves like OpenSSH's sshd without a pty: ``bash -c CMD`` in the sandbox,
stdin/stdout/stderr streamed, exit status (or exit signal) reported, the
session ends when the command has exited *and* its stdout/stderr are closed.
If the client goes away first, the pipes are closed so the command sees EOF /
SIGPIPE, exactly as with sshd. Local port forwarding (direct-tcpip) is allowed
to loopback destinations only.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import shlex
import signal
import socket
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncssh

log = logging.getLogger("phantom.pod.sshd")

_HIGH_WATER = 1 << 20  # bytes queued on the SSH channel before we pause the pipe


@dataclass
class HostContext:
    """What the SSH server needs to know about its host "VM"."""

    name: str
    ips: tuple[str, ...]  # internal IP first; the external one too in GCP-faithful mode
    port: int
    sandbox: Path
    env: Mapping[str, str]
    authorized: Mapping[str, frozenset[bytes]]  # user -> public key blobs it may log in with
    host_key: asyncssh.SSHKey
    cgroup: Path | None = None  # commands join it before exec (see procs)

    @property
    def ip(self) -> str:
        return self.ips[0]


def bind_socket(ip: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((ip, port))
        sock.listen(100)
    except OSError:
        sock.close()
        raise
    sock.setblocking(False)
    return sock


class _ServerConn(asyncssh.SSHServer):
    def __init__(self, host: HostSSH) -> None:
        self._host = host
        self._conn: asyncssh.SSHServerConnection | None = None

    def connection_made(self, conn: asyncssh.SSHServerConnection) -> None:
        self._conn = conn
        self._host.connections.add(conn)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._conn is not None:
            self._host.connections.discard(self._conn)

    def begin_auth(self, username: str) -> bool:
        return True

    def password_auth_supported(self) -> bool:
        return False

    def public_key_auth_supported(self) -> bool:
        return True

    def validate_public_key(self, username: str, key: asyncssh.SSHKey) -> bool:
        return key.public_data in self._host.ctx.authorized.get(username, frozenset())

    def connection_requested(
        self, dest_host: str, dest_port: int, orig_host: str, orig_port: int
    ) -> Any:
        dest = "127.0.0.1" if dest_host == "localhost" else dest_host
        try:
            loopback = ipaddress.ip_address(dest).is_loopback
        except ValueError:
            loopback = False
        if not loopback or self._conn is None:
            raise asyncssh.ChannelOpenError(
                asyncssh.OPEN_ADMINISTRATIVELY_PROHIBITED,
                f"the emulator only forwards to loopback addresses, not {dest_host}",
            )
        return self._forward(self._conn, dest, dest_port)

    async def _forward(
        self, conn: asyncssh.SSHServerConnection, dest: str, port: int
    ) -> asyncssh.SSHForwarder:
        forwarder = await conn.forward_connection(dest, port)
        self._host.forwards.add(forwarder)  # weak: a closed one goes by itself
        return forwarder

    def server_requested(self, listen_host: str, listen_port: int) -> bool:
        return False


class _PipeProtocol(asyncio.SubprocessProtocol):
    """Copies the child's stdout/stderr onto the SSH channel with backpressure."""

    def __init__(self, process: asyncssh.SSHServerProcess[bytes]) -> None:
        self._process = process
        self._loop = asyncio.get_running_loop()
        self.transport: asyncio.SubprocessTransport | None = None
        self.outputs_closed = {1: self._loop.create_future(), 2: self._loop.create_future()}
        self.exited = self._loop.create_future()
        self.client_gone = False
        self._paused: set[int] = set()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.SubprocessTransport)
        self.transport = transport

    def pipe_data_received(self, fd: int, data: bytes | str) -> None:
        if self.client_gone or self.transport is None:
            return
        assert isinstance(data, bytes)
        writer = self._process.stdout if fd == 1 else self._process.stderr
        try:
            writer.write(data)
        except (asyncssh.Error, OSError, BrokenPipeError):
            return
        if self._process.channel.get_write_buffer_size() > _HIGH_WATER and fd not in self._paused:
            pipe = self.transport.get_pipe_transport(fd)
            if isinstance(pipe, asyncio.ReadTransport):
                pipe.pause_reading()
                self._paused.add(fd)
                self._loop.create_task(self._resume_after_drain(fd, writer))

    async def _resume_after_drain(self, fd: int, writer: asyncssh.SSHWriter[bytes]) -> None:
        with contextlib.suppress(Exception):
            await writer.drain()
        self._paused.discard(fd)
        if self.transport is not None and not self.transport.is_closing():
            pipe = self.transport.get_pipe_transport(fd)
            if isinstance(pipe, asyncio.ReadTransport):
                pipe.resume_reading()

    def pipe_connection_lost(self, fd: int, exc: Exception | None) -> None:
        fut = self.outputs_closed.get(fd)
        if fut is not None and not fut.done():
            fut.set_result(None)

    def process_exited(self) -> None:
        if not self.exited.done():
            self.exited.set_result(None)


class HostSSH:
    """The SSH daemon of one host; ``start``/``stop`` follow the VM's life."""

    def __init__(self, ctx: HostContext) -> None:
        self.ctx = ctx
        self.connections: set[asyncssh.SSHServerConnection] = set()
        self.forwards: weakref.WeakSet[asyncssh.SSHForwarder] = weakref.WeakSet()
        self._acceptors: list[asyncssh.SSHAcceptor] = []
        self._tarpits: list[asyncio.Server] = []
        self._held: set[asyncio.StreamWriter] = set()
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def running(self) -> bool:
        return bool(self._acceptors) or bool(self._tarpits)

    @property
    def hung(self) -> bool:
        return bool(self._tarpits)

    async def start(self, socks: list[socket.socket | None] | None = None) -> None:
        """Listen on every ctx IP at ctx.port (or on sockets bound already, in ctx.ips order)."""
        given = list(socks or [])
        for i, ip in enumerate(self.ctx.ips):
            sock = given[i] if i < len(given) else None
            if sock is None:
                sock = bind_socket(ip, self.ctx.port)
            try:
                self._acceptors.append(await self._listen(sock))
            except BaseException:
                sock.close()
                self.stop()
                raise

    async def _listen(self, sock: socket.socket) -> asyncssh.SSHAcceptor:
        return await asyncssh.listen(
            sock=sock,
            server_factory=lambda: _ServerConn(self),
            server_host_keys=[self.ctx.host_key],
            process_factory=self._handle,
            encoding=None,
            allow_scp=False,
            agent_forwarding=False,
            x11_forwarding=False,
            keepalive_interval=0,
            login_timeout=30,
        )

    def stop_listening(self) -> None:
        """Refuse new connections; sessions already open go on (a VM shutting down)."""
        for acceptor in self._acceptors:
            acceptor.close()
        self._acceptors = []

    def stop(self) -> None:
        """Stop accepting and drop every open connection at once (no goodbye)."""
        self.stop_listening()
        self._close_tarpits()
        for conn in list(self.connections):
            conn.abort()
        self.connections.clear()

    # --- the "hang" fault -------------------------------------------------------

    def drop_forwards(self) -> int:
        """Close every forwarded connection (both ends), the SSH connections staying up;
        how many were open."""
        open_now = list(self.forwards)
        for forwarder in open_now:
            forwarder.close()
        self.forwards.clear()
        return len(open_now)

    async def hang(self) -> None:
        """Accept TCP connections and never answer; open sessions stop being served.

        What a wedged VM looks like from outside: the kernel completes the TCP
        handshake, sshd never sends its banner.
        """
        if self.hung:
            return
        self.stop_listening()
        for ip in self.ctx.ips:
            self._tarpits.append(
                await asyncio.start_server(self._hold, sock=bind_socket(ip, self.ctx.port))
            )
        for conn in self.connections:
            transport = getattr(conn, "_transport", None)  # asyncssh keeps it private
            if isinstance(transport, asyncio.ReadTransport):
                transport.pause_reading()

    async def unhang(self) -> None:
        if not self.hung:
            return
        self._close_tarpits()
        for ip in self.ctx.ips:
            self._acceptors.append(await self._listen(bind_socket(ip, self.ctx.port)))
        for conn in self.connections:
            transport = getattr(conn, "_transport", None)
            if isinstance(transport, asyncio.ReadTransport) and not transport.is_closing():
                transport.resume_reading()

    async def _hold(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._held.add(writer)  # closed when the fault is cleared or the host goes

    def _close_tarpits(self) -> None:
        for server in self._tarpits:
            server.close()
        self._tarpits = []
        for writer in self._held:
            writer.transport.abort()
        self._held.clear()

    async def _handle(self, process: asyncssh.SSHServerProcess[bytes]) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)  # type: ignore[arg-type]
            task.add_done_callback(self._tasks.discard)  # type: ignore[arg-type]
        try:
            await self._run(process)
        except Exception:  # never let a session crash the daemon
            log.exception("%s: session failed", self.ctx.name)
            with contextlib.suppress(Exception):
                process.exit(255)

    def _argv(self, process: asyncssh.SSHServerProcess[bytes]) -> list[str] | None:
        if process.subsystem is not None:
            return None
        cgroup = self.ctx.cgroup
        if process.command is None:
            # A "shell" request without pty runs bash reading commands from stdin.
            if cgroup is None:
                return ["bash"]
            join = '{ echo $$ > "$0/cgroup.procs"; } 2>/dev/null; exec "$@"'
            return ["/bin/sh", "-c", join, str(cgroup), "bash"]
        if cgroup is None:
            return ["bash", "-c", process.command]
        # The shell joins the host's cgroup before anything of the command runs, so every
        # descendant is in it. On the command's own line: its line numbers and errors stay
        # as they were, and bash still execs a last simple command without a fork. (A
        # /bin/sh wrapper exec'ing bash cost a second exec, ~0.5 ms CPU per command.)
        procs = shlex.quote(str(cgroup / "cgroup.procs"))
        return ["bash", "-c", f"{{ echo $$ > {procs}; }} 2>/dev/null; {process.command}"]

    async def _run(self, process: asyncssh.SSHServerProcess[bytes]) -> None:
        argv = self._argv(process)
        if argv is None:
            process.stderr.write(f"subsystem {process.subsystem} is not supported\n".encode())
            process.exit(1)
            return
        peer = process.get_extra_info("peername") or ("", 0)
        # Like sshd's usual `AcceptEnv LANG LC_*`: other client variables are dropped.
        env = dict(self.ctx.env)
        user = process.get_extra_info("username") or ""
        if user:
            env["USER"] = env["LOGNAME"] = user
        env.update(
            (k, v)
            for k, v in process.env.items()
            if isinstance(k, str) and isinstance(v, str) and (k == "LANG" or k.startswith("LC_"))
        )
        local = process.get_extra_info("sockname") or (self.ctx.ip, self.ctx.port)
        env["SSH_CLIENT"] = f"{peer[0]} {peer[1]} {self.ctx.port}"
        env["SSH_CONNECTION"] = f"{peer[0]} {peer[1]} {local[0]} {self.ctx.port}"
        loop = asyncio.get_running_loop()
        transport, proto = await loop.subprocess_exec(
            lambda: _PipeProtocol(process),
            *argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            cwd=str(self.ctx.sandbox),
            env=env,
        )
        self._forward_signals(process, transport)
        pump = loop.create_task(self._pump_stdin(process, transport))
        finished: asyncio.Future[Any] = asyncio.gather(proto.exited, *proto.outputs_closed.values())
        closed: asyncio.Future[Any] = loop.create_task(process.channel.wait_closed())
        try:
            await asyncio.wait({finished, closed}, return_when=asyncio.FIRST_COMPLETED)
            if finished.done():
                code = transport.get_returncode()
                if code is not None and code < 0:
                    name = signal.Signals(-code).name.removeprefix("SIG")
                    process.exit_with_signal(name)
                else:
                    process.exit(code or 0)
            else:
                # The client left while the command runs: close our pipe ends
                # like sshd does; the command gets EOF/SIGPIPE and exits on its own.
                proto.client_gone = True
                for fd in (0, 1, 2):
                    pipe = transport.get_pipe_transport(fd)
                    if pipe is not None:
                        pipe.close()
                await proto.exited
        finally:
            pump.cancel()
            closed.cancel()
            finished.cancel()
            transport.close()

    @staticmethod
    def _forward_signals(
        process: asyncssh.SSHServerProcess[bytes], transport: asyncio.SubprocessTransport
    ) -> None:
        """Deliver "signal" and "break" channel requests to the command, as sshd does.

        asyncssh would queue them on stdin, where they are lost once stdin hit EOF.
        """

        def send(sig: signal.Signals) -> None:
            if transport.get_returncode() is None:
                with contextlib.suppress(ProcessLookupError):
                    transport.send_signal(sig)

        def on_signal(name: str) -> None:
            sig = getattr(signal.Signals, f"SIG{name}", None)
            if sig is not None:
                send(sig)

        def on_break(msec: int) -> bool:
            send(signal.SIGINT)
            return True

        process.signal_received = on_signal  # type: ignore[method-assign,assignment]
        process.break_received = on_break  # type: ignore[method-assign,assignment]

    async def _pump_stdin(
        self, process: asyncssh.SSHServerProcess[bytes], transport: asyncio.SubprocessTransport
    ) -> None:
        pipe = transport.get_pipe_transport(0)
        if not isinstance(pipe, asyncio.WriteTransport):
            return
        try:
            while True:
                data = await process.stdin.read(65536)
                if not data or pipe.is_closing():
                    break
                pipe.write(data)
        except (asyncssh.Error, OSError):
            pass
        finally:
            if not pipe.is_closing():
                pipe.close()


def fingerprint(key: asyncssh.SSHKey) -> str:
    return key.get_fingerprint("sha256")


def public_line(key: asyncssh.SSHKey) -> str:
    """``ssh-ed25519 AAAA...`` without comment."""
    data: bytes = key.export_public_key("openssh")
    return " ".join(data.decode().split()[:2])


def known_hosts_line(ip: str, port: int, key: asyncssh.SSHKey) -> str:
    target = ip if port == 22 else f"[{ip}]:{port}"
    return f"{target} {public_line(key)}"
