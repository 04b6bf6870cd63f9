"""What the trainers themselves said: their ``[engine]`` lines, read where they write them.

Every trainer (a single job's ``engine.train``, a Tune trial's trainer process) writes its
lines to a Ray log file on its host: the job's driver log (``job-driver-<id>.log``) or its
Ray worker's ``worker-*.err``. The emulated hosts' disks are directories on this machine, so
the drill reads those files directly, every ``poll``. A preempted VM's disk is wiped when it
is recreated; each file is hard-linked into the drill's own directory when first seen, so
what a trainer wrote up to its death stays readable after (it writes to the same inode).

An ``Attempt`` is one trainer process working on one run, from its start line (``starting
<run> from scratch`` / ``resuming <run> from checkpoint <uri> at step N``) to its last line.
``reached`` is the highest step it reported (progress, step, checkpoint, notice or final
line): a trainer killed without notice had reached at least that, and less than one log
interval more. With notice its own line names the exact step of the checkpoint it wrote.
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from engine.contract import NOTICE_LINE_RE, TRAINER_STEP_RE

_START = re.compile(r"\[engine\] starting (?P<run>\S+) from scratch")
_RESUME = re.compile(
    r"\[engine\] resuming (?P<run>\S+) from checkpoint (?P<uri>\S+) at step (?P<step>\d+)"
)
_PROGRESS = re.compile(r"\[engine\] progress step=(?P<step>\d+)/")
_CHECKPOINT = re.compile(r"\[engine\] checkpoint step=(?P<step>\d+) at (?P<uri>\S+)")
_FINAL = re.compile(r"\[engine\] final weights step=(?P<step>\d+) at (?P<uri>\S+)")
# Ray's log files of a node (under its --temp-dir, $TMPDIR/ray on the emulator) where a
# trainer's stderr lands. The sweep driver's own log repeats its trials' lines with a
# "(pid=..., ip=...)" prefix; only lines that begin with "[engine]" are read, once each.
_LOG_GLOBS = ("tmp/ray/session_*/logs/job-driver-*.log", "tmp/ray/session_*/logs/worker-*.err")


@dataclass
class Attempt:
    """One trainer process on one run, as its own lines tell it."""

    run: str
    host: str
    source: str  # the log file it writes to
    seq: int  # order of first sight among all attempts
    seen_at: float  # when the drill read its start line (unix)
    start_step: int
    reached: int
    last_seen_at: float
    saved: int | None = None  # its newest checkpoint (periodic or notice)
    notice_step: int | None = None  # its preemption-notice checkpoint
    notice_uri: str = ""
    notice_s: float | None = None  # the trainer's own figure: SIGTERM -> checkpoint complete
    notice_done_at: float | None = None  # that checkpoint's manifest on disk (unix mtime)
    final: bool = False
    ended_at: float | None = None  # final or notice line, killed, or superseded
    end: str = ""  # "final", "notice", "killed", "superseded"

    @property
    def open(self) -> bool:
        return self.ended_at is None

    def end_as(self, how: str, at: float) -> None:
        if self.ended_at is None:
            self.ended_at, self.end = at, how


@dataclass
class _File:
    host: str
    read_path: Path  # the hard link (or the file itself where a link is impossible)
    offset: int = 0
    pending: bytes = b""


class TrainerLogs:
    """Tails every trainer log on the pod's hosts; ``attempts`` in order of first sight."""

    def __init__(
        self,
        mirror: Path,
        sandboxes: Mapping[str, Path],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.mirror = mirror
        self.sandboxes = dict(sandboxes)
        self.clock = clock
        self.attempts: list[Attempt] = []
        self._files: dict[Path, _File] = {}
        self._current: dict[str, Attempt] = {}  # log file -> its latest attempt

    # -- reading (blocking: run it in a thread) ---------------------------------------------
    def read_new(self) -> list[tuple[str, str, list[str]]]:
        """(host, source, complete new lines) of every trainer log on every host."""
        out = []
        for host, sandbox in self.sandboxes.items():
            for pattern in _LOG_GLOBS:
                with contextlib.suppress(OSError):  # a disk being wiped under the glob
                    for path in sorted(sandbox.glob(pattern)):
                        # Ray's session_latest is a link to the current session: once each
                        if path not in self._files and not path.parent.parent.is_symlink():
                            self._files[path] = _File(host, self._link(host, path))
        for path, f in self._files.items():
            try:
                with open(f.read_path, "rb") as fh:
                    fh.seek(f.offset)
                    data = fh.read()
            except OSError:
                continue
            f.offset += len(data)
            data = f.pending + data
            cut = data.rfind(b"\n") + 1
            f.pending = data[cut:]
            if cut:
                lines = data[:cut].decode(errors="replace").splitlines()
                out.append((f.host, str(path), lines))
        return out

    def _link(self, host: str, path: Path) -> Path:
        target = self.mirror / host / f"{path.parent.parent.name}-{path.name}"
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(path, target)
            return target
        except OSError:  # another filesystem, or gone already: read it in place
            return path

    # -- parsing (cheap: on the event loop) -------------------------------------------------
    def ingest(self, chunks: list[tuple[str, str, list[str]]]) -> None:
        now = self.clock()
        for host, source, lines in chunks:
            for line in lines:
                if line.startswith("[engine] "):
                    self._line(host, source, line, now)

    def _line(self, host: str, source: str, line: str, now: float) -> None:
        m = _START.match(line) or _RESUME.match(line)
        if m is not None:
            step = int(m.group("step")) if "step" in m.groupdict() else 0
            self._open(m.group("run"), host, source, step, now)
            return
        current = self._current.get(source)
        if (m := NOTICE_LINE_RE.match(line)) is not None:
            # the line names its checkpoint, so it is attributed by run even if a newer
            # trainer already writes to the same file
            attempt = self._by_uri(m.group("uri"), source) or current
            if attempt is None:
                return
            step = int(m.group("step"))
            attempt.notice_step, attempt.notice_uri = step, m.group("uri")
            attempt.notice_s = float(m.group("seconds"))
            attempt.notice_done_at = _manifest_mtime(m.group("uri"))
            attempt.reached = max(attempt.reached, step)
            attempt.saved = step
            attempt.last_seen_at = now
            attempt.end_as("notice", now)
            return
        if current is None or not current.open:
            return
        for pattern in (_PROGRESS, TRAINER_STEP_RE, _CHECKPOINT, _FINAL):
            if (m := pattern.match(line)) is not None:
                if pattern is TRAINER_STEP_RE and m["run"] != current.run:
                    return  # it names its run: another trainer's line in the same file
                current.reached = max(current.reached, int(m.group("step")))
                current.last_seen_at = now
                if pattern is _CHECKPOINT:
                    current.saved = int(m.group("step"))
                if pattern is _FINAL:
                    current.final = True
                    current.end_as("final", now)
                return

    def _open(self, run: str, host: str, source: str, step: int, now: float) -> None:
        for a in self.attempts:  # one trainer per run at a time: a new one supersedes
            if a.run == run:
                a.end_as("superseded", now)
        previous = self._current.get(source)
        if previous is not None:
            previous.end_as("superseded", now)
        attempt = Attempt(
            run=run,
            host=host,
            source=source,
            seq=len(self.attempts),
            seen_at=now,
            start_step=step,
            reached=step,
            last_seen_at=now,
            saved=step or None,  # it resumed from a checkpoint: the run had saved
        )
        self.attempts.append(attempt)
        self._current[source] = attempt

    def _by_uri(self, uri: str, source: str) -> Attempt | None:
        for a in reversed(self.attempts):
            if a.source == source and f"/{a.run}/" in uri:
                return a
        return None

    # -- queries ----------------------------------------------------------------------------
    def open_attempts(self, host: str | None = None) -> list[Attempt]:
        return [a for a in self.attempts if a.open and (host is None or a.host == host)]

    def running(self, prefix: str, host: str | None = None, fresh_s: float = 30.0) -> list[Attempt]:
        """Trainers of ``prefix`` runs that are open and spoke lately (past their start)."""
        fresh = self.clock() - fresh_s
        return [
            a
            for a in self.open_attempts(host)
            if a.run.startswith(prefix) and a.reached > a.start_step and a.last_seen_at > fresh
        ]

    def kill(self, host: str, at: float) -> list[Attempt]:
        """Every attempt still open on ``host`` ended when the host was taken at ``at``."""
        killed = self.open_attempts(host)
        for a in killed:
            a.end_as("killed", at)
        return killed

    def successor(self, attempt: Attempt) -> Attempt | None:
        """The next attempt on the same run (where it resumed), if one started."""
        for a in self.attempts[attempt.seq + 1 :]:
            if a.run == attempt.run:
                return a
        return None

    def runs(self) -> dict[str, list[Attempt]]:
        out: dict[str, list[Attempt]] = {}
        for a in self.attempts:
            out.setdefault(a.run, []).append(a)
        return out


def _manifest_mtime(uri: str) -> float | None:
    """When a local checkpoint's manifest (written last) reached the disk."""
    path = Path(uri.removeprefix("file://")) / "MANIFEST.json"
    try:
        return path.stat().st_mtime
    except OSError:
        return None
