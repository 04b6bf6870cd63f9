"""Preemption rates per zone and accelerator, with an exact confidence interval, and the
risk order the capacity failover (``failover = "risk-aware"``) tries zones in.

**What is counted.** A preemption is one reclaim: the rows one reclaim writes (a row per host
lost and one for the head) are grouped as ``advice.preemption_rate`` groups them (by the
incident id the journal stamps on them, else rows within ``MERGE_S``). A reclaim of a whole
slice is one preemption, not one per VM: its VMs do not fail independently, and counting
them one by one would make the interval too narrow.

**Exposure.** VM-hours the pod was up in each zone: ``hosts`` x the wall time in the zone,
less each preemption's down time (the hosts it took, from the loss, at the provider's
preemption time when the row carries it, to the next ``recovered``/``recovery_failed`` row or
the next capacity ``ok`` row). Which zone the pod was
in comes from the rows that say so: a loss row carries the zone the pod was in
(``data.zone``, stamped by the detector), a capacity row with ``ok`` the zone the slice was
got back in. Between two such rows the pod was where the later loss row says, else where the
earlier row left it; before the first one, in ``default_zone`` (the configured zone).

**Rate and interval.** ``k`` preemptions over ``T`` VM-hours: rate ``k / T`` per VM-hour, and
the exact (Garwood 1936) Poisson interval ``[chi2(a/2; 2k) / 2T, chi2(1-a/2; 2k+2) / 2T]``.
The chi-square quantiles are found here from the Poisson CDF (the identity
``P(Poisson(mu) <= k) = P(chi2(2k+2) > 2 mu)``) by bisection, so the console needs no
statistics package: ``upper`` solves ``P(X <= k | mu) = a/2``, ``lower`` solves
``P(X >= k | mu) = a/2``.

**Risk order.** Zones are ordered by the *upper* bound of their rate, not the mean: a zone
seen for a few minutes without a preemption has a mean of 0 and proves nothing, while its
upper bound is large until hours of calm are seen; ranking by the upper bound prefers
evidence of calm to absence of evidence, and as evidence grows the upper bound converges to
the mean. Ties (zones never used: an unbounded upper) keep the configured order, the zone
just lost last among equals.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from console.services.ledger.advice import MERGE_S, PREEMPTION_KINDS
from console.services.model import Event, EventKind
from console.services.record.incidents import incident_of
from console.services.record.journal import RECOVERED, RECOVERY_FAILED, Journal

CONFIDENCE = 0.95


# -- the interval ----------------------------------------------------------------------------------
def poisson_cdf(k: int, mu: float) -> float:
    """``P(X <= k)`` for ``X ~ Poisson(mu)``, summed in log space (exact for any ``k``)."""
    if k < 0:
        return 0.0
    if mu <= 0:
        return 1.0
    log_term = -mu  # log of P(X = 0)
    total = math.exp(log_term)
    for i in range(1, k + 1):
        log_term += math.log(mu) - math.log(i)
        total += math.exp(log_term)
    return min(1.0, total)


def _solve(f: Any, target: float, lo: float, hi: float) -> float:
    """``mu`` in ``[lo, hi]`` with ``f(mu) = target`` for ``f`` decreasing in ``mu``."""
    while f(hi) > target:  # widen until the root is bracketed
        hi *= 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if f(mid) > target:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-12 * max(1.0, hi):
            break
    return 0.5 * (lo + hi)


def garwood(k: int, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """The exact two-sided interval for the mean ``mu`` of a Poisson count ``k``."""
    if k < 0:
        raise ValueError(f"a count is >= 0, got {k}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    a = (1.0 - confidence) / 2.0
    top = k + 10.0 * math.sqrt(k + 1.0) + 10.0
    upper = _solve(lambda mu: poisson_cdf(k, mu), a, 0.0, top)
    if k == 0:
        return 0.0, upper
    # P(X >= k | mu) = 1 - P(X <= k-1 | mu) rises with mu: solve P(X <= k-1) = 1 - a
    lower = _solve(lambda mu: poisson_cdf(k - 1, mu), 1.0 - a, 0.0, top)
    return lower, upper


# -- the rates -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ZoneRate:
    """Preemptions of the pod in one zone over the VM-hours it was up there."""

    zone: str
    accelerator: str
    preemptions: int
    vm_hours: float
    confidence: float = CONFIDENCE

    @property
    def rate(self) -> float | None:
        """Preemptions per VM-hour (None before any hour was seen)."""
        return self.preemptions / self.vm_hours if self.vm_hours > 0 else None

    @property
    def interval(self) -> tuple[float, float]:
        """The rate's exact interval per VM-hour; ``(0, inf)`` with no exposure."""
        if self.vm_hours <= 0:
            return 0.0, math.inf
        lo, hi = garwood(self.preemptions, self.confidence)
        return lo / self.vm_hours, hi / self.vm_hours

    @property
    def risk(self) -> float:
        """What the failover ranks by: the interval's upper bound (module docstring)."""
        return self.interval[1]

    def text(self) -> str:
        lo, hi = self.interval
        where = f"{self.zone} {self.accelerator}".strip()
        if self.rate is None:
            return f"{where}: never up (no estimate)"
        return (
            f"{where}: {self.rate:.3g}/VM-h [{lo:.3g}, {hi:.3g}] at {self.confidence:.0%} "
            f"({self.preemptions} in {self.vm_hours:.3g} VM-h)"
        )

    def to_json(self) -> dict[str, Any]:
        lo, hi = self.interval
        return {
            "zone": self.zone,
            "accelerator": self.accelerator,
            "preemptions": self.preemptions,
            "vm_hours": round(self.vm_hours, 6),
            "rate_per_vm_hour": self.rate,
            "low": lo,
            "high": None if math.isinf(hi) else hi,
            "confidence": self.confidence,
        }


@dataclass
class _Loss:
    at: float
    zone: str
    accelerator: str
    hosts: set[str]
    back_at: float | None = None


def _losses(rows: Sequence[Event], merge_s: float) -> list[_Loss]:
    """Preemption rows grouped into reclaims (as ``advice.preemption_rate`` groups them)."""
    by_incident: dict[str, _Loss] = {}
    unstamped: list[_Loss] = []
    last = -math.inf
    for ev in rows:
        if ev.kind not in PREEMPTION_KINDS:
            continue
        zone, accel = str(ev.data.get("zone") or ""), str(ev.data.get("accelerator") or "")
        incident = incident_of(ev)
        if incident and incident in by_incident:
            loss = by_incident[incident]
        elif not incident and unstamped and ev.at - last <= merge_s:
            loss = unstamped[-1]
        else:
            loss = _Loss(_loss_time(ev), zone, accel, set())
            if incident:
                by_incident[incident] = loss
            else:
                unstamped.append(loss)
        if not incident:
            last = ev.at
        loss.zone = loss.zone or zone
        loss.accelerator = loss.accelerator or accel
        if ev.host:
            loss.hosts.add(ev.host)
    return sorted([*by_incident.values(), *unstamped], key=lambda g: g.at)


def _loss_time(ev: Event) -> float:
    """When the provider says the VM went (``data.preempted_at``), else when it was seen."""
    said = ev.data.get("preempted_at")
    if isinstance(said, int | float) and not isinstance(said, bool) and said < ev.at:
        return float(said)
    return ev.at


def zone_rates(
    events: Iterable[Event],
    *,
    start: float,
    end: float,
    hosts: int,
    default_zone: str,
    accelerator: str = "",
    zones: Sequence[str] = (),
    confidence: float = CONFIDENCE,
    merge_s: float = MERGE_S,
) -> dict[tuple[str, str], ZoneRate]:
    """Rates per (zone, accelerator) over ``[start, end]`` (module docstring).

    ``zones``: zones to report even if the pod was never there (no exposure). ``accelerator``:
    the pod's type for rows that do not name one.
    """
    if end <= start:
        raise ValueError(f"observed span must be positive, got {start}..{end}")
    if hosts < 1:
        raise ValueError(f"a pod has at least one host, got {hosts}")
    rows = sorted((e for e in events if start <= e.at <= end), key=lambda e: (e.at, e.id or 0))
    losses = _losses(rows, merge_s)
    for loss in losses:  # when each came back: the next recovery end or slice got back
        for ev in rows:
            if ev.at > loss.at and (
                ev.kind in (RECOVERED, RECOVERY_FAILED)
                or (ev.kind == EventKind.CAPACITY and ev.data.get("ok") is True)
            ):
                loss.back_at = ev.at
                break
    # Zone markers: (time, zone, is_loss). A loss says where the pod was up to it; a capacity
    # ok says where it is from then on.
    markers: list[tuple[float, str, bool]] = [(g.at, g.zone, True) for g in losses if g.zone]
    markers += [
        (e.at, str(e.data.get("zone")), False)
        for e in rows
        if e.kind == EventKind.CAPACITY and e.data.get("ok") is True and e.data.get("zone")
    ]
    markers.sort(key=lambda m: m[0])
    exposure: dict[str, float] = {}
    edges = [start, *(m[0] for m in markers), end]
    for i in range(len(edges) - 1):
        left, right = edges[i], edges[i + 1]
        after = markers[i] if i < len(markers) else None  # the marker at ``right``
        before = markers[i - 1] if i > 0 else None  # the marker at ``left``
        if after is not None and after[2]:
            zone = after[1]
        elif before is not None:
            zone = before[1]
        else:
            zone = default_zone
        exposure[zone] = exposure.get(zone, 0.0) + (right - left) * hosts
    # One pod has one type: ``accelerator``, else the one its loss rows name.
    accel = accelerator or next((g.accelerator for g in losses if g.accelerator), "")
    counts: dict[str, int] = {}
    for loss in losses:
        zone = loss.zone or _zone_at(loss.at, markers, default_zone)
        counts[zone] = counts.get(zone, 0) + 1
        down = ((loss.back_at if loss.back_at is not None else end) - loss.at) * min(
            hosts, max(1, len(loss.hosts))
        )
        exposure[zone] = max(0.0, exposure.get(zone, 0.0) - down)
    names = sorted(set(counts) | set(exposure) | set(zones))
    return {
        (z, accel): ZoneRate(z, accel, counts.get(z, 0), exposure.get(z, 0.0) / 3600.0, confidence)
        for z in names
    }


def journal_rates(
    journal: Journal,
    *,
    now: float,
    hosts: int,
    default_zone: str,
    accelerator: str = "",
    zones: Sequence[str] = (),
) -> dict[tuple[str, str], ZoneRate]:
    """``zone_rates`` over the journal's whole span (its first row to ``now``): the console
    watched the pod for that long. Empty before any row."""
    first = journal.read("SELECT MIN(at) FROM events")[0][0]
    if first is None or now <= float(first):
        return {}
    kinds = [*PREEMPTION_KINDS, RECOVERED, RECOVERY_FAILED, EventKind.CAPACITY]
    rows = journal.query(limit=1_000_000, kinds=kinds)
    return zone_rates(
        rows,
        start=float(first),
        end=now,
        hosts=hosts,
        default_zone=default_zone,
        accelerator=accelerator,
        zones=zones,
    )


def order_event(order: RiskOrder, at: float) -> Event:
    """The journal row of a risk-aware choice: the order, and the rates it came from."""
    return Event(
        at=at,
        kind=EventKind.CAPACITY,
        message=f"zones in order {', '.join(order.zones)}: {order.reason}",
        actor="watchdog",
        data=order.to_json(),
    )


def _zone_at(t: float, markers: Sequence[tuple[float, str, bool]], default: str) -> str:
    zone = default
    for at, z, is_loss in markers:
        if at > t:
            return z if is_loss else zone
        zone = z
    return zone


# -- the failover order ----------------------------------------------------------------------------
@dataclass(frozen=True)
class RiskOrder:
    """The zones to try, calmest first, and why."""

    zones: tuple[str, ...]
    rates: Mapping[str, ZoneRate]

    @property
    def reason(self) -> str:
        parts = [
            self.rates[z].text() if z in self.rates else f"{z}: no estimate" for z in self.zones
        ]
        return "risk-aware (by the rate's upper bound): " + "; ".join(parts)

    def to_json(self) -> dict[str, Any]:
        return {
            "failover": "risk-aware",
            "ranked_by": "upper bound",
            "order": list(self.zones),
            "rates": {z: self.rates[z].to_json() for z in self.zones if z in self.rates},
        }


def risk_order(zones: Sequence[str], lost: str, rates: Mapping[str, ZoneRate]) -> RiskOrder:
    """``zones`` by the upper bound of their rate; ties in configured order, ``lost`` last."""
    index = {z: i for i, z in enumerate(zones)}

    def key(z: str) -> tuple[float, bool, int]:
        rate = rates.get(z)
        return (rate.risk if rate is not None else math.inf, z == lost, index[z])

    return RiskOrder(tuple(sorted(zones, key=key)), dict(rates))


def rates_by_zone(rates: Mapping[tuple[str, str], ZoneRate]) -> dict[str, ZoneRate]:
    """The rates keyed by zone alone (the failover moves one pod, of one type)."""
    return {zone: rate for (zone, _accel), rate in rates.items()}
