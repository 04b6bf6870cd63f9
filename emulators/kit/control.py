"""A daemon's lifecycle from the client side, and its JSON-lines control channel.

Client side (stdlib only): spawn the daemon detached, wait until it answers, send it a
request over its control socket, tell whether a pid is still our daemon, stop it.
Daemon side: ``start_control_server`` serves one JSON request per connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from emulators.kit.layout import DaemonLayout, read_text

T = TypeVar("T")
POLL_S = 0.05
SILENT = "the emulator daemon exited without a message"


@dataclass(frozen=True)
class Errors:
    """What an emulator raises: its words ("pod emulator") and its exception classes."""

    what: str
    failed: type[Exception]  # exit 1
    usage: type[Exception]  # exit 2
    not_running: type[Exception]


# --- the control channel ----------------------------------------------------------------


def request(
    address: str, payload: dict[str, Any], timeout: float, errors: Errors, shown: Path | str
) -> dict[str, Any]:
    """Send one JSON request to the daemon at ``address`` and return its JSON reply.

    Raises ``errors.not_running`` (naming ``shown``) if no daemon listens there;
    ``errors.usage``/``errors.failed`` if the daemon reports a failure (code 2 or not).
    """
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    buf = b""
    try:
        try:
            sock.connect(address)
        except (ConnectionRefusedError, FileNotFoundError) as exc:
            raise errors.not_running(f"no {errors.what} is running for {shown}") from exc
        sock.sendall(json.dumps(payload).encode() + b"\n")
        while not buf.endswith(b"\n"):
            chunk = sock.recv(65536)
            if not chunk:
                break
            buf += chunk
    finally:
        sock.close()
    if not buf:
        raise errors.not_running(f"the {errors.what} for {shown} closed the connection")
    reply: dict[str, Any] = json.loads(buf)
    if not reply.get("ok"):
        cls = errors.usage if reply.get("code") == 2 else errors.failed
        raise cls(str(reply.get("error", "unknown error")))
    return reply


Dispatch = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]


async def start_control_server(address: str, dispatch: Dispatch) -> asyncio.Server:
    """Serve ``address``: one JSON line in, ``dispatch``'s reply out, per connection.

    Raises OSError when another daemon already owns the address (its run dir).
    """

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            line = await reader.readline()
            reply = await dispatch(json.loads(line or b"{}"))
        except json.JSONDecodeError as exc:
            reply = {"ok": False, "code": 2, "error": f"bad request: {exc}"}
        try:
            writer.write(json.dumps(reply).encode() + b"\n")
            await writer.drain()
        finally:
            writer.close()

    return await asyncio.start_unix_server(handle, path=address)


# --- the daemon process -------------------------------------------------------------------


def spawn(
    argv: list[str], layout: DaemonLayout, env: Mapping[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """Start the daemon detached (own session, output to its log, cwd its run dir)."""
    with open(layout.log_file, "ab") as log:
        return subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,
            close_fds=True,
            cwd=str(layout.run_dir),
            env=None if env is None else dict(env),
        )


def wait_up(
    proc: subprocess.Popen[bytes],
    ready: Callable[[], T | None],
    timeout: float,
    exited: Callable[[int], Exception],
    timed_out: Callable[[], Exception],
) -> T:
    """Poll ``ready`` until it returns a value; ``exited(returncode)`` if the daemon
    dies first, ``timed_out()`` (which may clean up) once ``timeout`` has passed."""
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            raise exited(proc.returncode)
        value = ready()
        if value is not None:
            return value
        if time.monotonic() > deadline:
            error = timed_out()
            stop_spawned(proc)  # `timed_out` stops a daemon that answers; this one may not yet
            raise error
        time.sleep(POLL_S)


def stop_spawned(proc: subprocess.Popen[bytes], grace: float = 10.0) -> None:
    """Stop a daemon this process spawned and its session (it runs in its own): SIGTERM, so it
    cleans up its children, then SIGKILL of the whole session after ``grace`` seconds. A
    daemon that failed to start must leave nothing running."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(grace)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)  # the session's leftovers (start_new_session)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(grace)


def daemon_error(layout: DaemonLayout, scan: int = 20, show: int = 20, silent: str = SILENT) -> str:
    """The daemon's own ``error:`` line among the last ``scan`` lines of its log,
    else the last ``show`` lines, else ``silent``."""
    try:
        lines = layout.log_file.read_text(errors="replace").splitlines()[-scan:]
    except OSError:
        return silent
    for line in reversed(lines):
        if "error: " in line:
            return line.split("error: ", 1)[1]
    return "\n".join(lines[-show:]) or silent


def pid_alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            # Field 3 is the state; a zombie has exited already.
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def is_our_daemon(pid: int, module: str, run_dir: Path) -> bool:
    """Guard against pid reuse: only ``python -m <module> ... <run_dir>`` is ours."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            argv = fh.read().split(b"\0")
    except OSError:
        return False
    return module.encode() in argv and str(run_dir).encode() in argv


def wait_gone(pid: int, timeout: float) -> bool:
    """Wait up to ``timeout`` for ``pid`` to exit; True if it did."""
    deadline = time.monotonic() + timeout
    while pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    return not pid_alive(pid)


KILL_WAIT_S = 5.0  # SIGKILL is not instant: a stopped daemon must be gone on return


def kill(pid: int) -> None:
    """SIGKILL, and wait until the process is gone (a big one takes a moment to unmap)."""
    os.kill(pid, signal.SIGKILL)
    wait_gone(pid, KILL_WAIT_S)


def terminate(pid: int, timeout: float) -> None:
    """SIGTERM, then SIGKILL if it has not exited within ``timeout``."""
    os.kill(pid, signal.SIGTERM)
    if not wait_gone(pid, timeout):
        kill(pid)


def shut_down(
    layout: DaemonLayout,
    module: str,
    ask: Callable[[], dict[str, Any]],
    not_running: type[Exception],
    timeout: float,
) -> bool:
    """Stop a daemon with a control channel: ask it to shut down (``ask`` sends the
    ``shutdown`` op), wait for it to exit, SIGKILL it if it is wedged and still ours.

    The pid comes from the reply, else the pid file (a daemon whose socket is gone but
    whose process is not). True if a daemon was running. The caller sweeps the run's
    child processes afterwards.
    """
    text = read_text(layout.pid_file)
    pid = int(text) if text.isdigit() else None
    was_running = False
    try:
        reply = ask()
    except not_running:
        pass
    else:
        pid = int(reply.get("pid", pid or 0)) or pid
        was_running = True
    if pid:
        wait_gone(pid, timeout)
        if pid_alive(pid) and is_our_daemon(pid, module, layout.run_dir):
            kill(pid)
            was_running = True
    return was_running
