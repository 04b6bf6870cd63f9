"""Run many short Python entry points as separate processes without paying an interpreter
start-up for each: one fresh interpreter (the *fork server*) imports the standard library
and the third-party modules they all import, then forks one child per run.

Each child is a process of its own, as ``python -c CODE ARGS`` would be: its own cwd,
environment, argv, stdin (/dev/null), stdout and stderr (files the caller reads back) and
exit code; it ends through the interpreter's normal exit (atexit handlers, flushed
streams). What it does not get again is what the server preloaded (``PRELOAD``: the
standard library and fsspec, never a module of this repository, which every child imports
afresh with its own environment, nor torch, SB3, jax, wandb or ray, which the server
refuses to hold). Used where a test runs the same entry points dozens of times to check
how they reject bad input (tests/engine/test_bad_input.py: 127 runs, ~0.2 s of CPU each
as fresh interpreters).
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

# Imported once by the server: what engine.train, engine.sweep, engine.distributed and
# benchmarks.engine_suite import from outside this repository before they parse argv.
PRELOAD = [
    "argparse",
    "asyncio",
    "ast",
    "base64",
    "bisect",
    "bz2",
    "calendar",
    "concurrent.futures",
    "configparser",
    "contextvars",
    "copy",
    "csv",
    "ctypes",
    "dataclasses",
    "datetime",
    "difflib",
    "dis",
    "email.parser",
    "fcntl",
    "fsspec",
    "gettext",
    "glob",
    "gzip",
    "hashlib",
    "heapq",
    "importlib.metadata",
    "inspect",
    "json",
    "linecache",
    "locale",
    "logging",
    "lzma",
    "math",
    "platform",
    "queue",
    "random",
    "runpy",
    "select",
    "selectors",
    "shlex",
    "shutil",
    "signal",
    "socket",
    "ssl",
    "string",
    "struct",
    "subprocess",
    "tempfile",
    "textwrap",
    "threading",
    "tokenize",
    "traceback",
    "typing",
    "uuid",
    "weakref",
    "zipfile",
    "zlib",
]
HEAVY = ("torch", "stable_baselines3", "jax", "wandb", "ray")

SERVER = r"""
import importlib, json, os, sys
for name in sys.argv[1].split():
    importlib.import_module(name)
held = [m for m in sys.argv[2].split() if m in sys.modules]
if held:
    raise SystemExit(f"fork server: preloading imported {held}")
del importlib, name, held
requests, replies = sys.stdin.buffer, os.fdopen(os.dup(1), "w", buffering=1)
while line := requests.readline():
    req = json.loads(line)
    sys.stdout.flush(); sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the child: becomes the process the request describes
        del requests, replies
        os.setpgid(0, 0)
        for fd, path, flags in ((0, os.devnull, os.O_RDONLY),
                                (1, req["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
                                (2, req["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)):
            opened = os.open(path, flags, 0o644)
            os.dup2(opened, fd)
            os.close(opened)
        os.chdir(req["cwd"])
        os.environ.clear()
        os.environ.update(req["env"])
        sys.argv = ["-c", *req["args"]]
        code = compile(req["code"], "<string>", "exec")
        scope = {"__name__": "__main__", "__builtins__": __builtins__}
        del line, req, pid
        exec(code, scope)
        raise SystemExit(0)
    replies.write(json.dumps({"pid": pid}) + "\n")
    _, status = os.waitpid(pid, 0)
    replies.write(json.dumps({"code": os.waitstatus_to_exitcode(status)}) + "\n")
"""


class ForkServer:
    """One server process; ``run`` is ``subprocess.run([python, "-c", code, *args], ...)``
    with ``capture_output=True, text=True``, one run at a time."""

    def __init__(self, cwd: Path, env: Mapping[str, str]) -> None:
        self._dir = Path(tempfile.mkdtemp(prefix="phantom-forkrun-"))
        self._proc = subprocess.Popen(
            [sys.executable, "-c", SERVER, " ".join(PRELOAD), " ".join(HEAVY)],
            cwd=cwd,
            env=dict(env),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        self._pending = b""

    def _reply(self, deadline: float) -> dict[str, int]:
        """The server's next reply line, read from its pipe unbuffered (a buffered reader
        could hold the second reply while select() waits on the pipe for it)."""
        assert self._proc.stdout is not None
        fd = self._proc.stdout.fileno()
        while b"\n" not in self._pending:
            ready, _, _ = select.select([fd], [], [], max(deadline - time.monotonic(), 0))
            if not ready:
                raise TimeoutError
            chunk = os.read(fd, 65536)
            if not chunk:
                raise RuntimeError(f"fork server ended with {self._proc.wait(timeout=10)}")
            self._pending += chunk
        line, _, self._pending = self._pending.partition(b"\n")
        reply: dict[str, int] = json.loads(line)
        return reply

    def run(
        self,
        code: str,
        args: Sequence[str],
        *,
        cwd: Path,
        env: Mapping[str, str],
        timeout: float,
    ) -> subprocess.CompletedProcess[str]:
        assert self._proc.stdin is not None
        out, err = self._dir / "stdout", self._dir / "stderr"
        request = {
            "code": code,
            "args": list(args),
            "cwd": str(cwd),
            "env": dict(env),
            "stdout": str(out),
            "stderr": str(err),
        }
        self._proc.stdin.write(json.dumps(request).encode() + b"\n")
        self._proc.stdin.flush()
        deadline = time.monotonic() + timeout
        pid = self._reply(deadline)["pid"]
        try:
            code_ = self._reply(deadline)["code"]
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):  # it may end as the clock runs out
                os.killpg(pid, signal.SIGKILL)
            self._reply(time.monotonic() + 30)
            raise subprocess.TimeoutExpired(["-c", *args], timeout) from None
        return subprocess.CompletedProcess(
            ["-c", *args], code_, out.read_text(errors="replace"), err.read_text(errors="replace")
        )

    def close(self) -> None:
        """Ends the server (it exits when its stdin closes); kills it if it does not."""
        if self._proc.stdin is not None:
            self._proc.stdin.close()
        try:
            self._proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        if self._proc.stdout is not None:
            self._proc.stdout.close()
        for name in ("stdout", "stderr"):
            (self._dir / name).unlink(missing_ok=True)
        self._dir.rmdir()
