"""Preemption notice: SIGTERM means "checkpoint at the step you reached, then exit 75".

Spot capacity is taken back with a warning: a GCE spot VM's processes get SIGTERM (ACPI
soft-off) about 30 s before the kill, a GKE pod gets SIGTERM and its grace period. A trainer
that gets SIGTERM:

1. finishes the environment step (or optimizer update) in progress: SB3 is stopped at the
   next callback boundary by ``engine.learning.StepGate`` and the partial rollout is trained
   on, so the model stands exactly at the last step it collected;
2. writes a complete checkpoint at that step through the same atomic, manifest-last
   ``CheckpointStore.save`` as the periodic ones (``"trigger": "notice"`` in its manifest),
   announced by a ``NOTICE.json`` marker in the run directory while it is being written;
3. logs exactly one line (``NOTICE_LINE`` below) and exits with ``EX_PREEMPTED`` (75).

Further SIGTERMs are ignored: in a preemption they come from several sources at once (the
host's shutdown, a dead parent's death signal), and the fastest way out is to finish the
checkpoint. SIGKILL (the grace period running out) can land at any moment: the checkpoint
is published by an atomic rename (or, on object stores, made valid by its manifest, written
last), so the loader never sees half of one; it resumes from the previous complete one.

The log line, for launchers and the console to parse (``NOTICE_LINE_RE``)::

    [engine] preemption notice: checkpoint step=12288 complete at <uri> (0.412s after SIGTERM); exiting 75 (preempted, resumable)
"""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from types import FrameType
from typing import NoReturn

from engine.exit_codes import EX_PREEMPTED

NOTICE_LINE = (
    "preemption notice: checkpoint step={step} complete at {uri} "
    "({seconds:.3f}s after {source}); exiting {code} (preempted, resumable)"
)
NOTICE_LINE_RE = re.compile(
    r"\[engine\] preemption notice: checkpoint step=(?P<step>\d+) complete at (?P<uri>\S+) "
    r"\((?P<seconds>[0-9.]+)s after (?P<source>[A-Za-z_]+)\); exiting (?P<code>\d+) "
    r"\(preempted, resumable\)"
)


def notice_line(step: int, uri: str, seconds: float, source: str) -> str:
    """The one line logged (after ``[engine] ``) once a notice checkpoint is complete."""
    return NOTICE_LINE.format(step=step, uri=uri, seconds=seconds, source=source, code=EX_PREEMPTED)


class TrainingPreempted(Exception):
    """Raised by a trainer after its notice checkpoint is complete.

    ``seconds`` runs from the notice to the checkpoint being complete.
    """

    def __init__(self, step: int, uri: str, seconds: float, source: str) -> None:
        super().__init__(step, uri, seconds, source)  # args: picklable across processes
        self.step, self.uri, self.seconds, self.source = step, uri, seconds, source

    def __str__(self) -> str:
        return notice_line(self.step, self.uri, self.seconds, self.source)


class PreemptionNotice:
    """Whether (and when) this process was told it is about to be preempted.

    ``installed()`` routes SIGTERM here for the duration of a ``with`` block (main thread
    only: Python delivers signals there). ``trigger()`` is the same notice from code.
    """

    def __init__(self, on_first: Callable[[], None] | None = None) -> None:
        self.received_at: float | None = None  # time.monotonic()
        self.received_unix: float | None = None
        self.source = ""
        self.repeats = 0
        self.on_first = on_first  # called inside the signal handler, once

    @property
    def requested(self) -> bool:
        return self.received_at is not None

    def trigger(self, source: str = "notice") -> None:
        if self.received_at is None:
            self.received_at = time.monotonic()
            self.received_unix = time.time()
            self.source = source
        else:
            self.repeats += 1

    def elapsed(self) -> float:
        return 0.0 if self.received_at is None else time.monotonic() - self.received_at

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        first = not self.requested
        self.trigger(signal.Signals(signum).name)
        # os.write: a signal handler may interrupt a print() in progress, and a buffered
        # stream written from inside it raises "reentrant call"
        if first and self.on_first is not None:
            self.on_first()
            return
        if first:
            msg = "[engine] SIGTERM: finishing the current step, then a checkpoint\n"
        elif self.repeats == 1:
            msg = "[engine] SIGTERM again: still writing the checkpoint (ignored)\n"
        else:
            return
        with contextlib.suppress(OSError):
            os.write(2, msg.encode())

    @contextlib.contextmanager
    def installed(self) -> Iterator[PreemptionNotice]:
        """Handle SIGTERM while inside the block; restores the previous handler after.

        Off the main thread nothing is installed (the caller's process must route the
        signal, e.g. ``engine.trialproc`` runs trials in their own process for this).
        """
        if threading.current_thread() is not threading.main_thread():
            yield self
            return
        previous = signal.signal(signal.SIGTERM, self._handle)
        try:
            yield self
        finally:
            signal.signal(signal.SIGTERM, previous)

    @contextlib.contextmanager
    def watched(self, stop_within_s: float, stuck_s: float = 3.0) -> Iterator[PreemptionNotice]:
        """``installed()``, but the notice is taken by a thread of its own, not the main one.

        A Python signal handler runs only between bytecodes on the main thread, so a main
        thread blocked inside a C call (a driver waiting on a dead raylet) never runs it and
        the process lives until the SIGKILL. The C-level handler still writes the signal's
        number to the wakeup fd from any thread; a watcher reads it and acts on the notice
        (``on_first``, as the handler would). If the main thread has not even run its
        (empty) Python handler ``stuck_s`` later, it is stuck; if the block has not ended
        ``stop_within_s`` later, it is not stopping: either way the watcher exits 75 without
        it (``exit_now``). Main thread only, as ``installed()``; no signal mask is touched,
        so the children keep SIGTERM as it was.
        """
        if threading.current_thread() is not threading.main_thread():
            yield self
            return
        reader, writer = socket.socketpair()
        writer.setblocking(False)
        done, main_ran = threading.Event(), threading.Event()
        # the watcher acts on the notice; this only shows the main thread still runs Python
        previous = signal.signal(signal.SIGTERM, lambda signum, frame: main_ran.set())
        previous_fd = signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)

        def give_up(why: str) -> None:
            with contextlib.suppress(OSError):
                os.write(
                    2,
                    f"[engine] preemption notice: {why}; exiting {EX_PREEMPTED} "
                    "(preempted, resumable)\n".encode(),
                )
            exit_now(EX_PREEMPTED, backstop_s=stuck_s)

        def watch() -> None:
            while data := reader.recv(64):
                if signal.SIGTERM not in data:
                    continue
                first = not self.requested
                self._handle(signal.SIGTERM, None)
                if not first:
                    continue
                if not main_ran.wait(stuck_s) and not done.is_set():
                    give_up(f"the main thread is stuck {stuck_s:g}s after SIGTERM")
                if not done.wait(max(0.0, stop_within_s - self.elapsed())):
                    give_up(f"not stopped {stop_within_s:g}s after SIGTERM")

        watcher = threading.Thread(target=watch, name="preemption-notice", daemon=True)
        watcher.start()
        try:
            yield self
        finally:
            done.set()
            signal.set_wakeup_fd(previous_fd)
            signal.signal(signal.SIGTERM, previous)
            writer.close()  # the watcher's recv returns b"": it ends
            watcher.join(timeout=1.0)
            reader.close()

    def reinstall(self) -> None:
        """Take SIGTERM back (``ray.init`` installs a handler of its own that exits)."""
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self._handle)


def exit_now(code: int, backstop_s: float | None = None) -> NoReturn:
    """Exit with ``code`` as ``sys.exit`` would, minus the interpreter's teardown.

    For an entry point that stops on a notice: its checkpoint is complete and every second
    from here is spent out of the grace, while tearing down torch and SB3 (module dicts,
    their C++ destructors) takes 1-1.5 s of CPU here and 3.4 s was seen on a busy emulated
    head, during which the host cannot be recreated. Everything a normal exit does that
    keeps what was recorded still happens, in the same order: other non-daemon threads are
    joined, the atexit handlers run (W&B's teardown, logging's flush, Ray's shutdown), and
    stdout and stderr are flushed.

    Called off the main thread (a notice watcher whose main thread is stuck), the main
    thread is not waited for; ``backstop_s`` bounds the whole exit (a thread or an atexit
    handler stuck on a dead peer) with a bare ``os._exit(code)``.
    """
    if backstop_s is not None:
        backstop = threading.Timer(backstop_s, os._exit, args=(code,))
        backstop.daemon = True
        backstop.start()
    current = threading.current_thread()
    for thread in threading.enumerate():
        if thread is current or thread.daemon or thread is threading.main_thread():
            continue
        thread.join()
    try:
        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(code)


def exit_with(code: int) -> NoReturn:
    """``sys.exit(code)``; at once (``exit_now``) when the code is ``EX_PREEMPTED``."""
    if code == EX_PREEMPTED:
        exit_now(code)
    sys.exit(code)


def set_parent_death_signal(sig: int = signal.SIGTERM) -> bool:
    """Ask Linux to send ``sig`` to this process when its parent (thread) dies.

    A trainer running under a Ray worker uses it so that whatever kills the worker (a
    raylet going down with its host, a task cancelled) reaches the trainer as a notice.
    Returns False where unsupported.
    """
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        pr_set_pdeathsig = 1
        return int(libc.prctl(pr_set_pdeathsig, int(sig), 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


# -- a checkpoint asked for: the notice path without the stop ---------------------------------

# The signal that asks a trainer for a checkpoint now (SIGUSR1 is Ray Tune's: its driver stops
# on it). Only a trainer that registered itself (``ASK_DIR``) is ever sent it: a process with
# no handler would die of it.
ASK_SIGNAL = signal.SIGUSR2
ASK_DIR_ENV = "PHANTOM_ASK_DIR"  # default: ~/.cache/phantom/ask
JOB_ID_ENV = "PHANTOM_JOB_ID"  # the console's job id, in every process of a job it submitted
ASKED_LINE = (
    "checkpoint asked: step={step} complete at {uri} ({seconds:.3f}s after {source}); training on"
)
ASKED_LINE_RE = re.compile(
    r"\[engine\] checkpoint asked: step=(?P<step>\d+) complete at (?P<uri>\S+) "
    r"\((?P<seconds>[0-9.]+)s after (?P<source>[A-Za-z0-9_]+)\); training on"
)


def ask_dir() -> str:
    """Where the askable trainers of this host (of this user) register."""
    return os.environ.get(ASK_DIR_ENV) or os.path.join(
        os.path.expanduser("~"), ".cache", "phantom", "ask"
    )


def _start_time(pid: int) -> str:
    """The process's start time in clock ticks since boot (``/proc/<pid>/stat`` field 22):
    with the pid, it names one process even after the pid is reused."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return ""


class CheckpointAsk:
    """Whether this trainer was asked for a checkpoint now (``ASK_SIGNAL``, or ``trigger()``).

    The notice's path without the stop: the step gate ends collection at the next step, the
    partial rollout is trained on, a complete checkpoint at that step is written (``"trigger":
    "asked"`` in its manifest), one line is logged (``ASKED_LINE``) and training goes on.
    Asks that arrive while one is being answered are that one.

    A trainer of a job the console submitted (``JOB_ID_ENV`` set) registers while it can be
    asked: ``<ask_dir>/<pid>.ask`` holds the job id, the run name and the process's start
    time; when it has answered, ``<pid>.done`` holds ``step uri seconds`` (written whole,
    by a rename, and left for the asker to read and remove). The console asks over SSH: it signals the registered pids whose start time
    still matches and reads their answers (``console.services.backends.tpu_vm``).
    """

    def __init__(self) -> None:
        self.asked_at: float | None = None  # time.monotonic()
        self.source = ""
        self.answered = 0
        self._registered: str | None = None

    @property
    def pending(self) -> bool:
        return self.asked_at is not None

    def trigger(self, source: str = "asked") -> None:
        if self.asked_at is None:
            self.asked_at = time.monotonic()
            self.source = source

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.trigger(signal.Signals(signum).name)

    def answer(self, step: int, uri: str) -> str:
        """The ask is answered by the checkpoint at ``step``: the line to log; the answer is
        left for whoever asked."""
        seconds = 0.0 if self.asked_at is None else time.monotonic() - self.asked_at
        line = ASKED_LINE.format(step=step, uri=uri, seconds=seconds, source=self.source)
        self.asked_at, self.source = None, ""
        self.answered += 1
        if self._registered is not None:
            done = f"{self._registered}.done"
            with contextlib.suppress(OSError):
                with open(done + ".tmp", "w") as fh:
                    fh.write(f"{step} {uri} {seconds:.3f}\n")
                os.replace(done + ".tmp", done)
        return line

    @contextlib.contextmanager
    def installed(self, run_name: str) -> Iterator[CheckpointAsk]:
        """Take ``ASK_SIGNAL`` while inside the block and, for a job of the console's,
        register where the console finds it (main thread only, as ``PreemptionNotice``)."""
        if threading.current_thread() is not threading.main_thread():
            yield self
            return
        previous = signal.signal(ASK_SIGNAL, self._handle)
        job = os.environ.get(JOB_ID_ENV, "")
        try:
            if job:
                self._register(job, run_name)
            yield self
        finally:
            self._unregister()
            # an ask that raced the unregistering must not kill a trainer that is finishing
            late = signal.SIG_IGN if previous in (signal.SIG_DFL, None) else previous
            signal.signal(ASK_SIGNAL, late)

    def _register(self, job: str, run_name: str) -> None:
        base = os.path.join(ask_dir(), str(os.getpid()))
        try:
            os.makedirs(ask_dir(), exist_ok=True)
            with open(base + ".ask.tmp", "w") as fh:
                fh.write(f"{job}\n{run_name}\n{_start_time(os.getpid())}\n")
            os.replace(base + ".ask.tmp", base + ".ask")
        except OSError:
            return  # a trainer that cannot register trains on; it cannot be asked
        self._registered = base
        atexit.register(self._unregister)  # exit_now runs the atexit handlers too

    def _unregister(self) -> None:
        """No longer askable; an answer stays for its asker (who removes it once read)."""
        base, self._registered = self._registered, None
        if base is not None:
            with contextlib.suppress(OSError):
                os.remove(base + ".ask")
