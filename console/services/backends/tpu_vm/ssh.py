"""SSH fan-out to the pod's hosts: the seed's ``gcloud ... ssh --worker=all --command=...``.

``SshFanout.run`` runs one command on every host (or a subset) with at most
``parallelism`` sessions at once, streams each output line as it arrives
(``on_output(host, "stdout"|"stderr", line)``) and returns one ``HostResult`` per host.
It never raises for a host's failure: that host's result says why in one line naming
the host, its address and the cause, e.g.
``127.0.0.12:2222 (phantom-pod-w2): connect timed out after 2.0s (4 attempts)``.

Connect-phase errors that can heal on their own (refused, reset, timeout, no route) are
retried with exponential backoff; a host-key refusal or an authentication failure is
never retried. A command is never re-run: once it started, its failure is reported.
Connections are cached per host and dropped on any error.

A command given as a sequence is quoted with ``shlex.join``, so arguments never reach a
shell unquoted. A string command is passed to the remote shell as written.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import os
import re
import shlex
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Sequence

import asyncssh

from console.config import SshConfig
from console.services.backends.tpu_vm.endpoints import (
    HostEndpoint,
    HostLookup,
    proxy_argv,
    resolve_hosts,
)
from console.services.backends.tpu_vm.hostkeys import (
    HostKeyClient,
    HostKeyError,
    HostKeyPolicy,
)
from console.services.backends.tpu_vm.identity import describe_keys, load_keys
from console.services.errors import BackendError
from console.services.model import HostResult

log = logging.getLogger(__name__)

OutputCallback = Callable[[str, str, str], Awaitable[None] | None]
TAIL_LINES = 200
TAIL_CHARS = 64_000
BACKOFF_BASE_S = 0.5
BACKOFF_MAX_S = 8.0
# AES-GCM first: hardware-accelerated in OpenSSL, several times cheaper per packet than
# asyncssh's chacha20-poly1305 (which builds a cipher object per packet); every OpenSSH
# sshd offers it. The rest of asyncssh's defaults follow as fallbacks.
_CIPHERS = [
    "aes128-gcm@openssh.com",
    "aes256-gcm@openssh.com",
    "chacha20-poly1305@openssh.com",
    "aes128-ctr",
    "aes256-ctr",
]


class SshError(BackendError):
    """A host could not be reached or refused us; ``str()`` is the one-line reason."""

    def __init__(
        self, ep: HostEndpoint, cause: str, *, transient: bool = False, message: str = ""
    ) -> None:
        super().__init__(message or f"{ep.label}: {cause}")
        self.endpoint = ep
        self.cause = cause
        self.transient = transient


class HostUnreachable(SshError):
    """Refused, reset, timed out or no route: may heal (VM booting, preempted...)."""


class AuthFailed(SshError):
    """The server refused our key: never retried."""


class HostKeyRefused(SshError):
    """The host key was not trusted (see ``hostkeys``): never retried."""


def quote_command(command: str | Sequence[str]) -> str:
    """A sequence is shell-quoted argument by argument; a string is used as written."""
    if isinstance(command, str):
        return command
    if not command:
        raise ValueError("command: empty argument list")
    return shlex.join(str(a) for a in command)


class _Tail:
    def __init__(self) -> None:
        self.lines: deque[str] = deque(maxlen=TAIL_LINES)

    def add(self, line: str) -> None:
        self.lines.append(line)

    def text(self) -> str:
        return "".join(self.lines)[-TAIL_CHARS:]


class SshFanout:
    """Runs commands on pod hosts over SSH. One instance per pod; safe for concurrent use.

    ``client_keys``: private key paths or loaded keys. ``host_keys``: the ``HostKeyPolicy``.
    Interface used by the facade/watchdog:

    - ``await run(command, hosts=None, on_output=None) -> dict[name, HostResult]``
    - ``await run_one(host, command, on_output=None) -> HostResult``
    - ``await connect(host) -> SSHClientConnection`` (a new connection owned by the caller,
      e.g. the tunnel; raises ``SshError``)
    - ``await probe(hosts=None) -> dict[name, HostResult]`` (reachability: ``true``)
    - ``set_endpoints(endpoints)`` after the TPU API reports new addresses
    - ``await trust(host)`` (``phantom trust``), ``await close()``
    """

    def __init__(
        self,
        endpoints: Sequence[HostEndpoint],
        *,
        user: str,
        client_keys: Sequence[str | os.PathLike[str] | asyncssh.SSHKey],
        host_keys: HostKeyPolicy,
        parallelism: int = 256,
        connect_timeout_s: float = 10.0,
        command_timeout_s: float = 600.0,
        retries: int = 3,
        keepalive_s: float = 15.0,
        on_lost: Callable[[HostEndpoint], None] | None = None,
        proxy_command: str = "",
    ) -> None:
        self.on_lost = on_lost
        if parallelism < 1:
            raise ValueError(f"ssh.parallelism = {parallelism!r}: must be greater than 0")
        self.endpoints: list[HostEndpoint] = list(endpoints)
        self.user = user
        self.client_keys = load_keys(client_keys)
        self.host_keys = host_keys
        self.parallelism = parallelism
        self.connect_timeout_s = connect_timeout_s
        self.command_timeout_s = command_timeout_s
        self.retries = retries
        self.keepalive_s = keepalive_s
        self.proxy_command = proxy_command
        self._sem = asyncio.Semaphore(parallelism)
        self._conns: dict[str, asyncssh.SSHClientConnection] = {}
        self._conn_locks: dict[str, asyncio.Lock] = {}
        # Another fan-out whose connections this one uses (never closes), and which keeps the
        # ones this one makes: the probes ride the connection the actions and watchers hold.
        self.borrow_from: SshFanout | None = None
        self._host_lookup: HostLookup | None = None  # for ``endpoints`` as they are now
        # What the fan-out has cost so far: connections made and sessions (commands) opened.
        self.connections_opened = 0
        self.sessions_opened = 0

    @classmethod
    def from_config(
        cls,
        cfg: SshConfig,
        endpoints: Sequence[HostEndpoint],
        host_keys: HostKeyPolicy,
        *,
        user: str,
        key_path: str | os.PathLike[str],
    ) -> SshFanout:
        """Build from ``config.ssh``; ``user``/``key_path`` are resolved by the caller
        (config value or the provider's default)."""
        return cls(
            endpoints,
            user=user,
            client_keys=[key_path],
            host_keys=host_keys,
            parallelism=cfg.parallelism,
            connect_timeout_s=cfg.connect_timeout_s,
            command_timeout_s=cfg.command_timeout_s,
            retries=cfg.retries,
            proxy_command=cfg.proxy_command,
        )

    # hosts -----------------------------------------------------------------------------
    def resolve(self, hosts: Iterable[str | int] | None = None) -> list[HostEndpoint]:
        return resolve_hosts(self.endpoints, hosts, self._lookup())

    def endpoint(self, host: str | int) -> HostEndpoint:
        return resolve_hosts(self.endpoints, [host], self._lookup())[0]

    def _lookup(self) -> HostLookup:
        if self._host_lookup is None or self._host_lookup.endpoints is not self.endpoints:
            self._host_lookup = HostLookup(self.endpoints)
        return self._host_lookup

    def set_endpoints(self, endpoints: Sequence[HostEndpoint]) -> None:
        """Replace the host list; cached connections to changed addresses are dropped."""
        new = {ep.name: ep for ep in endpoints}
        for old in self.endpoints:
            if new.get(old.name) != old:
                self.drop(old.name)
        self.endpoints = list(endpoints)

    def drop(self, name: str) -> None:
        """Forget (and close) the cached connection to a host."""
        conn = self._conns.pop(name, None)
        if conn is not None:
            conn.close()

    async def close(self) -> None:
        conns = list(self._conns.values())
        self._conns.clear()
        for conn in conns:
            conn.close()
        for conn in conns:
            with contextlib.suppress(Exception):
                await conn.wait_closed()

    # connecting --------------------------------------------------------------------------
    async def connect(self, host: str | int | HostEndpoint) -> asyncssh.SSHClientConnection:
        """A new connection (with retries on transient errors); the caller closes it."""
        ep = host if isinstance(host, HostEndpoint) else self.endpoint(host)
        return await self._connect_with_retries(ep)

    async def _cached(
        self,
        ep: HostEndpoint,
        connect: Callable[[HostEndpoint], Awaitable[asyncssh.SSHClientConnection]] | None = None,
    ) -> asyncssh.SSHClientConnection:
        """The connection held to ``ep``, made (by ``connect``, default this fan-out's own
        connect with its retries) when there is none."""
        if self.borrow_from is not None:
            # The lender's connection, or one made with this fan-out's settings (the probes'
            # short timeout, no retries) that the lender then keeps: one a host, one handshake.
            return await self.borrow_from._cached(ep, self._connect_with_retries)
        lock = self._conn_locks.setdefault(ep.name, asyncio.Lock())
        async with lock:
            conn = self._conns.get(ep.name)
            if conn is not None and not conn.is_closed():
                return conn
            self._conns.pop(ep.name, None)
            conn = await (connect or self._connect_with_retries)(ep)
            self._conns[ep.name] = conn
            return conn

    async def _connect_with_retries(self, ep: HostEndpoint) -> asyncssh.SSHClientConnection:
        attempt = 0
        while True:
            try:
                return await self._connect_once(ep)
            except SshError as exc:
                if not exc.transient or attempt >= self.retries:
                    if attempt and exc.transient:
                        raise type(exc)(
                            ep, f"{exc.cause} ({attempt + 1} attempts)", transient=True
                        ) from exc
                    raise
                delay = min(BACKOFF_BASE_S * 2**attempt, BACKOFF_MAX_S)
                log.info("%s; retrying in %.1fs", exc, delay)
                attempt += 1
                await asyncio.sleep(delay)

    async def _connect_once(self, ep: HostEndpoint) -> asyncssh.SSHClientConnection:
        # A slow TPU API must not stall a connect: without fresh keys from it, the policy
        # decides on what it already knows (known_hosts, the last answer).
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self.connect_timeout_s):
                await self.host_keys.prepare(ep)
        via = self._via(ep)
        for _ in range(2):  # second pass only after the TPU API vouched for a new key
            client = HostKeyClient(self.host_keys, ep, self.on_lost)
            try:
                async with asyncio.timeout(self.connect_timeout_s):
                    conn = await asyncssh.connect(
                        ep.connect_ip,
                        ep.port,
                        proxy_command=via,
                        username=self.user,
                        client_keys=self.client_keys,
                        known_hosts=([], [], []),  # every key goes through the policy
                        client_factory=lambda c=client: c,  # type: ignore[misc]
                        config=None,
                        agent_path=None,
                        password_auth=False,
                        kbdint_auth=False,
                        keepalive_interval=self.keepalive_s,
                        keepalive_count_max=3,
                        encryption_algs=_CIPHERS,
                    )
            except asyncssh.HostKeyNotVerifiable:
                if client.offered is not None and await self.host_keys.reconsider(
                    ep, client.offered
                ):
                    continue
                refusal = str(self.host_keys.refusal(ep, client.offered))
                raise HostKeyRefused(ep, refusal, message=refusal) from None
            except HostKeyError as exc:
                raise HostKeyRefused(ep, str(exc), message=str(exc)) from None
            except asyncssh.PermissionDenied as exc:
                raise AuthFailed(
                    ep,
                    f"authentication failed for user {self.user!r} with "
                    f"{describe_keys(self.client_keys)}: {exc.reason or 'permission denied'}",
                ) from None
            except TimeoutError:
                raise HostUnreachable(
                    ep,
                    f"connect timed out after {self.connect_timeout_s}s{self._via_note(via)}",
                    transient=True,
                ) from None
            except ConnectionRefusedError:
                raise HostUnreachable(ep, "connection refused", transient=True) from None
            except ConnectionResetError:
                raise HostUnreachable(ep, "connection reset", transient=True) from None
            except asyncssh.ConnectionLost as exc:
                raise HostUnreachable(
                    ep,
                    f"connection lost during handshake: {exc.reason}{self._via_note(via)}",
                    transient=True,
                ) from None
            except asyncssh.DisconnectError as exc:
                raise SshError(ep, f"disconnected: {exc.reason}") from None
            except OSError as exc:
                reason = exc.strerror or str(exc) or type(exc).__name__
                raise HostUnreachable(ep, reason + self._via_note(via), transient=True) from None
            if client.offered is not None:
                self.host_keys.confirm(ep, client.offered)
            self.connections_opened += 1
            return conn
        raise HostKeyRefused(ep, "host key refused")  # pragma: no cover - loop always returns

    def _via(self, ep: HostEndpoint) -> list[str] | tuple[()]:
        """asyncssh's ``proxy_command`` for ``ep`` (tokens expanded); () = connect directly."""
        if not self.proxy_command:
            return ()
        return proxy_argv(self.proxy_command, ep, self.user)

    @staticmethod
    def _via_note(via: list[str] | tuple[()]) -> str:
        return f" (through ssh.proxy_command {shlex.join(via)})" if via else ""

    # running -----------------------------------------------------------------------------
    async def run(
        self,
        command: str | Sequence[str],
        hosts: Iterable[str | int] | None = None,
        on_output: OutputCallback | None = None,
        *,
        timeout_s: float | None = None,
    ) -> dict[str, HostResult]:
        """Run ``command`` on ``hosts`` (default all); one ``HostResult`` per host name.

        Raises ValueError only for bad input (unknown host, empty command).
        """
        cmd = quote_command(command)
        targets = self.resolve(hosts)
        results = await asyncio.gather(
            *(self._run_host(ep, cmd, on_output, timeout_s) for ep in targets)
        )
        return {r.host: r for r in results}

    async def run_one(
        self,
        host: str | int,
        command: str | Sequence[str],
        on_output: OutputCallback | None = None,
        *,
        timeout_s: float | None = None,
        watch: bool = False,
    ) -> HostResult:
        """``command`` on one host. ``watch``: a long-lived session (a watcher that runs
        until the host goes away) that takes no fan-out slot: one per host would otherwise
        hold every slot of a large pod and starve the short commands."""
        ep = self.endpoint(host)
        return await self._run_host(ep, quote_command(command), on_output, timeout_s, watch)

    async def probe(
        self, hosts: Iterable[str | int] | None = None, timeout_s: float | None = None
    ) -> dict[str, HostResult]:
        """SSH reachability of each host (runs ``true``)."""
        return await self.run("true", hosts, timeout_s=timeout_s or self.connect_timeout_s)

    async def trust(self, host: str | int) -> str:
        """Trust the host's current key (``phantom trust``): from the TPU API when it
        publishes one for this IP, else the key the server offers. Returns the message."""
        ep = self.endpoint(host)
        policy = self.host_keys
        keys = await policy.published(ep)
        if not keys:
            async with asyncio.timeout(self.connect_timeout_s):
                key = await asyncssh.get_server_host_key(
                    ep.connect_ip, ep.port, config=None, proxy_command=self._via(ep)
                )
            if key is None:
                raise SshError(ep, "server offered no host key")
            keys = [key]
        self.drop(ep.name)
        return policy.trust(ep, keys).message

    async def _run_host(
        self,
        ep: HostEndpoint,
        cmd: str,
        on_output: OutputCallback | None,
        timeout_s: float | None,
        watch: bool = False,
    ) -> HostResult:
        async with contextlib.nullcontext() if watch else self._sem:
            start = time.monotonic()
            out, err = _Tail(), _Tail()
            limit = timeout_s if timeout_s is not None else self.command_timeout_s
            # One bound for connecting, opening the session and running: a host that accepts
            # TCP and never answers (or stalls an open connection) costs ``limit``, no more.
            deadline = asyncio.get_running_loop().time() + limit
            try:
                async with asyncio.timeout_at(deadline):
                    proc = await self._open_process(ep, cmd)
            except SshError as exc:
                return HostResult(
                    host=ep.name, ok=False, elapsed_s=time.monotonic() - start, error=str(exc)
                )
            except TimeoutError:
                self.drop(ep.name)
                return self._fail(ep, start, out, err, f"no SSH session within {limit}s")
            try:
                async with asyncio.timeout_at(deadline):
                    await asyncio.gather(
                        _pump(proc.stdout, ep.name, "stdout", out, on_output),
                        _pump(proc.stderr, ep.name, "stderr", err, on_output),
                    )
                    completed = await proc.wait()
            except TimeoutError:
                with contextlib.suppress(Exception):
                    proc.send_signal("TERM")  # sshd delivers it; closing alone leaves it running
                proc.close()
                return self._fail(ep, start, out, err, f"command timed out after {limit}s")
            except (asyncssh.Error, OSError) as exc:
                self.drop(ep.name)
                reason = getattr(exc, "reason", "") or str(exc) or type(exc).__name__
                return self._fail(ep, start, out, err, f"connection lost during command: {reason}")
            elapsed = time.monotonic() - start
            status = completed.exit_status
            if status is None or (status == -1 and completed.exit_signal):
                if not completed.exit_signal:
                    # A command killed by a signal (a VM's shutdown SIGTERM) leaves the
                    # connection fine, and a VM shutting down accepts no new one.
                    self.drop(ep.name)
                sig = completed.exit_signal[0] if completed.exit_signal else "no exit status"
                why = (
                    f"killed by signal {sig}"
                    if completed.exit_signal
                    else "connection lost during command"
                )
                return self._fail(ep, start, out, err, why, status=None)
            error = ""
            if status != 0:
                last = _last_line(err) or _last_line(out)  # 2>&1 puts the reason on stdout
                error = f"{ep.label}: exit status {status}" + (f": {last}" if last else "")
            return HostResult(
                host=ep.name,
                ok=status == 0,
                exit_status=status,
                elapsed_s=elapsed,
                stdout_tail=out.text(),
                stderr_tail=err.text(),
                error=error,
            )

    async def _open_process(self, ep: HostEndpoint, cmd: str) -> asyncssh.SSHClientProcess[str]:
        for attempt in range(2):
            conn = await self._cached(ep)
            try:
                self.sessions_opened += 1
                # No input, as `ssh -n`: the host's sshd closes the command's stdin at once,
                # one pipe less a session on its side (a thousand watchers, a thousand).
                return await conn.create_process(
                    cmd, stdin=asyncssh.DEVNULL, encoding="utf-8", errors="replace"
                )
            except (asyncssh.Error, OSError) as exc:
                # The command never started: a stale cached connection may be retried once.
                self.drop(ep.name)
                if attempt:
                    reason = getattr(exc, "reason", "") or str(exc) or type(exc).__name__
                    raise HostUnreachable(ep, f"could not open a session: {reason}") from None
        raise AssertionError("unreachable")  # pragma: no cover

    @staticmethod
    def _fail(
        ep: HostEndpoint,
        start: float,
        out: _Tail,
        err: _Tail,
        why: str,
        status: int | None = None,
    ) -> HostResult:
        return HostResult(
            host=ep.name,
            ok=False,
            exit_status=status,
            elapsed_s=time.monotonic() - start,
            stdout_tail=out.text(),
            stderr_tail=err.text(),
            error=f"{ep.label}: {why}",
        )


_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def _last_line(tail: _Tail, limit: int = 300) -> str:
    """The last non-blank output line, without terminal colours, for one-line errors."""
    for line in reversed(tail.lines):
        text = _ANSI.sub("", line).strip()
        if text:
            return text if len(text) <= limit else text[: limit - 3] + "..."
    return ""


async def _pump(
    stream: asyncssh.SSHReader[str],
    host: str,
    name: str,
    tail: _Tail,
    on_output: OutputCallback | None,
) -> None:
    async for line in stream:
        if not line:  # the reader yields "" at EOF; a blank line is "\n"
            continue
        tail.add(line)
        if on_output is not None:
            try:
                res = on_output(host, name, line.rstrip("\n"))
                if inspect.isawaitable(res):
                    await res
            except Exception:  # a broken subscriber must not fail the command
                log.exception("on_output callback failed")


__all__ = [
    "AuthFailed",
    "HostKeyRefused",
    "HostUnreachable",
    "SshError",
    "SshFanout",
    "proxy_argv",
    "quote_command",
    "resolve_hosts",
]
