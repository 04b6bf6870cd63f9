"""The chaos drill's plan, what each preemption cost, and the figures (no I/O here).

``plan(seed, count)`` is the seeded schedule: which preemptions, of which kind (the head or a
worker), with or without notice, in which phase (the single training job, then the sweep),
where in the victim trainer's checkpoint cycle each one lands. ``attribute`` turns the
trainers' own lines (``chaos_logs``) into ``Loss`` rows: each trainer a preemption
interrupted, the step it had reached, the step its next attempt resumed from. ``figures`` and
``table`` summarise; the drill's assertions live in ``problems_of_losses`` and the drill.
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from benchmarks.chaos_logs import Attempt, TrainerLogs
from console.services.model import RecoveryStatus

JOB, SWEEP = "job", "sweep"
# A trainer first read more than this after its host's notice started after it (the drill
# reads the logs every 0.25 s; a trainer that had the notice takes seconds to checkpoint).
START_SLACK_S = 1.0
HEAD, WORKER = "head", "worker"


@dataclass(frozen=True)
class Shot:
    """One planned preemption."""

    index: int
    phase: str  # JOB or SWEEP
    kind: str  # HEAD or WORKER
    notice: bool
    cycle: float  # where in the victim trainer's checkpoint interval it lands, 0..1
    pick: float  # which of the candidate workers, 0..1

    @property
    def mode(self) -> str:
        return "notice" if self.notice else "abrupt"


def plan(seed: int, count: int) -> list[Shot]:
    """``count`` preemptions: the first four cover head/worker x notice/abrupt (three: both
    kinds with notice, one without), the rest are drawn; a third of them (at least one, a
    head among them: a single job runs on the head) hit the single job, the rest the sweep."""
    rng = random.Random(seed)
    covering = [(HEAD, True), (WORKER, True), (WORKER, False), (HEAD, False)]
    drawn = [(rng.choice((HEAD, WORKER, WORKER)), rng.random() < 0.5) for _ in range(count - 4)]
    picks = (covering + drawn)[:count]
    rng.shuffle(picks)
    n_job = max(1, count // 3) if count else 0
    first_head = next((i for i, p in enumerate(picks) if p[0] == HEAD), 0)
    order = [first_head] + [i for i in range(len(picks)) if i != first_head]
    shots = []
    for n, i in enumerate(order):
        kind, notice = picks[i]
        shots.append(
            Shot(
                index=n + 1,
                phase=JOB if n < n_job else SWEEP,
                kind=kind,
                notice=notice,
                cycle=round(rng.uniform(0.15, 0.85), 3),
                pick=rng.random(),
            )
        )
    return shots


def target_step(reached: int, interval: int, cycle: float) -> int:
    """The next step after ``reached`` that sits at ``cycle`` of a checkpoint interval."""
    base = (reached // interval) * interval + round(cycle * interval)
    return base if base > reached else base + interval


@dataclass
class ShotRecord:
    """What happened to one planned preemption."""

    shot: Shot
    host: str
    at: float  # unix: just before the preemption was asked for
    gone_at: float = 0.0  # unix: the host's last process gone
    notice_at: float | None = None  # unix: when the host's metadata said preempted
    reference: str = ""  # the trainer whose progress timed it ("run@host")
    reference_step: int | None = None
    killed: list[str] = field(default_factory=list)  # runs whose trainer died with the host
    recovery: RecoveryStatus | None = None
    failed_recoveries: list[RecoveryStatus] = field(default_factory=list)


@dataclass(frozen=True)
class Loss:
    """One trainer a preemption interrupted, and where its run went on from."""

    shot: int
    run: str
    host: str
    end: str  # how the attempt ended: "notice", "killed", "superseded"
    noticed: bool  # it wrote a notice checkpoint
    reached: int
    resumed: int | None  # None: never resumed
    interval: int
    notice_to_ckpt_s: float | None = None
    # It started on the host after the notice (a trial restarted there within the grace):
    # it never got the notice's SIGTERM, so it ends like an abrupt preemption.
    under_notice: bool = False

    @property
    def lost(self) -> int | None:
        return None if self.resumed is None else self.reached - self.resumed


def attribute(
    records: Sequence[ShotRecord],
    logs: TrainerLogs,
    intervals: Mapping[str, int],
) -> tuple[list[Loss], list[str]]:
    """Each interrupted trainer, charged to the last preemption before its end.

    ``intervals`` maps a run-name prefix to its checkpoint interval. Problems: a trainer that
    ended early with no preemption before it, or whose run never resumed.
    """
    losses: list[Loss] = []
    problems: list[str] = []
    for a in logs.attempts:
        if a.end in ("", "final") or a.ended_at is None:
            continue
        before = [r for r in records if r.at <= a.ended_at]
        if not before:
            problems.append(f"{a.run} on {a.host} ended ({a.end}) with no preemption before it")
            continue
        rec = before[-1]
        nxt = logs.successor(a)
        reached = a.notice_step if a.notice_step is not None else a.reached
        to_ckpt = None
        # a manifest older than the notice: that step already had its checkpoint
        if a.notice_done_at is not None and rec.notice_at is not None:
            to_ckpt = a.notice_done_at - rec.notice_at
            to_ckpt = to_ckpt if to_ckpt >= 0 else None
        losses.append(
            Loss(
                shot=rec.shot.index,
                run=a.run,
                host=a.host,
                end=a.end,
                noticed=a.notice_step is not None,
                reached=reached,
                resumed=None if nxt is None else nxt.start_step,
                interval=_interval(a.run, intervals),
                notice_to_ckpt_s=to_ckpt,
                under_notice=(
                    rec.notice_at is not None
                    and a.host == rec.host
                    and a.seen_at > rec.notice_at + START_SLACK_S
                ),
            )
        )
        if nxt is None:
            problems.append(f"{a.run}: interrupted at step {reached} on {a.host}, never resumed")
    return losses, problems


def _interval(run: str, intervals: Mapping[str, int]) -> int:
    for prefix, every in intervals.items():
        if run.startswith(prefix):
            return every
    raise KeyError(f"no checkpoint interval known for run {run}")


def problems_of_losses(records: Sequence[ShotRecord], losses: Sequence[Loss]) -> list[str]:
    """Lost at most one interval; with notice, resumed at exactly the step reached."""
    out = []
    by_index = {r.shot.index: r for r in records}
    for loss in losses:
        rec = by_index[loss.shot]
        where = f"preemption {loss.shot} ({rec.shot.kind} {rec.host}, {rec.shot.mode}): {loss.run}"
        if loss.lost is None:
            continue  # reported by attribute()
        if loss.lost < 0:
            out.append(f"{where} resumed at {loss.resumed}, past the {loss.reached} it reported")
        if loss.lost > loss.interval:
            out.append(
                f"{where} lost {loss.lost} steps (reached {loss.reached}, resumed at "
                f"{loss.resumed}): more than one checkpoint interval ({loss.interval})"
            )
        if loss.noticed and loss.resumed != loss.reached:
            out.append(
                f"{where} wrote a notice checkpoint at step {loss.reached} but resumed at "
                f"{loss.resumed}"
            )
        if rec.shot.notice and loss.host == rec.host and not loss.noticed and not loss.under_notice:
            out.append(f"{where} got a notice on {loss.host} but wrote no notice checkpoint")
    return out


def restarts_from_zero(runs: Mapping[str, Sequence[Attempt]]) -> list[str]:
    """Runs one of whose attempts started from step 0 after an earlier one had saved."""
    out = []
    for run, attempts in runs.items():
        saved = False
        for a in attempts:
            if saved and a.start_step == 0:
                out.append(f"{run}: attempt on {a.host} restarted from step 0 after a checkpoint")
            saved = saved or a.saved is not None
    return out


def brief(trials: dict[str, dict[str, Any]]) -> str:
    """Each trial's step and whether it is final, on one line."""
    return ", ".join(f"{k}: step {t.get('step')} final {t.get('final')}" for k, t in trials.items())


def trial_restarts(trials: dict[str, dict[str, Any]]) -> list[str]:
    """A trial whose attempt started from step 0 after an earlier attempt had checkpointed
    (its durable status file, independent of the logs)."""
    out = []
    for trial_id, trial in sorted(trials.items()):
        attempts = sorted(trial.get("attempts", []), key=lambda a: a.get("started_unix", 0))
        saved = False
        for a in attempts:
            if saved and a.get("resumed_from_step") == 0:
                out.append(f"trial {trial_id} restarted from step 0 after a checkpoint: {a}")
            saved = saved or a.get("reports", 0) > 0 or (a.get("resumed_from_step") or 0) > 0
    return out


# ---------------------------------------------------------------------------- figures


def _stats(values: Sequence[float], digits: int = 2) -> dict[str, Any]:
    if not values:
        return {"n": 0, "median": None, "max": None}
    return {
        "n": len(values),
        "median": round(float(statistics.median(values)), digits),
        "max": round(float(max(values)), digits),
    }


def figures(
    records: Sequence[ShotRecord],
    losses: Sequence[Loss],
    *,
    trials_final: int,
    run_cap: int,
    job_final_step: int | None,
    job_total: int,
    intervals: Mapping[str, int],
    problems: Sequence[str],
    wall_s: float,
    seed: int,
) -> dict[str, Any]:
    """The drill's one JSON object."""
    per_shot: dict[int, list[Loss]] = {}
    for loss in losses:
        per_shot.setdefault(loss.shot, []).append(loss)
    lost: dict[str, list[float]] = {"notice": [], "abrupt": []}
    for rec in records:
        hit = [x.lost for x in per_shot.get(rec.shot.index, []) if x.lost is not None]
        if hit:  # a preemption that interrupted no trainer cost no steps; not a sample
            lost[rec.shot.mode].append(float(sum(hit)))
    mttr: dict[str, list[float]] = {HEAD: [], WORKER: []}
    by_mode: dict[str, list[float]] = {}
    for rec in records:
        if rec.recovery is not None and rec.recovery.mttr_s is not None:
            mttr[rec.shot.kind].append(rec.recovery.mttr_s)
            by_mode.setdefault(f"{rec.shot.kind}/{rec.shot.mode}", []).append(rec.recovery.mttr_s)
    survived = sum(
        1
        for rec in records
        if rec.recovery is not None
        and rec.recovery.ok
        and all(x.resumed is not None for x in per_shot.get(rec.shot.index, []))
    )
    notice_s = [x.notice_to_ckpt_s for x in losses if x.notice_to_ckpt_s is not None]
    return {
        "seed": seed,
        "preemptions": len(records),
        "survived": survived,
        "by_kind": {k: sum(r.shot.kind == k for r in records) for k in (HEAD, WORKER)},
        "with_notice": sum(r.shot.notice for r in records),
        "trials_final": trials_final,
        "run_cap": run_cap,
        "job_final_step": job_final_step,
        "job_total_timesteps": job_total,
        "checkpoint_interval": dict(intervals),
        "trainers_interrupted": len(losses),
        "steps_lost_notice": {**_stats(lost["notice"], 1), "samples": lost["notice"]},
        "steps_lost_abrupt": {**_stats(lost["abrupt"], 1), "samples": lost["abrupt"]},
        "mttr_worker_s": _stats(mttr[WORKER]),
        "mttr_head_s": _stats(mttr[HEAD]),
        # with notice, MTTR runs from the notice: it includes the VM's grace period
        "mttr_by_mode_s": {k: _stats(v) for k, v in sorted(by_mode.items())},
        "notice_to_checkpoint_s": _stats(notice_s, 3),
        "recoveries_failed": sum(len(r.failed_recoveries) for r in records),
        "problems": len(problems),
        "wall_s": round(wall_s, 1),
    }


def table(
    figs: Mapping[str, Any],
    records: Sequence[ShotRecord],
    losses: Sequence[Loss],
    labels: Mapping[str, str] | None = None,
) -> str:
    """The readable version: one row per preemption, then the summary. ``labels``: run-name
    prefixes shown shorter (e.g. the sweep id)."""

    def label(run: str) -> str:
        for prefix, short in (labels or {}).items():
            if run.startswith(prefix):
                return short + run.removeprefix(prefix)
        return run

    rows = [
        f"{'#':>2} {'phase':5} {'kind':6} {'host':15} {'mode':6} {'MTTR s':>7} "
        f"{'trainers hit: run reached->resumed (lost)'}"
    ]
    for rec in records:
        hit = [x for x in losses if x.shot == rec.shot.index]
        desc = ", ".join(
            f"{label(x.run)} {x.reached}->{x.resumed} "
            f"({'?' if x.lost is None else x.lost}{', notice' if x.noticed else ''}"
            f"{', started under notice' if x.under_notice else ''})"
            for x in hit
        )
        mttr = rec.recovery.mttr_s if rec.recovery is not None else None
        rows.append(
            f"{rec.shot.index:>2} {rec.shot.phase:5} {rec.shot.kind:6} {rec.host:15} "
            f"{rec.shot.mode:6} {_num(mttr, 1):>7} {desc or 'none'}"
        )

    def stat(key: str) -> str:
        s = figs[key]
        return f"median {_num(s['median'])}, max {_num(s['max'])} (n={s['n']})"

    rows += [
        "",
        f"preemptions survived        {figs['survived']}/{figs['preemptions']} "
        f"(head {figs['by_kind'][HEAD]}, worker {figs['by_kind'][WORKER]}; "
        f"with notice {figs['with_notice']})",
        f"trials final / run cap      {figs['trials_final']}/{figs['run_cap']}",
        f"single job final step       {figs['job_final_step']} "
        f"(--total-timesteps {figs['job_total_timesteps']})",
        f"steps lost, with notice     {stat('steps_lost_notice')}",
        f"steps lost, without notice  {stat('steps_lost_abrupt')} "
        f"(checkpoint interval {figs['checkpoint_interval']})",
        f"MTTR worker                 {stat('mttr_worker_s')} s",
        f"MTTR head                   {stat('mttr_head_s')} s",
        "  by kind/mode               "
        + "; ".join(
            f"{k} {_num(v['median'])} ({_num(v['max'])})" for k, v in figs["mttr_by_mode_s"].items()
        )
        + " s, median (max); with notice from the notice, grace included",
        f"notice -> checkpoint done   {stat('notice_to_checkpoint_s')} s",
        f"problems                    {figs['problems']}",
    ]
    return "\n".join(rows)


def _num(value: float | None, digits: int | None = None) -> str:
    if value is None:
        return "-"
    return f"{value:g}" if digits is None else f"{value:.{digits}f}"
