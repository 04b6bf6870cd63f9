"""Trainers under Ray run in processes of their own, so a preemption notice can be honoured.

Why
    When a host is preempted every process on it gets SIGTERM, the raylet included, and a
    raylet going down takes its worker processes with it at once (measured: a Ray task with
    its own SIGTERM handler is gone before the handler runs). A trainer that is itself the
    Ray worker therefore never gets to write its notice checkpoint. A trainer in a child
    process, in a session of its own, survives the raylet, gets the host's SIGTERM (and,
    through ``PR_SET_PDEATHSIG``, a SIGTERM when its parent dies for any other reason),
    writes its checkpoint and exits 75.

How
    Each Ray worker that runs trainers keeps one *zygote*: ``python -m engine.trialproc``,
    which imports torch, SB3 and the engine once and then forks one trainer per request
    (forking a single-threaded process that has only imported them is safe). With Tune's
    actor reuse the imports are paid once per actor, not once per trial. A trainer reports
    through an events file (JSON lines, appended) that the worker tails; the zygote reports
    each trainer's pid and exit code on its stdout. When the worker dies, the zygote sees
    EOF on its stdin and exits, and its trainers get their parent-death SIGTERM.

    A request names a function (``"module:function"``) called in the trainer process as
    ``function(args, events, notice)``; it returns a result dict or raises
    ``TrainingPreempted`` (exit 75), ``UsageError`` (exit 2) or anything else (exit 1,
    traceback on stderr).
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import selectors
import shutil
import signal
import subprocess
import sys
import threading
import time
import traceback
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from engine.exit_codes import EX_FAILURE, EX_OK, EX_PREEMPTED, EX_USAGE

# Imported by the zygote before it forks; trainers start with them loaded. torch imports
# torch._dynamo (and with it sympy) and torch.onnx lazily at a model's first update: about
# 1 s per trainer if left to each fork (measured), so they are here too.
PRELOAD = (
    "numpy",
    "torch",
    "torch._dynamo",
    "torch.onnx",
    "gymnasium",
    "stable_baselines3",
    "engine.envs",
    "engine.metrics",
    "engine.tracking",
    "engine.trainer",
    "engine.train",
    "engine.distributed",
    "engine.sweep_tune",
)
# BLAS pools started at import would be threads of the zygote at fork time; trainers are
# single-threaded numpy users anyway (torch's own threads come from --torch-threads)
_SINGLE_THREADED = {"OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


class EventWriter:
    """Append-only JSON-lines file a trainer reports through."""

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)

    def emit(self, event: str, **data: Any) -> None:
        line = json.dumps({"event": event, "unix": time.time(), **data}, default=str)
        with open(self.path, "a") as fh:
            fh.write(line + "\n")


def describe(args: dict[str, Any], events: EventWriter, notice: Any) -> dict[str, Any]:
    """A target that reports what a trainer process sees (for tests and operators)."""
    import jax

    return {
        "pid": os.getpid(),
        "sid": os.getsid(0),
        "ppid": os.getppid(),
        "JAX_PLATFORMS": os.environ.get("JAX_PLATFORMS"),
        "jax_platforms": jax.config.jax_platforms,  # type: ignore[attr-defined]
        "env": {k: os.environ.get(k) for k in args.get("env", [])},
    }


# ---------------------------------------------------------------------------------- trainer


def _child(request: dict[str, Any]) -> int:
    """Body of a forked trainer; returns its exit code."""
    from engine.envvars import apply_jax_platform
    from engine.logs import log
    from engine.notice import PreemptionNotice, TrainingPreempted, set_parent_death_signal
    from engine.trainconfig import UsageError

    os.setsid()  # out of the worker's process group: a group kill of the worker spares us
    set_parent_death_signal(signal.SIGTERM)
    if os.getppid() == 1:  # the zygote died before the line above: act on it
        os.kill(os.getpid(), signal.SIGTERM)
    events = EventWriter(request["events"])
    notice = PreemptionNotice()
    with notice.installed():
        try:
            apply_jax_platform()
            module, _, name = str(request["target"]).partition(":")
            function = getattr(importlib.import_module(module), name)
            result = function(request.get("args", {}), events, notice)
            events.emit("result", result=result)
            return EX_OK
        except TrainingPreempted as exc:
            events.emit("preempted", step=exc.step, uri=exc.uri, seconds=exc.seconds)
            return EX_PREEMPTED
        except UsageError as exc:
            log(f"error: {exc}")
            events.emit("usage_error", message=str(exc))
            return EX_USAGE
        except BaseException as exc:  # the trainer's own failure: report it, never hang
            traceback.print_exc()
            events.emit("error", message=f"{type(exc).__name__}: {exc}"[:2000])
            return EX_FAILURE


def _fork_trainer(request: dict[str, Any], reply: Any) -> int:
    pid = os.fork()
    if pid:
        return pid
    code = EX_FAILURE
    try:
        os.close(reply.fileno())  # the zygote's reply channel is not ours
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.dup2(2, 1)  # prints go to the worker's log, never into the reply channel
        code = _child(request)
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)  # never run the zygote's own cleanup in the child


def zygote_main() -> int:
    """Preload, then serve fork requests from stdin until EOF (the worker died or closed it)."""
    reply = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    for module in PRELOAD:
        importlib.import_module(module)
    threads = len(os.listdir("/proc/self/task")) if os.path.isdir("/proc/self/task") else 1
    if threads > 1:  # forking a multi-threaded process can copy a held lock into a trainer
        print(
            f"[engine] warning: trainer zygote has {threads} threads before forking",
            file=sys.stderr,
        )
    reply.write(json.dumps({"ready": True, "pid": os.getpid(), "threads": threads}) + "\n")
    children: dict[int, str] = {}
    selector = selectors.DefaultSelector()
    selector.register(0, selectors.EVENT_READ)
    pending = b""
    while True:
        if selector.select(timeout=0.1 if children else 1.0):
            data = os.read(0, 1 << 16)
            if not data:
                # the worker is gone: exit now; trainers get their parent-death SIGTERM
                return 0
            pending += data
            while b"\n" in pending:
                line, pending = pending.split(b"\n", 1)
                request = json.loads(line)
                pid = _fork_trainer(request, reply)
                children[pid] = request["id"]
                reply.write(json.dumps({"id": request["id"], "pid": pid}) + "\n")
        while children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            code = os.waitstatus_to_exitcode(status)
            reply.write(json.dumps({"id": children.pop(pid, "?"), "exit": code}) + "\n")


# ---------------------------------------------------------------------------------- worker side


class TrainerHandle:
    """One trainer process as seen from the Ray worker that asked for it."""

    def __init__(self, owner: TrainerProcesses, request_id: str, events: Path) -> None:
        self.owner = owner
        self.id = request_id
        self.events_path = events
        self._offset = 0
        self.pid: int | None = None

    def new_events(self) -> Iterator[dict[str, Any]]:
        """Events appended since the last call (complete lines only)."""
        try:
            with open(self.events_path, "rb") as fh:
                fh.seek(self._offset)
                data = fh.read()
        except FileNotFoundError:
            return
        end = data.rfind(b"\n") + 1
        self._offset += end
        for line in data[:end].splitlines():
            with contextlib.suppress(ValueError):
                yield json.loads(line)

    def exit_code(self) -> int | None:
        return self.owner.exit_code(self.id)

    def stop(self) -> None:
        """Give the trainer a notice (it checkpoints and exits 75)."""
        if self.pid is not None and self.exit_code() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGTERM)

    def close(self) -> None:
        """Forget the events file (after the trainer has exited)."""
        with contextlib.suppress(OSError):
            self.events_path.unlink()


_DIR_PREFIX = "phantom-trainers-"


def remove_stale_dirs(parent: Path) -> list[Path]:
    """Remove the event dirs of processes that are gone; the removed dirs.

    A process's dir goes with ``TrainerProcesses.close``, but a Ray worker killed by
    ``ray stop`` or a preemption never gets there, and its dir (the events of trainers it
    had) would stay in the host's TMPDIR for good.
    """
    removed = []
    for path in parent.glob(f"{_DIR_PREFIX}*"):
        pid = path.name.removeprefix(_DIR_PREFIX)
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            os.kill(int(pid), 0)
            continue  # alive (or another user's): not ours to judge
        except ProcessLookupError:
            pass
        except PermissionError:
            continue
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return removed


class TrainerProcesses:
    """The zygote of this process (started on first use) and the trainers it forked."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._proc: subprocess.Popen[str] | None = None
        self._pids: dict[str, int] = {}
        self._exits: dict[str, int] = {}
        self._dir = Path(os.environ.get("TMPDIR", "/tmp")) / f"{_DIR_PREFIX}{os.getpid()}"

    def _start(self) -> subprocess.Popen[str]:
        env = {**_SINGLE_THREADED, **os.environ, "PYTHONPATH": _engine_pythonpath()}
        proc = subprocess.Popen(
            [sys.executable, "-m", "engine.trialproc"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        assert proc.stdout is not None
        ready = proc.stdout.readline()
        if not ready.startswith('{"ready"'):
            proc.kill()
            raise RuntimeError(f"trainer zygote did not start (got {ready[:200]!r})")
        threading.Thread(target=self._read_replies, args=(proc,), daemon=True).start()
        return proc

    def _read_replies(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            with contextlib.suppress(ValueError), self._cond:
                msg = json.loads(line)
                if "pid" in msg:
                    self._pids[msg["id"]] = int(msg["pid"])
                if "exit" in msg:
                    self._exits[msg["id"]] = int(msg["exit"])
                self._cond.notify_all()
        with self._cond:  # zygote gone: trainers it had are gone from our view too
            for request_id in self._pids:
                self._exits.setdefault(request_id, EX_FAILURE)
            self._cond.notify_all()

    def start(self, target: str, args: dict[str, Any]) -> TrainerHandle:
        request_id = uuid.uuid4().hex[:12]
        if not self._dir.is_dir():
            remove_stale_dirs(self._dir.parent)
            self._dir.mkdir(parents=True, exist_ok=True)
        events = self._dir / f"{request_id}.jsonl"
        request = {"id": request_id, "target": target, "args": args, "events": str(events)}
        with self._cond:
            if self._proc is None or self._proc.poll() is not None:
                self._proc = self._start()
            assert self._proc.stdin is not None
            self._proc.stdin.write(json.dumps(request) + "\n")
            self._proc.stdin.flush()
            handle = TrainerHandle(self, request_id, events)
            deadline = time.monotonic() + 60
            while request_id not in self._pids and request_id not in self._exits:
                if not self._cond.wait(timeout=max(0.0, deadline - time.monotonic())):
                    raise RuntimeError("trainer zygote did not fork within 60 s")
            handle.pid = self._pids.get(request_id)
        return handle

    def exit_code(self, request_id: str) -> int | None:
        with self._lock:
            return self._exits.get(request_id)

    @property
    def zygote_pid(self) -> int | None:
        return None if self._proc is None else self._proc.pid

    def close(self, timeout: float = 30.0) -> None:
        """Close the zygote's input: it exits, and trainers still running get their notice."""
        with self._cond:
            proc, self._proc = self._proc, None
        if proc is not None and proc.stdin is not None:
            proc.stdin.close()
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        with contextlib.suppress(OSError):
            self._dir.rmdir()  # empty once every handle is closed


_PROCESSES: TrainerProcesses | None = None
_PROCESSES_LOCK = threading.Lock()


def trainer_processes() -> TrainerProcesses:
    """This process's trainer launcher (one zygote per process)."""
    global _PROCESSES
    with _PROCESSES_LOCK:
        if _PROCESSES is None:
            _PROCESSES = TrainerProcesses()
        return _PROCESSES


def _engine_pythonpath() -> str:
    root = str(Path(__file__).resolve().parent.parent)
    rest = os.environ.get("PYTHONPATH", "")
    return f"{root}{os.pathsep}{rest}" if rest else root


if __name__ == "__main__":
    sys.exit(zygote_main())
