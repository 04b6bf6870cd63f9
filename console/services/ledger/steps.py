"""The engine's steps for the ledger, each trainer attributed to the job attempt it ran in.

Two sources, one shape (``RunSteps``: one trainer process's steps):

- **the trainers' own step lines** (``read_logs``/``read_lines``): every trainer logs
  ``engine.contract.TRAINER_STEP`` at each logger dump and after each checkpoint, naming its
  run, its process (``attempt``), the checkpoint step it resumed from, the step and the wall
  time. Lines are flushed one by one, so a trainer SIGKILLed with its host has lost at most
  the steps since its last dump. This is the source to trust for redone work;
- **a GKE workload's TensorBoard event files** (``read_tensorboard``, also through
  ``read_logs``): Tunix writes its metrics under ``{base_output_directory}/{run_name}/
  tensorboard/``, one event file per process start (a JobSet restart or a resubmission with
  the same run name resumes from the run's checkpoints in a new file). Each file is one
  trainer: its events' steps and wall times, resumed one step below the first it logged (it
  computed that step after restoring, so it resumed there or earlier: redone work read from
  them is never over, and exact where each step is logged). The writer flushes as it goes,
  so a killed pod loses at most its last unflushed steps;
- **W&B offline run files** (``read_runs``): every trainer process writes its own run file
  (a resumed run is a new file with the same run id): its ``wandb.log`` points (the
  engine's ``global_step``, wall time) and the checkpoint step it resumed from (the engine
  puts ``resumed_from_step`` in the run's config). A SIGKILL takes whatever wandb-core had
  not yet written, so redone work read from them comes out short. A job attempt may hold several trainers (a
sweep's trials, a trial Ray Tune restarted), each a ``Progress`` of its run. A file is given
to the attempt that was submitted and not yet ended when the file's first point was logged;
where several were, to the one whose entrypoint names the run (``--run-name``), and
otherwise to none (a guess would put one job's steps on another). ``goodput.account`` turns
them into restart warm-up and redone work.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from console.services.ledger.goodput import Attempt, Progress, StepPoint
from engine.contract import parse_trainer_step

# What the engine's trainer puts in its run's config (``engine.trainer``).
RESUMED_FROM = "resumed_from_step"
# TensorBoard's event file names: events.out.tfevents.<time>.<host>...
EVENT_FILE_MARK = "events.out.tfevents."

if TYPE_CHECKING:
    from console.services.cadence.wandb_files import HistoryPoint

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RunSteps:
    """One run file's logged steps (one trainer process)."""

    name: str
    points: tuple[StepPoint, ...]
    resumed_from: int | None = None  # the checkpoint step it started at (0: from scratch)


def attribute(
    runs: Iterable[RunSteps], tries: Mapping[str, Attempt]
) -> dict[str, tuple[Progress, ...]]:
    """Each attempt's trainers, from the run files they wrote (see the module docstring)."""
    found: dict[str, list[Progress]] = {}
    for run in runs:
        if not run.points:
            continue
        first = min(p.at for p in run.points)
        live = [
            a
            for a in tries.values()
            if a.submitted_at <= first < (a.ended_at if a.ended_at is not None else math.inf)
        ]
        if len(live) > 1:
            live = [a for a in live if run.name and _names(a.entrypoint, run.name)]
        if len(live) != 1:
            log.debug("run %s: %d attempts could have written it; left out", run.name, len(live))
            continue
        points = tuple(sorted(run.points, key=lambda p: (p.at, p.step)))
        found.setdefault(live[0].job_id, []).append(Progress(points, run.resumed_from, run.name))
    return {job: tuple(trainers) for job, trainers in found.items()}


def _names(entrypoint: str, name: str) -> bool:
    """Whether the command names the run: the engine's ``--run-name``, or MaxText's
    ``run_name=`` override in a GKE workload's command."""
    words = entrypoint.split()
    return any(
        w in (f"--run-name={name}", f"run_name={name}") or (w == "--run-name" and nxt == name)
        for w, nxt in zip(words, [*words[1:], ""], strict=True)
    )


def read_runs(wandb_dir: str | os.PathLike[str]) -> list[RunSteps]:
    """Every offline run file under ``wandb_dir`` (blocking: run it off the event loop).

    A file that cannot be read is logged and left out: the ledger is then without its steps,
    never wrong about them."""
    from console.services.cadence.wandb_files import OfflineRun, WandbFileError, run_files

    out: list[RunSteps] = []
    for path in run_files(wandb_dir):
        run = OfflineRun(path)
        try:
            points = run.poll()
        except (WandbFileError, OSError) as exc:
            log.warning("ledger: run file %s left out: %s", path, exc)
            continue
        resumed = run.config.get(RESUMED_FROM)
        if not isinstance(resumed, int) or isinstance(resumed, bool) or resumed < 0:
            resumed = None  # not the engine's run (or an older one): bounded by its first step
        out.append(RunSteps(run.name or run.run_id, _points(points), resumed))
    return out


def read_lines(lines: Iterable[str]) -> list[RunSteps]:
    """Each trainer process's steps from its step lines (any other line is skipped).

    A line may come more than once (Ray's driver log repeats a trial's lines, and a log may
    be read from two copies): a trainer's point is its step, kept once, at its first time."""
    by_attempt: dict[tuple[str, str], tuple[int, dict[int, float]]] = {}
    for line in lines:
        if "[engine] step " not in line:
            continue  # the cheap test first: most lines of a log are something else
        found = parse_trainer_step(line)
        if found is None:
            continue
        key = (found.run, found.attempt)
        _, points = by_attempt.setdefault(key, (found.resumed_from, {}))
        at = points.get(found.step)
        points[found.step] = found.at if at is None else min(at, found.at)
    return [
        RunSteps(run, tuple(StepPoint(at, step) for step, at in points.items()), resumed)
        for (run, _attempt), (resumed, points) in by_attempt.items()
    ]


def read_logs(path: str | os.PathLike[str]) -> list[RunSteps]:
    """The step lines of every file under ``path`` (a log file or a directory of them, e.g.
    Ray's ``session_*/logs`` or ``ray job logs`` saved to files; blocking), and the steps of
    every TensorBoard event file there (a GKE run's ``tensorboard/`` dir, or the output
    directory above its runs: ``read_tensorboard``).

    A file that cannot be read is logged and left out."""
    root = Path(path).expanduser()
    files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
    events = [f for f in files if EVENT_FILE_MARK in f.name]
    lines: list[str] = []
    for file in files:
        if EVENT_FILE_MARK in file.name:
            continue
        try:
            with open(file, encoding="utf-8", errors="replace") as fh:
                lines += (line for line in fh if "[engine] step " in line)
        except OSError as exc:
            log.warning("ledger: log file %s left out: %s", file, exc)
    return [*read_lines(lines), *read_tensorboard(events)]


def read_tensorboard(files: Iterable[str | os.PathLike[str]]) -> list[RunSteps]:
    """Each TensorBoard event file as one trainer process's steps (see the module docstring):
    named after its run (the directory above ``tensorboard/``), every step any scalar was
    logged at, at its first wall time. Blocking; a file that cannot be read is logged and
    left out, one cut short (a killed writer) gives the events before the cut."""
    from tensorboard.backend.event_processing.event_file_loader import LegacyEventFileLoader

    out: list[RunSteps] = []
    for file in files:
        path = Path(file)
        points: dict[int, float] = {}
        try:
            for event in LegacyEventFileLoader(str(path)).Load():
                if not event.HasField("summary") or not event.summary.value:
                    continue
                step, at = int(event.step), float(event.wall_time)
                points[step] = min(points.get(step, at), at)
        except Exception as exc:  # a corrupt record or an unreadable file: this file only
            log.warning("ledger: event file %s left out: %s", path, exc)
            continue
        if not points:
            continue
        run = path.parent.parent.name if path.parent.name == "tensorboard" else path.parent.name
        steps = tuple(StepPoint(at, step) for step, at in sorted(points.items()))
        out.append(RunSteps(run, steps, max(0, min(points) - 1)))
    return out


def prefer_lines(lines: Sequence[RunSteps], files: Sequence[RunSteps]) -> list[RunSteps]:
    """Both sources together: a run the step lines cover is counted from them alone (its run
    files would count its trainers twice, and short), a run they miss from its files."""
    covered = {r.name for r in lines}
    return [*lines, *(r for r in files if r.name not in covered)]


def _points(points: Sequence[HistoryPoint]) -> tuple[StepPoint, ...]:
    return tuple(StepPoint(float(p.timestamp), int(p.step)) for p in points)
