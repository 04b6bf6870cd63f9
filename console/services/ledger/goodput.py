"""Goodput: where each job's wall time went, from the journal (and the engine's steps).

A *job* here is a resubmission chain: the job phantom submitted and every job that carried
it on after a loss (``job_resubmitted`` rows), so its wall time runs from the first submit to
the last attempt's end (or the end of the range asked for). A GKE workload restarts in place
under one name and is the same thing with one attempt. The *cluster* is the pod over the
whole range, idle time included: it is what the bill counts.

Each second of a span gets one cause (``timeline``): productive while an attempt runs;
queued while submitted and not running; and where an incident (``record.incidents``) covers
it, detection delay (the loss, as the API dated it or ``detect_s`` before the console saw it,
up to that sighting), waiting for capacity (a failed ``capacity`` try or a ``quota_pending``
row, up to the next successful try or the incident's end) and recovery (each
``recovery.<step>`` action over its own duration, the rest of the incident as ``recovery``).
A job counts every incident on its pod against it: a job spans the pod, so any host's loss
interrupts it (as ``advice`` assumes). Steps come from the engine (``Progress``: one
trainer's step lines or W&B history points, the run it trains and the step it resumed
from; an attempt may hold several, e.g. a sweep's trials): restart warm-up runs from an
attempt's RUNNING to its first step; a trainer's redone work runs from its first step until
it passes the step the run's earlier trainers reached (in this attempt or an earlier one of
the chain), and counts the steps between where it resumed and that step (or the step it
reached, if it was lost before that: over a finished run the sum is every step computed and
thrown away). Without steps both are 0 and the time
stays productive (``steps_known`` says which).

Everything is read from journal rows, which outlive the console: a ledger built after a
restart sees what the previous process journaled. Pure functions; callers read the rows.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from console.services.ledger.prices import Pricing
from console.services.ledger.timeline import (
    BADPUT,
    POD_PRIORITY,
    Cause,
    Paint,
    Segment,
    by_detail,
    paint,
    totals,
)
from console.services.model import Event, EventKind, JobStatus
from console.services.record.incidents import LOSS_KINDS, Incident, group, opens
from console.services.record.journal import ACTION, RECOVERED, RECOVERY_FAILED

_ENDED = frozenset(
    {JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.STOPPED, JobStatus.LOST, "PREEMPTED"}
)
# A VM's own preemption (or notice) time is used when it is this close before the row that
# reported it;
# anything else (another clock, a replayed row) falls back to the row's detect_s.
_PREEMPTED_AT_WINDOW_S = 3600.0


# -- what the engine reported ----------------------------------------------------------------------
@dataclass(frozen=True)
class StepPoint:
    at: float
    step: int


@dataclass(frozen=True)
class Progress:
    """One trainer's steps: its logged points, the checkpoint step it resumed from and the
    run it trains ("" where an attempt reports one trainer without naming its run)."""

    points: tuple[StepPoint, ...] = ()
    resumed_from: int | None = None
    run: str = ""

    @property
    def reached(self) -> int | None:
        return max((p.step for p in self.points), default=self.resumed_from)


# The engine's steps per job id (attempt): one trainer, or several (a sweep's trials).
Steps = Mapping[str, Progress | Sequence[Progress]]


def trainers(progress: Steps, job_id: str) -> list[Progress]:
    """The trainers of one attempt that logged a step, in the order they began."""
    p = progress.get(job_id)
    found = [p] if isinstance(p, Progress) else list(p or ())
    return sorted((x for x in found if x.points), key=lambda x: min(q.at for q in x.points))


# -- what the journal says -------------------------------------------------------------------------
@dataclass(frozen=True)
class Attempt:
    job_id: str
    submitted_at: float
    running_at: float | None = None
    ended_at: float | None = None
    status: str = ""
    entrypoint: str = ""


@dataclass(frozen=True)
class IncidentSpan:
    """An incident as time: when the loss happened, was seen, and the recovery ended."""

    id: str
    lost_at: float
    seen_at: float
    ended_at: float
    paints: tuple[Paint, ...]


def attempts(rows: Iterable[Event]) -> dict[str, Attempt]:
    """Each job's submit, first RUNNING and first end, from ``job_state`` and submit rows."""
    out: dict[str, Attempt] = {}
    for e in sorted(rows, key=_order):
        job = str(e.data.get("job_id") or "")
        if not job:
            continue
        a = out.get(job) or Attempt(job, e.at)
        entrypoint = a.entrypoint or str(e.data.get("entrypoint") or "")
        if e.kind == ACTION and e.data.get("action") == "submit" and e.data.get("ok"):
            out[job] = replace(a, submitted_at=min(a.submitted_at, e.at), entrypoint=entrypoint)
        elif e.kind == EventKind.JOB_STATE:
            status = str(e.data.get("new_status") or "")
            running = a.running_at
            if running is None and status == JobStatus.RUNNING:
                running = e.at
            ended = a.ended_at
            if ended is None and status in _ENDED:
                ended = e.at
            out[job] = Attempt(job, min(a.submitted_at, e.at), running, ended, status, entrypoint)
    return out


def chains(rows: Iterable[Event], known: Iterable[str]) -> list[tuple[str, ...]]:
    """Resubmission chains (first job first) over ``known`` job ids, in submit order."""
    successor: dict[str, str] = {}
    for e in rows:
        if e.kind == EventKind.JOB_RESUBMITTED:
            old, new = e.data.get("old_job_id"), e.data.get("new_job_id")
            if old and new:
                successor[str(old)] = str(new)
        elif e.kind == ACTION and isinstance(e.data.get("resubmitted"), Mapping):
            successor.update({str(k): str(v) for k, v in e.data["resubmitted"].items()})
    ids = list(dict.fromkeys([*known, *successor, *successor.values()]))
    followers = set(successor.values())
    out = []
    for root in ids:
        if root in followers:
            continue
        chain, seen = [root], {root}
        while chain[-1] in successor and successor[chain[-1]] not in seen:
            chain.append(successor[chain[-1]])
            seen.add(chain[-1])
        out.append(tuple(chain))
    return out


def incident_spans(rows: Iterable[Event]) -> list[IncidentSpan]:
    """Every incident in ``rows`` as painted time (see the module docstring)."""
    return [_span(x) for x in group(rows) if isinstance(x, Incident) and x.rows]


def _span(inc: Incident) -> IncidentSpan:
    rows = inc.rows
    seen_rows = [e for e in rows if e.kind in LOSS_KINDS or opens(e.kind, e.data)] or [rows[0]]
    seen_at = min(e.at for e in seen_rows)
    lost_at = min(_lost_at(e) for e in seen_rows)
    end = next((e for e in rows if e.kind in (RECOVERED, RECOVERY_FAILED)), None)
    ended_at = end.at if end is not None else max(_row_end(e) for e in rows)
    paints = [Paint(lost_at, seen_at, Cause.DETECT, inc.id)]
    paints.append(Paint(seen_at, ended_at, Cause.RECOVER, "recovery", rank=-1.0))
    waiting: float | None = None
    for e in rows:
        action = str(e.data.get("action", "")) if e.kind == ACTION else ""
        if action.startswith("recovery."):
            step = action.removeprefix("recovery.")
            paints.append(Paint(e.at, _row_end(e), Cause.RECOVER, step, rank=e.at))
        elif e.kind == EventKind.CAPACITY:
            if e.data.get("ok") is False and waiting is None:
                waiting = e.at
            elif e.data.get("ok") is True and waiting is not None:
                paints.append(Paint(waiting, e.at, Cause.CAPACITY, "stockout"))
                waiting = None
        elif e.kind == EventKind.QUOTA_PENDING:
            paints.append(Paint(e.at, ended_at, Cause.CAPACITY, "quota"))
    if waiting is not None:
        paints.append(Paint(waiting, ended_at, Cause.CAPACITY, "stockout"))
    return IncidentSpan(inc.id, lost_at, seen_at, max(ended_at, seen_at), tuple(paints))


def _lost_at(e: Event) -> float:
    # The provider's own time of the loss, as the watchdog's MTTR counts from it: the VM's
    # preemption, or its notice (a notice row is journaled when a poll reads it, up to a
    # poll after the VM's metadata said so)
    times = [
        when
        for key in ("preempted_at", "notice_at")
        if (when := _num(e.data.get(key))) is not None
        and e.at - _PREEMPTED_AT_WINDOW_S <= when <= e.at
    ]
    if times:
        return min(times)
    detect = _num(e.data.get("detect_s"))
    return e.at - detect if detect is not None and detect >= 0 else e.at


def _row_end(e: Event) -> float:
    duration = _num(e.data.get("duration_s")) if e.kind == ACTION else None
    return e.at + duration if duration is not None and duration > 0 else e.at


# -- the ledger ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Unit:
    """One job (its chain), workload or the cluster, over ``[start, end]``."""

    kind: str  # "job", "workload", "cluster"
    name: str
    start: float
    end: float
    segments: tuple[Segment, ...]
    members: tuple[str, ...] = ()
    redone_steps: int = 0
    steps_known: bool = False
    incidents: tuple[str, ...] = ()

    @property
    def wall_s(self) -> float:
        return self.end - self.start

    @property
    def seconds(self) -> dict[Cause, float]:
        return totals(self.segments)

    @property
    def productive_s(self) -> float:
        return self.seconds[Cause.PRODUCTIVE]

    @property
    def badput_s(self) -> float:
        return sum(v for c, v in self.seconds.items() if c in BADPUT)

    @property
    def goodput(self) -> float | None:
        return self.productive_s / self.wall_s if self.wall_s > 0 else None

    @property
    def recover_steps(self) -> dict[str, float]:
        return by_detail(self.segments, Cause.RECOVER)

    def to_json(self, pricing: Pricing | None = None) -> dict[str, Any]:
        out: dict[str, Any] = {
            "kind": self.kind,
            "name": self.name,
            "start": self.start,
            "end": self.end,
            "wall_s": round(self.wall_s, 3),
            "goodput": None if self.goodput is None else round(self.goodput, 4),
            "seconds": {str(c): round(v, 3) for c, v in self.seconds.items()},
            "recover_steps": {k: round(v, 3) for k, v in self.recover_steps.items()},
            "redone_steps": self.redone_steps,
            "steps_known": self.steps_known,
            "incidents": list(self.incidents),
            "segments": [
                [round(s.start - self.start, 3), round(s.seconds, 3), str(s.cause), s.detail]
                for s in self.segments
            ],
        }
        if self.members:
            out["jobs"] = list(self.members)
        if pricing is not None:
            out["money"] = pricing.money(self.wall_s, self.productive_s)
        return out


@dataclass(frozen=True)
class Ledger:
    start: float
    end: float
    cluster: Unit
    units: tuple[Unit, ...]
    pricing: Pricing
    notes: tuple[str, ...] = field(default=())
    spans: tuple[IncidentSpan, ...] = ()

    def incidents(self) -> list[dict[str, Any]]:
        """Each incident in the range: when it was lost, and the pod's time it cost by cause
        (recovery per step), from the pod's painted segments (what the totals count)."""
        out = []
        for span in self.spans:
            a, b = max(span.lost_at, self.start), min(span.ended_at, self.end)
            if b <= a:
                continue
            clipped = [
                Segment(max(a, s.start), min(b, s.end), s.cause, s.detail)
                for s in self.cluster.segments
                if s.end > a and s.start < b
            ]
            seconds = totals(clipped)
            out.append(
                {
                    "incident": span.id,
                    "lost_at": span.lost_at,
                    "wall_s": round(b - a, 3),
                    "detect_s": round(seconds[Cause.DETECT], 3),
                    "capacity_s": round(seconds[Cause.CAPACITY], 3),
                    "recover_s": round(seconds[Cause.RECOVER], 3),
                    "recover_steps": {
                        k: round(v, 3) for k, v in by_detail(clipped, Cause.RECOVER).items()
                    },
                }
            )
        return out

    @property
    def money(self) -> dict[str, Any]:
        return self.pricing.money(self.cluster.wall_s, self.cluster.productive_s)

    def headline(self) -> str:
        """One line: goodput, the largest badput, and what spot saved or lost."""
        c = self.cluster
        if c.goodput is None:
            return "ledger: no time recorded in this range"
        bad = sorted(((v, k) for k, v in c.seconds.items() if k in BADPUT and v > 0), reverse=True)
        worst = ", ".join(f"{k} {dur(v)}" for v, k in bad[:3]) or "none"
        return f"goodput {c.goodput:.1%} of {dur(c.wall_s)}; badput: {worst}; {self.pricing.verdict(c.wall_s, c.productive_s)}"

    def to_json(self) -> dict[str, Any]:
        c = self.cluster
        return {
            "start": self.start,
            "end": self.end,
            "headline": self.headline(),
            "goodput": None if c.goodput is None else round(c.goodput, 4),
            "wall_s": round(c.wall_s, 3),
            "productive_s": round(c.productive_s, 3),
            "badput_s": {str(k): round(v, 3) for k, v in c.seconds.items() if k in BADPUT},
            "recover_steps": {k: round(v, 3) for k, v in c.recover_steps.items()},
            "money": self.money,
            "prices": self.pricing.to_json(),
            "cluster": c.to_json(self.pricing),
            "jobs": [u.to_json(self.pricing) for u in self.units],
            "incidents": self.incidents(),
            "notes": list(self.notes),
        }


def account(
    rows: Iterable[Event],
    pricing: Pricing,
    *,
    start: float | None = None,
    end: float | None = None,
    progress: Steps | None = None,
    outcomes: Mapping[str, float] | None = None,
) -> Ledger:
    """The ledger of ``rows`` over ``[start, end]`` (default: the rows' own span).

    ``progress``: the engine's steps per job id (attempt), one trainer or several;
    ``outcomes``: when each job ended as
    ``record.outcomes`` recorded it (the cluster's end time, also for a job that ended while
    no console watched: its row is only written when the next console sees it).
    """
    rows = sorted(rows, key=_order)
    if not rows and (start is None or end is None):
        empty = Unit("cluster", "cluster", 0.0, 0.0, ())
        return Ledger(0.0, 0.0, empty, (), pricing, ("no journal rows in this range",))
    t0 = rows[0].at if start is None else start
    t1 = max(max(_row_end(e) for e in rows), t0) if end is None else end
    progress = progress or {}
    found = attempts(rows)
    for job, ended in (outcomes or {}).items():
        # A job that ended while no console watched is journaled when the next one starts
        # (a later row); its recorded end (the cluster's own end time) is when it ended.
        a = found.get(job)
        if a is not None and (a.ended_at is None or ended < a.ended_at):
            found[job] = replace(a, ended_at=max(ended, a.running_at or a.submitted_at))
    spans = incident_spans(rows)
    workloads = {str(e.data["workload"]) for e in rows if e.data.get("workload")}
    units = []
    for chain in chains(rows, found):
        tries = [found[j] for j in chain if j in found]
        if not tries:
            continue
        unit = _job_unit(chain, tries, spans, progress, t0, t1, workloads)
        if unit is not None:
            units.append(unit)
    cluster = _cluster_unit(units, spans, t0, t1)
    notes = []
    if units and not any(u.steps_known for u in units):
        notes.append("no engine steps read: warm-up and redone work are counted as productive")
    return Ledger(t0, t1, cluster, tuple(units), pricing, tuple(notes), tuple(spans))


def _job_unit(
    chain: Sequence[str],
    tries: Sequence[Attempt],
    spans: Sequence[IncidentSpan],
    progress: Steps,
    t0: float,
    t1: float,
    workloads: set[str],
) -> Unit | None:
    first = min(a.submitted_at for a in tries)
    last = tries[-1]
    end_at = last.ended_at if last.ended_at is not None else t1
    start, end = max(first, t0), min(end_at, t1)
    if end <= start:
        return None
    paints: list[Paint] = []
    for a in tries:
        if a.running_at is not None:
            paints.append(Paint(a.running_at, a.ended_at or t1, Cause.PRODUCTIVE, a.job_id))
    hit = [s for s in spans if s.ended_at > first and s.lost_at < end_at]
    for s in hit:
        paints += s.paints
    redone, known = _step_paints(tries, progress, t1, paints)
    segments = paint(start, end, Cause.QUEUED, paints)
    kind = "workload" if chain[0] in workloads else "job"
    inside = tuple(s.id for s in hit if s.ended_at > start and s.lost_at < end)
    return Unit(kind, chain[0], start, end, tuple(segments), tuple(chain), redone, known, inside)


def _step_paints(
    tries: Sequence[Attempt], progress: Steps, t1: float, paints: list[Paint]
) -> tuple[int, bool]:
    """Warm-up and redone paints from the engine's steps; returns (redone steps, known)."""
    reached: dict[str, int] = {}  # per run: the highest step its trainers so far logged
    redone = 0
    known = False
    for a in tries:
        found = trainers(progress, a.job_id)
        if not found:
            continue
        known = True
        first_at = min(q.at for p in found for q in p.points)
        if a.running_at is not None and first_at > a.running_at:
            paints.append(Paint(a.running_at, first_at, Cause.WARMUP, a.job_id))
        for p in found:
            points = sorted(p.points, key=lambda x: x.at)
            # Without the checkpoint step, the first logged step bounds it from above: the
            # redone work counted is then at most one logging interval short.
            resumed = p.resumed_from if p.resumed_from is not None else points[0].step
            before = reached.get(p.run)
            if before is not None and before > resumed:
                # what it computed again: from where it resumed up to the step the run had
                # reached, or as far as it got (a trainer lost before it caught up redid less;
                # the next one's redone work counts from where that one resumed)
                redone += min(before, p.reached if p.reached is not None else before) - resumed
                caught = next((x.at for x in points if x.step >= before), a.ended_at or t1)
                paints.append(Paint(points[0].at, caught, Cause.REDONE, a.job_id))
            top = p.reached
            if top is not None:
                reached[p.run] = top if before is None else max(before, top)
    return redone, known


def _cluster_unit(
    units: Sequence[Unit], spans: Sequence[IncidentSpan], t0: float, t1: float
) -> Unit:
    """The pod over the range: productive while any job trained, the incidents over all,
    idle where no job was (``POD_PRIORITY``)."""
    paints = [
        Paint(s.start, s.end, s.cause, s.detail)
        for u in units
        for s in u.segments
        if s.cause in (Cause.PRODUCTIVE, Cause.WARMUP, Cause.REDONE, Cause.QUEUED)
    ]
    for s in spans:
        paints += s.paints
    segments = paint(t0, t1, Cause.IDLE, paints, POD_PRIORITY)
    merged = _merge_details(segments)
    ids = tuple(s.id for s in spans if s.ended_at > t0 and s.lost_at < t1)
    return Unit(
        "cluster",
        "cluster",
        t0,
        t1,
        tuple(merged),
        tuple(m for u in units for m in u.members),
        sum(u.redone_steps for u in units),
        any(u.steps_known for u in units),
        ids,
    )


def _merge_details(segments: Sequence[Segment]) -> list[Segment]:
    """Job ids do not matter on the cluster's bar: adjacent productive runs are one."""
    out: list[Segment] = []
    for s in segments:
        detail = s.detail if s.cause is Cause.RECOVER else ""
        if out and out[-1].cause is s.cause and out[-1].detail == detail:
            out[-1] = Segment(out[-1].start, s.end, s.cause, detail)
        else:
            out.append(Segment(s.start, s.end, s.cause, detail))
    return out


def dur(seconds: float) -> str:
    """``42.0s``, ``13m20s``, ``2h40m``: as the Ledger screen and the report write them."""
    s = max(0.0, seconds)
    if s < 60:
        return f"{s:.1f}s"
    m, sec = divmod(round(s), 60)
    if m < 60:
        return f"{m}m{sec:02d}s"
    h, m = divmod(m, 60)
    return f"{h}h{m:02d}m"


def _order(e: Event) -> tuple[float, int]:
    return (e.at, e.id if e.id is not None else 1 << 62)


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None
