"""Thin client for the pod emulator daemon (stdlib only, no grpc/asyncssh).

Used by tests, scripts, the ``phantom pod`` CLI and the console's local
provider hook. The daemon is ``python -m console.emulator serve``; this module
spawns it detached and talks to it over a JSON-lines unix socket.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from console.emulator.layout import (
    DEFAULT_HOSTS,
    DEFAULT_READY_DELAY,
    DEFAULT_SSH_PORT,
    MAX_HOSTS,
    RunLayout,
    host_ip,
)
from console.emulator.procs import find_marked, kill_marked, marker_value


class PodError(Exception):
    """A pod operation failed; ``exit_code`` is what the CLI returns."""

    exit_code = 1


class PodUsageError(PodError):
    """Bad input (unknown host, bad flag value): exit code 2."""

    exit_code = 2


class PodNotRunning(PodError):
    pass


class PodAlreadyRunning(PodError):
    def __init__(self, message: str, pid: int) -> None:
        super().__init__(message)
        self.pid = pid


class PortInUse(PodUsageError):
    pass


@dataclass(frozen=True)
class HostInfo:
    index: int
    name: str
    ip: str
    ssh_port: int
    state: str
    host_key_fingerprint: str
    host_key: str = ""  # "ssh-ed25519 AAAA..." while the host exists

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> HostInfo:
        return cls(
            index=int(data["index"]),
            name=str(data["name"]),
            ip=str(data["ip"]),
            ssh_port=int(data["ssh_port"]),
            state=str(data["state"]),
            host_key_fingerprint=str(data.get("host_key_fingerprint", "")),
            host_key=str(data.get("host_key", "")),
        )


@dataclass(frozen=True)
class PodInfo:
    """Parsed ``pod status --json``."""

    run_dir: Path
    pid: int
    tpu_api: str
    project: str
    zone: str
    node_name: str
    node_path: str
    accelerator_type: str
    state: str
    ssh_user: str
    client_key: Path
    known_hosts: Path
    bucket: Path
    hosts: tuple[HostInfo, ...]
    run_id: str = ""
    events: tuple[dict[str, Any], ...] = field(default=())

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> PodInfo:
        return cls(
            run_dir=Path(data["run_dir"]),
            pid=int(data["pid"]),
            tpu_api=str(data["tpu_api"]),
            project=str(data["project"]),
            zone=str(data["zone"]),
            node_name=str(data["node_name"]),
            node_path=str(data["node_path"]),
            accelerator_type=str(data["accelerator_type"]),
            state=str(data["state"]),
            ssh_user=str(data["ssh_user"]),
            client_key=Path(data["client_key"]),
            known_hosts=Path(data["known_hosts"]),
            bucket=Path(data["bucket"]),
            hosts=tuple(HostInfo.from_json(h) for h in data["hosts"]),
            run_id=str(data.get("run_id", "")),
            events=tuple(data.get("events", ())),
        )

    @property
    def parent(self) -> str:
        return f"projects/{self.project}/locations/{self.zone}"

    @property
    def bucket_uri(self) -> str:
        """fsspec URI of the bucket directory (the emulator's stand-in for gs://)."""
        return self.bucket.as_uri()

    @property
    def ssh_port(self) -> int:
        return self.hosts[0].ssh_port

    def host(self, ref: int | str) -> HostInfo:
        """A host by index, name or IP."""
        for h in self.hosts:
            if str(ref) in (str(h.index), h.name, h.ip):
                return h
        raise PodUsageError(f"unknown host {ref!r}: the pod has {[h.name for h in self.hosts]}")

    def ssh_options(self) -> list[str]:
        """OpenSSH ``-o`` options for strict, non-interactive access to any host."""
        return [
            "-i",
            str(self.client_key),
            "-o",
            f"UserKnownHostsFile={self.known_hosts}",
            "-o",
            "StrictHostKeyChecking=yes",
            "-o",
            "BatchMode=yes",
            "-o",
            "IdentitiesOnly=yes",
            "-o",
            "GlobalKnownHostsFile=/dev/null",
            "-o",
            "ConnectTimeout=10",
            "-o",
            "LogLevel=ERROR",
            "-F",
            "/dev/null",
        ]

    def asyncssh_options(self, host: int | str) -> dict[str, Any]:
        """Keyword arguments for ``asyncssh.connect`` to ``host`` (strict host keys)."""
        h = self.host(host)
        return {
            "host": h.ip,
            "port": h.ssh_port,
            "username": self.ssh_user,
            "client_keys": [str(self.client_key)],
            "known_hosts": str(self.known_hosts),
            "config": [],
        }

    def ssh_argv(self, host: int | str, command: str, ssh: str = "/usr/bin/ssh") -> list[str]:
        """argv running ``command`` on ``host`` with the OpenSSH client."""
        h = self.host(host)
        return [
            ssh,
            *self.ssh_options(),
            "-p",
            str(h.ssh_port),
            f"{self.ssh_user}@{h.ip}",
            command,
        ]


def _parse_host_count(hosts: int) -> int:
    if not 1 <= hosts <= MAX_HOSTS:
        raise PodUsageError(f"--hosts must be between 1 and {MAX_HOSTS}, got {hosts}")
    return hosts


def request(run_dir: Path | str, payload: dict[str, Any], timeout: float = 30.0) -> dict[str, Any]:
    """Send one JSON request to the daemon and return its JSON reply.

    Raises PodNotRunning if no daemon serves ``run_dir``; PodError/PodUsageError
    if the daemon reports a failure.
    """
    layout = RunLayout(Path(run_dir))
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        try:
            sock.connect(layout.control_address)
        except (ConnectionRefusedError, FileNotFoundError) as exc:
            raise PodNotRunning(f"no pod emulator is running for {run_dir}") from exc
        sock.sendall(json.dumps(payload).encode() + b"\n")
        buf = b""
        while not buf.endswith(b"\n"):
            chunk = sock.recv(65536)
            if not chunk:
                break
            buf += chunk
    finally:
        sock.close()
    if not buf:
        raise PodNotRunning(f"the pod emulator for {run_dir} closed the connection")
    reply: dict[str, Any] = json.loads(buf)
    if not reply.get("ok"):
        cls = PodUsageError if reply.get("code") == 2 else PodError
        raise cls(str(reply.get("error", "unknown error")))
    return reply


def pod_status(run_dir: Path | str) -> PodInfo | None:
    """Current status, or None when no daemon runs for ``run_dir``."""
    try:
        reply = request(run_dir, {"op": "status"})
    except PodNotRunning:
        return None
    return PodInfo.from_json(reply["status"])


def status_json(run_dir: Path | str) -> dict[str, Any] | None:
    try:
        reply = request(run_dir, {"op": "status"})
    except PodNotRunning:
        return None
    status: dict[str, Any] = reply["status"]
    return status


def _port_free(ip: str, port: int) -> bool:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((ip, port))
    except OSError:
        return False
    finally:
        s.close()
    return True


def check_ports(hosts: int, ssh_port: int, api_port: int) -> None:
    """Raise PortInUse naming the first taken port and the flag to change."""
    if ssh_port:
        for i in range(hosts):
            if not _port_free(host_ip(i), ssh_port):
                raise PortInUse(f"port {ssh_port} on {host_ip(i)} is in use; pass --ssh-port")
    if api_port and not _port_free("127.0.0.1", api_port):
        raise PortInUse(f"port {api_port} on 127.0.0.1 is in use; pass --api-port")


def _pid_alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            # Field 3 is the state; a zombie has exited already.
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def _log_tail(layout: RunLayout, lines: int = 20) -> str:
    try:
        text = layout.log_file.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def _daemon_error(layout: RunLayout) -> str:
    """The daemon's own ``error:`` line from its log, else the log tail."""
    tail = _log_tail(layout)
    for line in reversed(tail.splitlines()):
        if "error: " in line:
            return line.split("error: ", 1)[1]
    return tail or "the emulator daemon exited without a message"


def start_pod(
    run_dir: Path | str,
    hosts: int = DEFAULT_HOSTS,
    ssh_port: int = DEFAULT_SSH_PORT,
    api_port: int = 0,
    ready_delay: float = DEFAULT_READY_DELAY,
    timeout: float = 60.0,
    chaos_seed: int | None = None,
    chaos_interval: float | None = None,
    progress: Callable[[str], None] | None = None,
    extra_args: list[str] | None = None,
) -> PodInfo:
    """Spawn the daemon detached for ``run_dir`` and wait until the node is READY.

    ``ssh_port=0`` lets the daemon pick one port free on every host IP and
    ``api_port=0`` a free TPU API port (what tests use).
    """
    _parse_host_count(hosts)
    if ready_delay < 0:
        raise PodUsageError(f"--ready-delay must be >= 0 seconds, got {ready_delay}")
    if chaos_interval is not None and chaos_interval <= 0:
        raise PodUsageError(f"--chaos-interval must be > 0 seconds, got {chaos_interval}")
    layout = RunLayout(Path(run_dir).expanduser().absolute())
    running = pod_status(layout.run_dir)
    if running is not None:
        raise PodAlreadyRunning(
            f"the pod emulator is already running for {layout.run_dir} (pid {running.pid}); "
            "use `pod status` or `pod down`",
            running.pid,
        )
    check_ports(hosts, ssh_port, api_port)
    layout.run_dir.mkdir(parents=True, exist_ok=True)
    argv = [
        sys.executable,
        "-m",
        "console.emulator",
        "serve",
        "--run-dir",
        str(layout.run_dir),
        "--hosts",
        str(hosts),
        "--ssh-port",
        str(ssh_port),
        "--api-port",
        str(api_port),
        "--ready-delay",
        str(ready_delay),
    ]
    if chaos_seed is not None:
        argv += ["--chaos-seed", str(chaos_seed)]
    if chaos_interval is not None:
        argv += ["--chaos-interval", str(chaos_interval)]
    argv += extra_args or []
    with open(layout.log_file, "ab") as log:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,
            close_fds=True,
            cwd=str(layout.run_dir),
        )
    deadline = time.monotonic() + timeout
    last_state = ""
    while True:
        if proc.poll() is not None:
            raise PodError(f"the pod emulator failed to start: {_daemon_error(layout)}")
        info = pod_status(layout.run_dir)
        if info is not None:
            summary = f"{info.state} " + " ".join(f"{h.name}={h.state}" for h in info.hosts)
            if summary != last_state and progress is not None:
                progress(summary)
            last_state = summary
            if info.state == "READY":
                return info
        if time.monotonic() > deadline:
            stop_pod(layout.run_dir)
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            raise PodError(
                f"the pod did not become READY within {timeout:.0f}s "
                f"(last: {last_state or 'no answer'}); see {layout.log_file}"
            )
        time.sleep(0.05)


def _read_pid(layout: RunLayout) -> int | None:
    try:
        return int(layout.pid_file.read_text().strip())
    except (OSError, ValueError):
        return None


def stop_pod(run_dir: Path | str, timeout: float = 30.0) -> bool:
    """Stop the daemon and every process of every host. True if one was running.

    Falls back to SIGKILL of the daemon and a marker sweep, so nothing is left
    behind even if the daemon is wedged.
    """
    layout = RunLayout(Path(run_dir).expanduser().absolute())
    pid = _read_pid(layout)
    was_running = False
    with contextlib.suppress(PodNotRunning):
        reply = request(layout.run_dir, {"op": "shutdown"}, timeout=timeout)
        pid = int(reply.get("pid", pid or 0)) or pid
        was_running = True
    if pid is not None and pid > 0:
        deadline = time.monotonic() + timeout
        while _pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.02)
        if _pid_alive(pid) and _is_our_daemon(pid, layout):
            os.kill(pid, signal.SIGKILL)
            was_running = True
    run_id = read_run_id(layout.run_dir)
    if run_id:
        kill_marked(marker_value(run_id), read_cgroup(layout.run_dir))
    return was_running


def _is_our_daemon(pid: int, layout: RunLayout) -> bool:
    """Guard against pid reuse: only kill a process serving this run dir."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            argv = fh.read().split(b"\0")
    except OSError:
        return False
    return b"console.emulator" in argv and str(layout.run_dir).encode() in argv


def read_run_id(run_dir: Path | str) -> str:
    try:
        return RunLayout(Path(run_dir)).run_id_file.read_text().strip()
    except OSError:
        return ""


def read_cgroup(run_dir: Path | str) -> Path | None:
    """The run's cgroup directory if the daemon uses one."""
    try:
        text = RunLayout(Path(run_dir)).cgroup_file.read_text().strip()
    except OSError:
        return None
    return Path(text) if text else None


def leftover_pids(run_dir: Path | str) -> list[int]:
    """Pids of this run's hosts still alive (should be [] after stop_pod)."""
    run_id = read_run_id(run_dir)
    return find_marked(marker_value(run_id), read_cgroup(run_dir)) if run_id else []


def preempt(run_dir: Path | str, host: int | str) -> PodInfo:
    """Preempt one host (index, name or IP) or ``"all"``; returns the new status."""
    reply = request(run_dir, {"op": "preempt", "host": str(host)})
    return PodInfo.from_json(reply["status"])


def recreate(
    run_dir: Path | str, host: int | str, wait: bool = False, timeout: float = 60.0
) -> PodInfo:
    """Recreate a host or ``"all"`` (fresh sandbox and host key, CREATING then READY)."""
    reply = request(run_dir, {"op": "recreate", "host": str(host)})
    info = PodInfo.from_json(reply["status"])
    if wait:
        info = wait_for(run_dir, lambda p: p.state == "READY", timeout, "state READY")
    return info


def wait_for(
    run_dir: Path | str,
    predicate: Callable[[PodInfo], bool],
    timeout: float = 60.0,
    what: str = "condition",
) -> PodInfo:
    """Poll the status until ``predicate`` holds; TimeoutError names ``what``."""
    deadline = time.monotonic() + timeout
    while True:
        info = pod_status(run_dir)
        if info is None:
            raise PodNotRunning(f"no pod emulator is running for {run_dir}")
        if predicate(info):
            return info
        if time.monotonic() > deadline:
            raise TimeoutError(f"pod did not reach {what} within {timeout}s (state {info.state})")
        time.sleep(0.05)


async def async_pod_status(run_dir: Path | str) -> PodInfo | None:
    return await asyncio.to_thread(pod_status, run_dir)


async def async_preempt(run_dir: Path | str, host: int | str) -> PodInfo:
    return await asyncio.to_thread(preempt, run_dir, host)


async def async_recreate(run_dir: Path | str, host: int | str, wait: bool = False) -> PodInfo:
    return await asyncio.to_thread(recreate, run_dir, host, wait)


async def async_start_pod(run_dir: Path | str, **kwargs: Any) -> PodInfo:
    return await asyncio.to_thread(start_pod, run_dir, **kwargs)


async def async_stop_pod(run_dir: Path | str) -> bool:
    return await asyncio.to_thread(stop_pod, run_dir)
