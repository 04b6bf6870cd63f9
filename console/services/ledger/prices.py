"""What a chip-hour costs: spot and on-demand, by TPU generation and region.

The shipped table is Google's public list price per chip-hour, from
https://cloud.google.com/tpu/pricing (the "Spot" and "On demand" columns, read 2025-06-15),
for the region each generation is best known in, and used for every other region of that
generation (``"*"``). Spot prices move (Google may change them up to once a month) and
differ by region, so the table is a default: ``[prices]`` in the config sets the pod's own
figures (``console.config.prices``), and every surface names the source it used.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from console.config.prices import PricesConfig

SOURCE = "cloud.google.com/tpu/pricing, list prices read 2025-06-15"


@dataclass(frozen=True)
class Rate:
    """USD per chip-hour."""

    spot: float
    on_demand: float
    source: str = SOURCE


# (generation, region) -> Rate; "*" is any region of that generation.
SHIPPED: dict[tuple[str, str], Rate] = {
    ("v4", "us-central2"): Rate(spot=0.97, on_demand=3.22),
    ("v4", "*"): Rate(spot=0.97, on_demand=3.22),
    ("v5e", "us-central1"): Rate(spot=0.48, on_demand=1.20),
    ("v5e", "*"): Rate(spot=0.48, on_demand=1.20),
    ("v5p", "us-east5"): Rate(spot=1.47, on_demand=4.20),
    ("v5p", "*"): Rate(spot=1.47, on_demand=4.20),
    ("v6e", "us-east5"): Rate(spot=1.08, on_demand=2.70),
    ("v6e", "*"): Rate(spot=1.08, on_demand=2.70),
}
GENERATIONS = tuple(sorted({g for g, _ in SHIPPED}))
# A type's number counts TensorCores (two per chip) for these generations, chips for the others.
_CORES_PER_CHIP = {"v2": 2, "v3": 2, "v4": 2, "v5p": 2}
_TYPE_RE = re.compile(r"^(?P<gen>v\d+[a-z]*?)(?:litepod)?-(?P<n>\d+)$")


def generation(accelerator_type: str) -> str:
    """``"v4-32"`` -> ``"v4"``, ``"v5litepod-16"`` -> ``"v5e"``; ``""`` when unreadable."""
    m = _TYPE_RE.match(accelerator_type.strip().lower())
    if m is None:
        return ""
    gen = m["gen"]
    return "v5e" if accelerator_type.lower().startswith("v5litepod") else gen


def chips(accelerator_type: str) -> int:
    """Chips in a slice of ``accelerator_type`` (0 when unreadable)."""
    m = _TYPE_RE.match(accelerator_type.strip().lower())
    if m is None:
        return 0
    n = int(m["n"])
    return max(1, n // _CORES_PER_CHIP.get(generation(accelerator_type), 1))


def region(zone: str) -> str:
    """``"us-central2-b"`` -> ``"us-central2"`` (a zone without a letter suffix is kept)."""
    parts = zone.strip().split("-")
    return "-".join(parts[:-1]) if len(parts) >= 3 and len(parts[-1]) == 1 else zone.strip()


def shipped_rate(gen: str, where: str) -> Rate | None:
    """The shipped rate for a generation in a region (its ``"*"`` row elsewhere)."""
    return SHIPPED.get((gen, where)) or SHIPPED.get((gen, "*"))


@dataclass(frozen=True)
class Pricing:
    """The rate the ledger prices with, for a slice of ``chips`` chips (``why`` without one)."""

    accelerator_type: str
    region: str
    chips: int
    rate: Rate | None
    why: str = ""

    def money(self, wall_s: float, productive_s: float) -> dict[str, Any]:
        """Chip-hours, what they cost on spot, what the productive part would have cost on
        demand, and the difference (positive: spot saved)."""
        chip_h = wall_s / 3600.0 * self.chips
        productive_h = productive_s / 3600.0 * self.chips
        out: dict[str, Any] = {
            "chip_hours": round(chip_h, 4),
            "productive_chip_hours": round(productive_h, 4),
            "spot_usd": None,
            "on_demand_same_work_usd": None,
            "spot_saved_usd": None,
        }
        if self.rate is None:
            return {**out, "why": self.why}
        spot = chip_h * self.rate.spot
        on_demand = productive_h * self.rate.on_demand
        return {
            **out,
            "spot_usd": round(spot, 2),
            "on_demand_same_work_usd": round(on_demand, 2),
            "spot_saved_usd": round(on_demand - spot, 2),
        }

    def verdict(self, wall_s: float, productive_s: float) -> str:
        m = self.money(wall_s, productive_s)
        saved = m["spot_saved_usd"]
        if saved is None:
            return f"no price: {self.why}"
        word = "saved" if saved >= 0 else "lost"
        return f"spot {word} ${abs(saved):,.2f} against on-demand for the same productive work"

    def to_json(self) -> dict[str, Any]:
        return {
            "accelerator_type": self.accelerator_type,
            "region": self.region,
            "chips": self.chips,
            "spot_per_chip_hour": self.rate.spot if self.rate else None,
            "on_demand_per_chip_hour": self.rate.on_demand if self.rate else None,
            "source": self.rate.source if self.rate else "",
            "why": self.why,
        }


def pricing_for(p: PricesConfig, accelerator: str, location: str, source: str) -> Pricing:
    """``[prices]`` (read from ``source``) over the shipped table, for the pod's
    ``accelerator`` in ``location`` (its zone, or a GKE cluster's region or zone)."""
    accel = p.accelerator_type or accelerator
    where = p.region or region(location)
    n = p.chips or chips(accel)
    if p.spot_per_chip_hour > 0 and p.on_demand_per_chip_hour > 0:
        rate = Rate(p.spot_per_chip_hour, p.on_demand_per_chip_hour, f"[prices] in {source}")
        return Pricing(accel, where, n, rate)
    gen = generation(accel)
    shipped = shipped_rate(gen, where)
    if shipped is None:
        return Pricing(
            accel,
            where,
            n,
            None,
            f"no shipped price for {accel or 'an unknown accelerator'} (known: "
            f"{', '.join(GENERATIONS)}); set prices.spot_per_chip_hour and "
            "prices.on_demand_per_chip_hour in the config",
        )
    return Pricing(accel, where, n, shipped)
