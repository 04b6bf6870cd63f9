"""Cadence at call time, for one-shot snapshots (``phantom status``, cron, ``watch``).

The console's pollers keep cadence current while they run (``tracker``); a one-shot
``phantom status`` starts no poller, so ``read_cadence`` reads the sources itself, once,
under a deadline (``recovery.cadence_deadline_s``, 5 s by default). Each source, and each
part of a source that ``split``s (one offline run file), is read in a thread of its own;
whatever has not answered when the deadline passes is reported with the verdict ``stale``
and the reason, and is not waited for. The threads are daemons, so one stuck in a read (a
hung mount, a FIFO) cannot keep the process alive after it has printed its answer.

What did answer is judged by the rule in ``rules`` (``compute_cadence``), as the tracker
judges a run it sees for the first time: no second copy of the rule here.
"""

from __future__ import annotations

import functools
import shlex
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, replace
from typing import TypeVar

from console.services.cadence.rules import compute_cadence
from console.services.cadence.sources import (
    CadenceSource,
    CadenceSourceError,
    RunObservation,
    SplitSource,
)
from console.services.cadence.wandb_files import WandbFileError
from console.services.model import JobInfo, RunCadence

DEADLINE_SETTING = "recovery.cadence_deadline_s"
T = TypeVar("T")


@dataclass(frozen=True)
class _Part:
    """One thing to read: a whole source, or one run of a source that splits."""

    kind: str
    run_id: str  # "" when the part covers every run of its source
    poll: Callable[[], list[RunObservation]]


def read_cadence(
    sources: Sequence[CadenceSource],
    *,
    stall_factor: float,
    deadline_s: float,
    clock: Callable[[], float] = time.time,
    monotonic: Callable[[], float] = time.monotonic,
) -> list[RunCadence]:
    """Every run the sources know now, each judged by the stall rule; a source or run that
    does not answer within ``deadline_s`` (listing and reading together) or cannot be read
    is a ``stale`` entry saying why. Blocking, for at most about ``deadline_s`` after the
    sources' ``prepare`` (loading our own decoders, where a source has one)."""
    for source in sources:
        prepare = getattr(source, "prepare", None)
        if prepare is not None:
            prepare()
    end = monotonic() + deadline_s

    def left() -> float:
        return max(0.0, end - monotonic())

    late = f"no answer within {deadline_s:g}s ({DEADLINE_SETTING}); not waited for"
    out: list[RunCadence] = []
    listings = [(s.kind, in_daemon_thread(functools.partial(_parts, s))) for s in sources]
    reading: list[tuple[_Part, Future[tuple[float, list[RunObservation]]]]] = []
    for kind, listing in listings:
        try:
            parts = listing.result(timeout=left())
        except FutureTimeout:
            out.append(stale_entry(kind, "", f"listing its runs: {late}"))
            continue
        except Exception as exc:
            out.append(stale_entry(kind, "", _why(exc)))
            continue
        reading += [
            (part, in_daemon_thread(functools.partial(_timed, part, clock))) for part in parts
        ]
    for part, future in reading:
        try:
            started, observations = future.result(timeout=left())
        except FutureTimeout:
            out.append(stale_entry(part.kind, part.run_id, late))
            continue
        except Exception as exc:
            out.append(stale_entry(part.kind, part.run_id, _why(exc)))
            continue
        # Judged as of when the read began: a row it did not see was not there then, but may
        # be by the time a slow read (a W&B server's answer) returns.
        out += [_judge(obs, started, stall_factor) for obs in observations]
    out.sort(key=lambda c: (c.source, c.name, c.run_id))
    return out


def mark_stale(cadence: Sequence[RunCadence], reasons: Mapping[str, str]) -> list[RunCadence]:
    """``cadence`` with the runs of each source in ``reasons`` (kind -> why) marked stale:
    the pollers' last values while a source fails or hangs. ``reasons[""]`` covers all."""
    out = []
    for cad in cadence:
        why = reasons.get(cad.source) or reasons.get("", "")
        out.append(replace(cad, stale=why) if why and not cad.stale else cad)
    return out


def with_jobs(cadence: Sequence[RunCadence], jobs: Collection[JobInfo]) -> list[RunCadence]:
    """Each run with the job it belongs to, where that is known: a GKE run is its workload
    (the run id is the workload's name); a W&B run is the job whose entrypoint names it
    (``--run-name NAME``)."""
    ids = {j.job_id for j in jobs}
    by_run_name: dict[str, str] = {}
    for info in jobs:
        name = _run_name(info.entrypoint)
        if name:
            by_run_name.setdefault(name, info.job_id)
    out = []
    for cad in cadence:
        job_id = cad.run_id if cad.run_id in ids else by_run_name.get(cad.name, "")
        out.append(replace(cad, job=job_id) if job_id and not cad.job else cad)
    return out


def _run_name(entrypoint: str) -> str:
    try:
        argv = shlex.split(entrypoint)
    except ValueError:
        return ""
    for i, arg in enumerate(argv):
        if arg == "--run-name" and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith("--run-name="):
            return arg.split("=", 1)[1]
    return ""


def _timed(part: _Part, clock: Callable[[], float]) -> tuple[float, list[RunObservation]]:
    started = clock()
    return started, part.poll()


def _parts(source: CadenceSource) -> list[_Part]:
    if isinstance(source, SplitSource):
        return [_Part(p.kind, str(getattr(p, "run_id", "")), p.poll) for p in source.split()]
    return [_Part(source.kind, "", source.poll)]


def _judge(obs: RunObservation, now: float, stall_factor: float) -> RunCadence:
    return compute_cadence(
        obs.run_id,
        obs.name,
        obs.source,
        obs.points,
        now=now,
        stall_factor=stall_factor,
        state=obs.state,
        stride=obs.stride,
        lag_s=obs.lag_s,
    )


def stale_entry(kind: str, run_id: str, why: str) -> RunCadence:
    """A run (or, with no ``run_id``, every run of a source) whose numbers are not known."""
    return RunCadence(
        run_id=run_id,
        name=run_id or f"every {kind} run",
        source=kind,
        last_step=None,
        last_at=None,
        seconds_since=None,
        median_interval_s=None,
        steps_per_min=None,
        stale=why,
    )


def _why(exc: BaseException) -> str:
    """Our own errors name what and the fix; anything else gets its class name too."""
    text = str(exc).strip().splitlines()
    first = text[0] if text else ""
    if isinstance(exc, CadenceSourceError | WandbFileError | OSError) and first:
        return first
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__


def in_daemon_thread(fn: Callable[[], T]) -> Future[T]:
    """``fn()`` in a daemon thread (a pool's threads are joined at exit: a read stuck past
    the deadline would hold the process)."""
    future: Future[T] = Future()

    def run() -> None:
        if not future.set_running_or_notify_cancel():
            return
        try:
            future.set_result(fn())
        except BaseException as exc:
            future.set_exception(exc)

    threading.Thread(target=run, name="phantom-cadence-read", daemon=True).start()
    return future
