"""Preemption rates per zone: the exact Poisson interval, and journal rows from a known process.

The rows are what the console journals for a seeded Poisson process of reclaims per zone (one
row per host lost, stamped with the incident and the zone; a ``recovered`` row when the
recovery ends; a capacity ``ok`` row when a failover moves the slice): the estimate must be
covered by its interval as often as the interval promises.
"""

from __future__ import annotations

import math
import random

import pytest

from console.services.ledger.rates import (
    garwood,
    poisson_cdf,
    rates_by_zone,
    risk_order,
    zone_rates,
)
from console.services.model import Event, EventKind

HOSTS = 4


def test_poisson_cdf_matches_the_sum() -> None:
    mu = 3.7
    by_hand = sum(math.exp(-mu) * mu**i / math.factorial(i) for i in range(6))
    assert poisson_cdf(5, mu) == pytest.approx(by_hand, rel=1e-12)
    assert poisson_cdf(0, 0.0) == 1.0
    assert poisson_cdf(-1, 1.0) == 0.0


@pytest.mark.parametrize("k", [0, 1, 2, 5, 17, 120])
def test_garwood_is_the_chi_square_interval(k: int) -> None:
    chi2 = pytest.importorskip("scipy.stats").chi2
    lo, hi = garwood(k, 0.95)
    want_lo = 0.0 if k == 0 else chi2.ppf(0.025, 2 * k) / 2
    assert lo == pytest.approx(want_lo, rel=1e-7, abs=1e-12)
    assert hi == pytest.approx(chi2.ppf(0.975, 2 * k + 2) / 2, rel=1e-7)


def test_garwood_known_values() -> None:
    # Garwood (1936) / the usual tables: k=0 -> [0, 3.689], k=10 -> [4.795, 18.39]
    assert garwood(0)[1] == pytest.approx(3.6889, abs=1e-4)
    lo, hi = garwood(10)
    assert (lo, hi) == (pytest.approx(4.7954, abs=1e-4), pytest.approx(18.390, abs=1e-3))
    with pytest.raises(ValueError, match="confidence"):
        garwood(3, 1.5)


def simulate(
    seed: int, plan: list[tuple[str, float, float]], down_s: float = 120.0
) -> tuple[list[Event], float]:
    """Journal rows of ``plan`` = [(zone, hours up there, rate per VM-hour)], in order: a
    Poisson process of whole-slice reclaims at ``rate * HOSTS`` per hour of the slice being
    up; each reclaim writes a row per host (stamped with its incident and zone) and a
    ``recovered`` row ``down_s`` later; a move to the next zone writes a capacity ok row."""
    rng = random.Random(seed)
    rows: list[Event] = []
    t = 1_000_000.0
    n = 0
    for i, (zone, hours, rate) in enumerate(plan):
        if i:
            rows.append(
                Event(
                    t,
                    EventKind.CAPACITY,
                    f"got the slice in {zone}",
                    data={"zone": zone, "ok": True},
                )
            )
        up_left = hours * 3600.0
        while True:
            gap = rng.expovariate(rate * HOSTS / 3600.0)
            if gap >= up_left:
                t += up_left
                break
            up_left -= gap
            t += gap
            n += 1
            for h in range(HOSTS):
                rows.append(
                    Event(
                        t + h * 0.01,
                        EventKind.PREEMPTED,
                        f"w-{h}: preempted",
                        host=f"w-{h}",
                        data={"zone": zone, "accelerator": "v4-32", "incident": f"inc-{n}"},
                    )
                )
            t += down_s
            rows.append(Event(t, EventKind.RECOVERED, "recovered", data={"incident": f"inc-{n}"}))
    return rows, t


PLAN = [("zone-a", 40.0, 0.05), ("zone-b", 60.0, 0.01), ("zone-c", 30.0, 0.1)]


def test_one_drill_estimates_each_zone() -> None:
    rows, end = simulate(7, PLAN)
    rates = zone_rates(
        rows, start=1_000_000.0, end=end, hosts=HOSTS, default_zone="zone-a", zones=["zone-d"]
    )
    by_zone = rates_by_zone(rates)
    assert set(by_zone) == {"zone-a", "zone-b", "zone-c", "zone-d"}
    for zone, hours, _rate in PLAN:
        r = by_zone[zone]
        assert r.accelerator == "v4-32"
        # exposure is the up time: the plan's hours, every host
        assert r.vm_hours == pytest.approx(hours * HOSTS, rel=1e-6)
    assert by_zone["zone-d"].vm_hours == 0 and by_zone["zone-d"].rate is None
    assert math.isinf(by_zone["zone-d"].risk)
    assert "zone-a v4-32:" in by_zone["zone-a"].text()


def test_intervals_cover_the_true_rates() -> None:
    """Over 300 seeded drills, each zone's 95% interval holds its true rate at least ~95% of
    the time (Garwood's interval is conservative: coverage >= the level)."""
    drills = 300
    covered = dict.fromkeys([z for z, _, _ in PLAN], 0)
    for seed in range(drills):
        rows, end = simulate(seed, PLAN)
        by_zone = rates_by_zone(
            zone_rates(rows, start=1_000_000.0, end=end, hosts=HOSTS, default_zone="zone-a")
        )
        for zone, _hours, true_rate in PLAN:
            lo, hi = by_zone[zone].interval
            covered[zone] += lo <= true_rate <= hi
    for zone, hits in covered.items():
        # 95% nominal; 300 draws: a binomial's 3-sigma below 0.95 is ~0.912
        assert hits / drills >= 0.91, (zone, hits)


def test_unstamped_rows_merge_and_take_the_configured_zone() -> None:
    t0 = 5000.0
    rows = [
        Event(t0 + 100, EventKind.HOST_LOST, "w-0 lost", host="w-0"),
        Event(t0 + 100.5, EventKind.HEAD_LOST, "head lost", host="w-0"),
        Event(t0 + 160, EventKind.RECOVERED, "recovered"),
    ]
    rates = zone_rates(rows, start=t0, end=t0 + 3600, hosts=2, default_zone="z1", accelerator="v5")
    (rate,) = rates.values()
    assert (rate.zone, rate.accelerator, rate.preemptions) == ("z1", "v5", 1)
    # one host down 60 s of the 2 x 3600 s
    assert rate.vm_hours == pytest.approx((2 * 3600 - 60) / 3600)


def test_risk_order_prefers_evidence_of_calm() -> None:
    rows, end = simulate(3, PLAN)
    by_zone = rates_by_zone(
        zone_rates(
            rows,
            start=1_000_000.0,
            end=end,
            hosts=HOSTS,
            default_zone="zone-a",
            zones=["zone-d"],
        )
    )
    order = risk_order(["zone-a", "zone-b", "zone-c", "zone-d"], "zone-a", by_zone)
    assert order.zones[0] == "zone-b"  # the calmest by far
    assert order.zones[-1] == "zone-d"  # never seen: no evidence of calm
    assert order.reason.startswith("risk-aware (by the rate's upper bound): zone-b")
    data = order.to_json()
    assert data["order"] == list(order.zones) and data["ranked_by"] == "upper bound"
    assert data["rates"]["zone-b"]["high"] >= data["rates"]["zone-b"]["rate_per_vm_hour"]
    # ties (no estimates at all) keep the configured order, the lost zone last
    assert risk_order(["a", "b", "c"], "a", {}).zones == ("b", "c", "a")


def test_bad_span_and_hosts_are_named() -> None:
    with pytest.raises(ValueError, match="span"):
        zone_rates([], start=10, end=10, hosts=1, default_zone="z")
    with pytest.raises(ValueError, match="host"):
        zone_rates([], start=0, end=10, hosts=0, default_zone="z")
