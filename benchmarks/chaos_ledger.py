"""The ledger against the drill's ground truth (issue 23: what each preemption cost).

After the drill, the ledger is read from the drill's journal exactly as ``phantom report
--format json --runs <WANDB_DIR>`` prints it (``console.report.report_main``), and checked
against what the drill itself knows:

- **redone steps, per job, within 2% of the ground truth** (``REDONE_TOLERANCE``): the
  ground truth is what the trainers said, as the drill tails their log files on the hosts
  while they run (``chaos_logs``: the step each interrupted trainer reached, from its
  progress, step, checkpoint and notice lines, and the step its successor resumed at; the
  lines are flushed one by one, so a SIGKILLed trainer's last one is there). The ledger
  reads the trainers' step lines (``engine.contract.TRAINER_STEP``) from the same files
  through ``phantom report --logs``, and attributes them to job attempts by the journal, as
  it would any log. The count from the W&B run files (each trainer's ``resumed_from_step``
  and highest logged step, by run name) is printed beside it: a SIGKILL takes the points
  wandb-core had not written (short), and the W&B session a trainer opens afresh to end its
  run at a notice writes a second file that reads as a trainer resumed from step 0 (long);
  the difference is noted, not hidden.
- **recovery seconds per incident within 1 s of the watchdog's MTTR**: the ledger's
  incident (detect + capacity + recover, from the loss to the ``recovered`` row) against
  the ``mttr_s`` the watchdog journaled on that incident's ``recovered`` row.
- **badput sums to the wall time**: each job's (and the pod's) causes, productive
  included, sum to its wall time (to the JSON's rounding), and that wall time is the
  drill's own from the submit to the end it saw (within ``WALL_SLACK_S``: the drill asks
  for the job's status every 2 s).
"""

from __future__ import annotations

import io
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.chaos_report import Loss
from console.config import Config
from console.report import report_main
from console.services.cadence.wandb_files import OfflineRun, WandbFileError, run_files
from console.services.record.incidents import incident_of
from console.services.record.journal import RECOVERED, Journal

MTTR_TOLERANCE_S = 1.0
REDONE_TOLERANCE = 0.02  # of the ground truth's redone steps (issue 36)
SUM_TOLERANCE_S = 0.01  # the JSON rounds each cause to 1 ms
# the drill asks a job's status every 2 s (an answer can take a while on a busy machine); the
# ledger ends a job where Ray says it ended
WALL_SLACK_S = 5.0


@dataclass(frozen=True)
class Trainer:
    """One trainer process, from its run file."""

    run: str
    started: float
    resumed_from: int | None
    reached: int | None  # the highest step it logged


@dataclass
class JobTruth:
    """One job of the drill: what the drill knows of it, and what the ledger said."""

    phase: str
    job_id: str
    runs: str  # the run-name prefix of its trainers
    submitted_at: float  # unix, just before the submit
    ended_seen_at: float | None = None  # unix, when the drill saw it end
    redone_files: int = 0  # from the W&B run files (short after a SIGKILL)
    redone_lines: int = 0  # the ground truth: the trainers' log lines (chaos_logs)
    trainers: int = 0
    ledger: dict[str, Any] | None = None


@dataclass
class LedgerCheck:
    jobs: list[JobTruth]
    incidents: list[dict[str, Any]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def figures(self) -> dict[str, Any]:
        return {
            "jobs": {
                j.phase: {
                    "trainers": j.trainers,
                    "redone_trainers": j.redone_files,
                    "redone_log_lines": j.redone_lines,
                    "redone_ledger": None if j.ledger is None else j.ledger["redone_steps"],
                    "redone_error": None if j.ledger is None else _error(j),
                    "wall_drill_s": _wall(j),
                    "wall_ledger_s": None if j.ledger is None else j.ledger["wall_s"],
                    "causes_sum_s": None if j.ledger is None else _sum(j.ledger),
                    "goodput": None if j.ledger is None else j.ledger["goodput"],
                }
                for j in self.jobs
            },
            "incidents": self.incidents,
            "problems": len(self.problems),
        }

    def table(self) -> str:
        rows = [
            "ledger (phantom report --format json) against the drill's ground truth",
            f"{'job':6} {'trainers':>8} {'redone: truth':>13} {'ledger':>7} {'error':>6} "
            f"{'W&B files':>9}  {'wall: drill':>11} {'ledger':>8} {'causes sum':>10}",
        ]
        for j in self.jobs:
            led = j.ledger or {}
            error = _error(j) if led else None
            rows.append(
                f"{j.phase:6} {j.trainers:>8} {j.redone_lines:>13} "
                f"{led.get('redone_steps', '-')!s:>7} "
                f"{'-' if error is None else f'{error:.1%}':>6} {j.redone_files:>9}  "
                f"{_num(_wall(j)):>11} "
                f"{_num(led.get('wall_s')):>8} {_num(_sum(led) if led else None):>10}"
            )
        rows.append(f"{'incident':28} {'watchdog MTTR s':>15} {'ledger s':>9} {'diff':>6}")
        for i in self.incidents:
            rows.append(
                f"{i['incident']:28} {_num(i['mttr_s']):>15} {_num(i['ledger_s']):>9} "
                f"{_num(i['diff_s']):>6}"
            )
        return "\n".join(rows)


def _error(j: JobTruth) -> float | None:
    """The ledger's redone steps against the ground truth, as a fraction of it (0 when both
    are 0, None without a ledger)."""
    if j.ledger is None:
        return None
    diff = int(j.ledger["redone_steps"]) - j.redone_lines
    if j.redone_lines == 0:
        return 0.0 if diff == 0 else math.inf
    return round(diff / j.redone_lines, 4)


def _wall(j: JobTruth) -> float | None:
    return None if j.ended_seen_at is None else round(j.ended_seen_at - j.submitted_at, 3)


def _sum(unit: Mapping[str, Any]) -> float:
    return round(math.fsum(unit["seconds"].values()), 3)


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


# -- the trainers' own count -----------------------------------------------------------------------
def read_trainers(wandb_dir: Path) -> list[Trainer]:
    """Every trainer's run file under ``wandb_dir``, in the order they started."""
    out = []
    for path in run_files(wandb_dir):
        run = OfflineRun(path)
        try:
            points = run.poll()
        except (WandbFileError, OSError):
            continue
        resumed = run.config.get("resumed_from_step")
        started = run.start_time if run.start_time is not None else path.stat().st_mtime
        out.append(
            Trainer(
                run=run.name or run.run_id,
                started=started,
                resumed_from=resumed if isinstance(resumed, int) else None,
                reached=max((p.step for p in points), default=None),
            )
        )
    return sorted(out, key=lambda t: t.started)


def redone_by_run(trainers: Sequence[Trainer]) -> dict[str, int]:
    """Steps computed again per run: from each trainer's resume step up to the highest step
    the run's earlier trainers logged, or as far as it got itself."""
    reached: dict[str, int] = {}
    redone: dict[str, int] = {}
    for t in trainers:
        before = reached.get(t.run)
        if before is not None and t.resumed_from is not None and before > t.resumed_from:
            again = min(before, t.reached if t.reached is not None else before)
            redone[t.run] = redone.get(t.run, 0) + max(0, again - t.resumed_from)
        if t.reached is not None:
            reached[t.run] = max(before or t.reached, t.reached)
    return redone


def redone_by_lines(losses: Sequence[Loss], prefix: str) -> int:
    """The same count from the trainers' log lines: reached -> resumed of each interrupted
    trainer (a trainer that never resumed is reported by the drill's own checks)."""
    return sum(x.lost for x in losses if x.run.startswith(prefix) and x.lost and x.lost > 0)


# -- the ledger ------------------------------------------------------------------------------------
def read_ledger(
    config: Config, journal: Path, wandb_dir: Path, logs: Path, now: float
) -> dict[str, Any]:
    """The ledger as ``phantom report --format json --journal J --logs L --runs W`` prints
    it."""
    out, err = io.StringIO(), io.StringIO()
    code = report_main(
        config,
        fmt="json",
        journal_path=str(journal),
        runs_dir=str(wandb_dir),
        logs_path=str(logs),
        out=out,
        err=err,
        clock=lambda: now,
    )
    if code != 0:
        raise RuntimeError(f"phantom report exited {code}: {err.getvalue().strip()}")
    ledger: dict[str, Any] = json.loads(out.getvalue())
    return ledger


def watchdog_mttr(journal: Path) -> dict[str, float]:
    """Each incident's MTTR as the watchdog journaled it on its ``recovered`` row."""
    j = Journal(journal)
    try:
        rows = j.query(limit=100_000, kinds=[RECOVERED])
    finally:
        j.close()
    out = {}
    for row in rows:
        mttr = row.data.get("mttr_s")
        if incident_of(row) and isinstance(mttr, int | float):
            out[incident_of(row)] = float(mttr)
    return out


def check(
    ledger: Mapping[str, Any],
    mttr: Mapping[str, float],
    trainers: Sequence[Trainer],
    losses: Sequence[Loss],
    jobs: Sequence[JobTruth],
) -> LedgerCheck:
    """Every check of the module docstring; each disagreement is named."""
    result = LedgerCheck(list(jobs))
    problems, notes = result.problems, result.notes
    by_run = redone_by_run(trainers)
    units = ledger.get("jobs", [])
    for job in jobs:
        job.trainers = sum(t.run.startswith(job.runs) for t in trainers)
        job.redone_files = sum(v for run, v in by_run.items() if run.startswith(job.runs))
        job.redone_lines = redone_by_lines(losses, job.runs)
        job.ledger = next((u for u in units if job.job_id in u.get("jobs", [])), None)
        name = f"ledger: the {job.phase} ({job.job_id})"
        if job.ledger is None:
            problems.append(f"{name} is not in the report's jobs")
            continue
        led = job.ledger
        if not led["steps_known"]:
            problems.append(f"{name} has no engine steps (its run files were not read)")
        if abs(led["redone_steps"] - job.redone_lines) > REDONE_TOLERANCE * job.redone_lines:
            problems.append(
                f"{name} counts {led['redone_steps']} redone steps; its trainers' log lines "
                f"say {job.redone_lines} (tolerance {REDONE_TOLERANCE:.0%})"
            )
        if job.redone_lines != job.redone_files:
            notes.append(
                f"{job.phase}: the trainers' log lines say {job.redone_lines} steps redone, "
                f"their W&B run files {job.redone_files} ({_runs(by_run, job.runs)}): the "
                "files are no count of trainers (a SIGKILL leaves one short; a notice's fresh "
                "W&B session writes a second file, from step 0 by its config)"
            )
        total = _sum(led)
        if abs(total - led["wall_s"]) > SUM_TOLERANCE_S:
            problems.append(f"{name}: its causes sum to {total:.3f}s, its wall time is "
                            f"{led['wall_s']:.3f}s")  # fmt: skip
        wall = _wall(job)
        if wall is not None and not -WALL_SLACK_S <= wall - led["wall_s"] <= WALL_SLACK_S:
            problems.append(
                f"{name}: wall time {led['wall_s']:.1f}s, the drill's own {wall:.1f}s "
                f"(submit to the end it saw; slack {WALL_SLACK_S:g}s)"
            )
    pod = ledger.get("cluster", {})
    if pod and abs(_sum(pod) - pod["wall_s"]) > SUM_TOLERANCE_S:
        problems.append(f"ledger: the pod's causes sum to {_sum(pod):.3f}s, its wall time is "
                        f"{pod['wall_s']:.3f}s")  # fmt: skip
    seen = {i["incident"]: i for i in ledger.get("incidents", [])}
    for incident, watchdog_s in sorted(mttr.items()):
        inc = seen.get(incident)
        if inc is None:
            problems.append(f"ledger: incident {incident} (MTTR {watchdog_s:.1f}s) is missing")
            continue
        ledger_s = inc["detect_s"] + inc["capacity_s"] + inc["recover_s"]
        diff = ledger_s - watchdog_s
        result.incidents.append(
            {
                "incident": incident,
                "mttr_s": round(watchdog_s, 3),
                "ledger_s": round(ledger_s, 3),
                "diff_s": round(diff, 3),
                "detect_s": inc["detect_s"],
                "recover_s": inc["recover_s"],
            }
        )
        if abs(diff) > MTTR_TOLERANCE_S:
            problems.append(
                f"ledger: incident {incident} cost {ledger_s:.2f}s (detect {inc['detect_s']}, "
                f"capacity {inc['capacity_s']}, recover {inc['recover_s']}), the watchdog's "
                f"MTTR {watchdog_s:.2f}s"
            )
    return result


def _runs(by_run: Mapping[str, int], prefix: str) -> str:
    return ", ".join(f"{r} {v}" for r, v in sorted(by_run.items()) if r.startswith(prefix)) or "-"
