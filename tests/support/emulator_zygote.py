"""Start the emulator daemons of the tests without an interpreter start-up and the same
imports for each: one *zygote* per test process imports what every daemon imports from
outside this repository (grpc, the TPU API's protobufs, asyncssh, aiohttp, cryptography),
then forks one child per daemon.

A fast run starts about 135 daemons (98 pods, 27 GKE clusters, 10 W&B servers); the pod
daemon's imports alone cost ~0.45 s of CPU each (google.cloud.tpu_v2 half of it).

Each child is the process ``control.spawn`` would have started: its own pid and session,
stdin /dev/null, stdout and stderr appended to the daemon's log, its run dir as cwd, the
environment the caller gives (or this process's), and ``python -m emulators.X ARGS`` run
by runpy, which imports this repository's modules afresh in the child (the zygote never
holds one). It ends through the interpreter's normal exit. ``spawn`` returns a handle with
the ``Popen`` surface that ``control.wait_up`` and ``control.stop_spawned`` use (pid,
poll, wait, returncode); the zygote reaps the child and reports its exit status.

Installed by tests/conftest.py over ``emulators.kit.control.spawn``; any other argv goes
to the original.
"""

from __future__ import annotations

import atexit
import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping
from typing import Any

from emulators.kit import control
from emulators.kit.layout import DaemonLayout

PRELOAD = [
    "asyncio",
    "argparse",
    "json",
    "signal",
    "socket",
    "ssl",
    "subprocess",
    "yaml",
    "grpc",
    "grpc.aio",
    "google.protobuf",
    "google.cloud.tpu_v2",
    "asyncssh",
    "aiohttp",
    "aiohttp.web",
    "cryptography.x509",
]

ARGV_PADDING = 8192  # room in the zygote's argv area for a child's command line (see SERVER)

SERVER = r"""
import importlib, json, os, select, signal, sys
ARGV_ROOM = len(b"\0".join(a.encode() for a in sys.argv)) - 1
for name in sys.argv[1].split():
    try:
        importlib.import_module(name)
    except ImportError:
        pass
mine = [m for m in sys.modules if m.split(".")[0] in ("emulators", "console", "engine", "tests")]
if mine:
    raise SystemExit(f"emulator zygote: preloading imported {mine[:5]}")
wake_r, wake_w = os.pipe()
os.set_blocking(wake_w, False)
signal.set_wakeup_fd(wake_w)
signal.signal(signal.SIGCHLD, lambda *_: None)
requests = sys.stdin.buffer.fileno()
replies = os.fdopen(os.dup(1), "w", buffering=1)
pending = b""
while True:
    ready, _, _ = select.select([requests, wake_r], [], [])
    if wake_r in ready:
        os.read(wake_r, 4096)
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            replies.write(json.dumps({"exited": pid, "code": os.waitstatus_to_exitcode(status)}) + "\n")
    if requests not in ready:
        continue
    chunk = os.read(requests, 65536)
    if not chunk:
        break
    pending += chunk
    while b"\n" in pending:
        line, _, pending = pending.partition(b"\n")
        req = json.loads(line)
        sys.stdout.flush(); sys.stderr.flush()
        if len(b"\0".join(a.encode() for a in req["argv"])) >= ARGV_ROOM:
            replies.write(json.dumps({"pid": 0}) + "\n")
            continue
        pid = os.fork()
        if pid == 0:  # the child: becomes `python -m MODULE ARGS` in its own session
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            os.setsid()
            null = os.open(os.devnull, os.O_RDONLY)
            log = os.open(req["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            os.dup2(null, 0); os.dup2(log, 1); os.dup2(log, 2)
            os.closerange(3, os.sysconf("SC_OPEN_MAX"))
            os.chdir(req["cwd"])
            os.environ.clear()
            os.environ.update(req["env"])
            # /proc/PID/cmdline says `python -m MODULE ARGS`, as the clients check (pid reuse
            # guard) and `ps` shows: rewritten in place in this process's argv area, which
            # the padding argument of the zygote's own command line keeps large enough
            import ctypes
            stat = open("/proc/self/stat").read().rsplit(")", 1)[1].split()
            start, end = int(stat[45]), int(stat[46])
            title = b"\0".join(a.encode() for a in req["argv"]) + b"\0"
            ctypes.memmove(start, title.ljust(end - start, b"\0"), end - start)
            sys.path[0] = req["cwd"]
            sys.argv = [req["module"], *req["args"]]
            import runpy
            del requests, replies, pending, line, chunk, ready, req, wake_r, wake_w
            runpy.run_module(sys.argv[0], run_name="__main__", alter_sys=True)
            raise SystemExit(0)
        replies.write(json.dumps({"pid": pid}) + "\n")
"""


class Zygote:
    """One zygote process and the thread that reads its replies."""

    def __init__(self) -> None:
        self._proc = subprocess.Popen(
            [sys.executable, "-c", SERVER, " ".join(PRELOAD), " " * ARGV_PADDING],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            start_new_session=True,
        )
        self._cond = threading.Condition()
        self._started: list[int] = []
        self.exits: dict[int, int] = {}
        self._lock = threading.Lock()  # one request at a time: replies come in order
        threading.Thread(target=self._read, name="emulator-zygote", daemon=True).start()

    def _read(self) -> None:
        assert self._proc.stdout is not None
        for raw in self._proc.stdout:
            msg = json.loads(raw)
            with self._cond:
                if "pid" in msg:
                    self._started.append(int(msg["pid"]))
                else:
                    self.exits[int(msg["exited"])] = int(msg["code"])
                self._cond.notify_all()
        with self._cond:  # the zygote is gone: nothing more will be reported
            self._proc.wait()
            self._cond.notify_all()

    @property
    def alive(self) -> bool:
        return self._proc.poll() is None

    def start(
        self, module: str, args: list[str], cwd: str, env: Mapping[str, str], log: str
    ) -> int:
        request = {
            "argv": [sys.executable, "-m", module, *args],
            "module": module,
            "args": args,
            "cwd": cwd,
            "env": dict(env),
            "log": log,
        }
        with self._lock:
            assert self._proc.stdin is not None
            with self._cond:
                self._started.clear()
            self._proc.stdin.write(json.dumps(request).encode() + b"\n")
            self._proc.stdin.flush()
            with self._cond:
                if not self._cond.wait_for(lambda: self._started or not self.alive, 60):
                    raise RuntimeError("the emulator zygote did not answer within 60 s")
                if not self._started:
                    raise RuntimeError(f"the emulator zygote ended ({self._proc.returncode})")
                return self._started[0]  # 0: the command line does not fit, not started

    def wait_exit(self, pid: int, timeout: float | None) -> int | None:
        with self._cond:
            self._cond.wait_for(lambda: pid in self.exits or not self.alive, timeout)
            return self.exits.get(pid)

    def close(self) -> None:
        if self._proc.stdin is not None:
            self._proc.stdin.close()
        try:
            self._proc.wait(10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()


class ZygoteChild:
    """The part of ``subprocess.Popen`` that the emulators' clients use, for a daemon the
    zygote forked (not a child of this process: the zygote reaps it)."""

    def __init__(self, zygote: Zygote, pid: int, args: list[str]) -> None:
        self._zygote = zygote
        self.pid = pid
        self.args = args
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self._zygote.exits.get(self.pid)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            self.returncode = self._zygote.wait_exit(self.pid, timeout)
        if self.returncode is None:
            if not control.pid_alive(self.pid):  # the zygote died before it could say
                self.returncode = -9
                return self.returncode
            raise subprocess.TimeoutExpired(self.args, timeout or 0)
        return self.returncode


_zygote: Zygote | None = None
_zygote_lock = threading.Lock()
_original_spawn: Callable[..., Any] = control.spawn


def _get() -> Zygote:
    global _zygote
    with _zygote_lock:
        if _zygote is None or not _zygote.alive:
            _zygote = Zygote()
            atexit.register(_zygote.close)
        return _zygote


def spawn(argv: list[str], layout: DaemonLayout, env: Mapping[str, str] | None = None) -> Any:
    """``control.spawn`` through the zygote for ``python -m emulators.*`` (else the original)."""
    if len(argv) < 3 or argv[0] != sys.executable or argv[1] != "-m":
        return _original_spawn(argv, layout, env)
    if not argv[2].startswith("emulators."):
        return _original_spawn(argv, layout, env)
    zygote = _get()
    pid = zygote.start(
        argv[2],
        argv[3:],
        str(layout.run_dir),
        dict(os.environ if env is None else env),
        str(layout.log_file),
    )
    if pid == 0:
        return _original_spawn(argv, layout, env)
    return ZygoteChild(zygote, pid, argv)


def install() -> None:
    control.spawn = spawn  # type: ignore[assignment]
