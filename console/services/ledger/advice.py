"""Checkpoint-interval advice: the Young/Daly interval from what a save costs and how often
the job is interrupted, and the badput it expects at the current and the advised interval.

Sources:

- J. W. Young, "A first order approximation to the optimum checkpoint interval",
  Communications of the ACM 17(9), 1974: ``tau = sqrt(2 C M)``.
- J. T. Daly, "A higher order estimate of the optimum checkpoint interval for restart dumps",
  Future Generation Computer Systems 22(3), 2006, doi:10.1016/j.future.2004.11.016:
  ``tau = sqrt(2 C M) [1 + (1/3) sqrt(C / 2M) + (1/9) (C / 2M)] - C`` for ``C < 2M``, else
  ``tau = M``. This is the interval the console advises (Young's is reported beside it).

``tau`` is the compute time between two checkpoints, ``C`` the time one save keeps training
stopped (the engine logs each one's pause: ``engine.contract.CHECKPOINT_SAVED``), ``M`` the
mean time between interruptions of the job (Poisson failures, as both papers assume).

Badput model (first order, the cost Young minimises; restart time is left out because it
does not depend on the interval): each ``tau`` of work pays ``C`` to save, a fraction
``C / tau``; an interruption, one per ``M`` on average, loses on average half a segment,
``(tau + C) / 2``, a fraction ``(tau + C) / (2 M)``. Their sum, capped at 1, is the expected
badput fraction. Its minimum is at Young's ``tau``.

``M`` comes from the journal: preemption rows (``PREEMPTED``, ``HOST_LOST``, ``HEAD_LOST``)
are grouped into interruptions (one reclaim writes a row per host and one for the head): by
the incident id the journal stamps on them, else (rows from before incidents) rows within
``MERGE_S`` of each other; ``M`` is the observed up time (the span less each interruption's
recovery, loss to training again) over their number. A job spans the whole pod, so any
host's loss interrupts it: that is the job's ``M``; the rate per VM-hour (hosts lost over the
pod's VM-hours) is reported beside it.
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from console.services.ledger.goodput import incident_spans
from console.services.model import Event, EventKind
from console.services.record.incidents import incident_of
from engine.contract import (
    CHECKPOINT_ADVICE_REASON,
    CHECKPOINT_ADVICE_STEPS,
    parse_checkpoint_saved,
)

PREEMPTION_KINDS = frozenset({EventKind.PREEMPTED, EventKind.HOST_LOST, EventKind.HEAD_LOST})
# unstamped rows closer than this belong to one interruption (a reclaim's rows land within a
# poll or two of each other)
MERGE_S = 2.0


# -- the formulas ----------------------------------------------------------------------------------
def young_interval(cost_s: float, mtbf_s: float) -> float:
    """Young (1974): ``sqrt(2 C M)`` seconds of work between checkpoints."""
    _check(cost_s, mtbf_s)
    return math.sqrt(2.0 * cost_s * mtbf_s)


def daly_interval(cost_s: float, mtbf_s: float) -> float:
    """Daly (2006), higher order: see the module docstring; ``M`` when ``C >= 2M``."""
    _check(cost_s, mtbf_s)
    if cost_s >= 2.0 * mtbf_s:
        return mtbf_s
    ratio = cost_s / (2.0 * mtbf_s)
    tau = math.sqrt(2.0 * cost_s * mtbf_s) * (1.0 + math.sqrt(ratio) / 3.0 + ratio / 9.0) - cost_s
    return max(tau, 0.0)  # C = 0 gives 0 exactly; never a negative interval from rounding


def expected_badput(interval_s: float, cost_s: float, mtbf_s: float) -> float:
    """Expected badput fraction at ``interval_s`` of work between saves (module docstring)."""
    _check(cost_s, mtbf_s)
    if interval_s <= 0:
        return 1.0 if cost_s > 0 else min(1.0, cost_s / (2.0 * mtbf_s))
    return min(1.0, cost_s / interval_s + (interval_s + cost_s) / (2.0 * mtbf_s))


def _check(cost_s: float, mtbf_s: float) -> None:
    if not (cost_s >= 0 and math.isfinite(cost_s)):
        raise ValueError(f"checkpoint cost must be a finite number of seconds >= 0, got {cost_s}")
    if not (mtbf_s > 0 and math.isfinite(mtbf_s)):
        raise ValueError(f"mean time between preemptions must be > 0 s, got {mtbf_s}")


# The engine's progress line (``engine.metrics``): SB3's fps is steps over the training time of
# the current ``learn`` call, which excludes the saves between calls: the rate tau is in.
_PROGRESS_FPS = re.compile(r"\[engine\] progress step=\d+/\d+ .*?\bfps=(?P<fps>\d+(?:\.\d+)?)\b")


# -- the measurements ------------------------------------------------------------------------------
def training_rate(lines: Iterable[str]) -> float | None:
    """Median steps/s of the ``fps`` a job's progress lines report, or None without one."""
    rates = [float(m["fps"]) for m in map(_PROGRESS_FPS.search, lines) if m is not None]
    rates = [r for r in rates if r > 0]
    return statistics.median(rates) if rates else None


def checkpoint_cost(lines: Iterable[str]) -> float | None:
    """Mean pause (s) of the saves a job's log reports, or None when it reports none.

    The mean, not the median: the badput Young minimises is every save's cost summed, so a
    save slowed by a neighbour's I/O is paid in full. On a shared disk the pauses are heavy
    tailed (the bench: median 11 ms, mean 37 ms over 41 saves), and the median advised
    saving three times too often.
    """
    seconds = [s.seconds for s in map(parse_checkpoint_saved, lines) if s is not None]
    return statistics.fmean(seconds) if seconds else None


@dataclass(frozen=True)
class PreemptionRate:
    """Interruptions seen in ``span_s`` of a pod of ``hosts`` VMs."""

    interruptions: int
    hosts_lost: int  # hosts named across those interruptions (at least one each)
    span_s: float
    hosts: int

    @property
    def mtbf_s(self) -> float | None:
        """Mean time between interruptions of a job on the pod, or None before the first."""
        return self.span_s / self.interruptions if self.interruptions else None

    @property
    def per_vm_hour(self) -> float:
        vm_hours = self.span_s * self.hosts / 3600.0
        return self.hosts_lost / vm_hours if vm_hours > 0 else 0.0


def preemption_rate(
    events: Iterable[Event], start: float, end: float, hosts: int, merge_s: float = MERGE_S
) -> PreemptionRate:
    """Group the preemption rows in ``[start, end]`` into interruptions (``merge_s``)."""
    if end <= start:
        raise ValueError(f"observed span must be positive, got {start}..{end}")
    if hosts < 1:
        raise ValueError(f"a pod has at least one host, got {hosts}")
    rows = sorted(
        (e for e in events if e.kind in PREEMPTION_KINDS and start <= e.at <= end),
        key=lambda e: e.at,
    )
    by_incident: dict[str, set[str]] = {}
    unstamped: list[set[str]] = []
    last = -math.inf
    for ev in rows:
        incident = incident_of(ev)
        if incident:
            hosts_of = by_incident.setdefault(incident, set())
        else:
            if ev.at - last > merge_s:
                unstamped.append(set())
            last = ev.at
            hosts_of = unstamped[-1]
        if ev.host:
            hosts_of.add(ev.host)
    groups = [*by_incident.values(), *unstamped]
    lost = sum(max(1, len(g)) for g in groups)
    return PreemptionRate(len(groups), lost, end - start, hosts)


def down_seconds(events: Iterable[Event], start: float, end: float) -> float:
    """Seconds of ``[start, end]`` a job spent interrupted: from each preemption's loss to
    the end of its incident (the watchdog's ``recovered`` row: training again), overlaps
    merged. Incident rows are needed (all of the journal's rows, not only the preemptions');
    unstamped preemption rows count no downtime."""
    events = list(events)
    ids = {incident_of(e) for e in events if e.kind in PREEMPTION_KINDS} - {""}
    spans = sorted(
        (max(start, s.lost_at), min(end, s.ended_at)) for s in incident_spans(events) if s.id in ids
    )
    down, reach = 0.0, start
    for a, b in spans:
        a = max(a, reach)
        if b > a:
            down, reach = down + b - a, b
    return down


def mean_time_between_preemptions(
    events: Iterable[Event], start: float, end: float, hosts: int = 1, merge_s: float = MERGE_S
) -> float | None:
    """``M`` in seconds from journal rows over ``[start, end]``, or None when none was seen.

    Counted in up time: a recovery's downtime (``down_seconds``) is no time between
    preemptions (nothing runs to be reclaimed), and it lengthened M by as much as the
    recoveries took (27 s against 20 s of training between reclaims in the bench).
    """
    events = list(events)
    rate = preemption_rate(events, start, end, hosts, merge_s)
    if not rate.interruptions:
        return None
    up = rate.span_s - down_seconds(events, start, end)
    return up / rate.interruptions if up > 0 else None


# -- the advice ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class NoAdvice:
    """Why there is no advice yet (said, never silent)."""

    why: str

    def render(self) -> str:
        return f"no checkpoint advice: {self.why}"


@dataclass(frozen=True)
class Advice:
    steps: int  # env steps between checkpoints (the engine rounds up to its n_envs)
    interval_s: float  # Daly's interval
    young_s: float
    cost_s: float
    mtbf_s: float
    steps_per_s: float
    current_steps: int
    badput_current: float
    badput_advised: float

    @property
    def reason(self) -> str:
        return f"Young/Daly, C={self.cost_s:.3g}s, M={self.mtbf_s:.0f}s"

    def render(self) -> str:
        return (
            f"checkpoint every {self.steps} steps ({self.interval_s:.3g}s of training at "
            f"{self.steps_per_s:.3g} steps/s; {self.reason}): expected badput at the current "
            f"interval ({self.current_steps} steps) {self.badput_current:.1%} vs at the advised "
            f"interval {self.badput_advised:.1%}"
        )

    def env(self) -> dict[str, str]:
        """What ``--checkpoint-every auto`` reads (``engine.contract``)."""
        return {CHECKPOINT_ADVICE_STEPS: str(self.steps), CHECKPOINT_ADVICE_REASON: self.reason}


def advise(
    cost_s: float | None,
    mtbf_s: float | None,
    steps_per_s: float | None,
    current_steps: int,
) -> Advice | NoAdvice:
    """The advised interval in steps, or why there is none."""
    if cost_s is None:
        return NoAdvice("no checkpoint save measured yet (the engine logs each one's duration)")
    if mtbf_s is None:
        return NoAdvice("no preemption seen yet, so the time between preemptions is unknown")
    if steps_per_s is None or not steps_per_s > 0 or not math.isfinite(steps_per_s):
        return NoAdvice("no training step rate measured yet")
    if cost_s == 0:
        return NoAdvice(
            "a save measured 0 s (below the log's 1 ms): Young/Daly gives an interval of 0, "
            "so any interval costs nothing to save; keep the current one"
        )
    tau = daly_interval(cost_s, mtbf_s)
    current_s = current_steps / steps_per_s
    return Advice(
        steps=max(1, round(tau * steps_per_s)),
        interval_s=tau,
        young_s=young_interval(cost_s, mtbf_s),
        cost_s=cost_s,
        mtbf_s=mtbf_s,
        steps_per_s=steps_per_s,
        current_steps=current_steps,
        badput_current=expected_badput(current_s, cost_s, mtbf_s),
        badput_advised=expected_badput(tau, cost_s, mtbf_s),
    )


def advice_env(advice: Advice | NoAdvice | None) -> Mapping[str, str]:
    """The job env vars for ``advice``: none without advice (the engine then says so)."""
    return advice.env() if isinstance(advice, Advice) else {}
