"""The [prices] section: what a chip-hour costs the pod, for the ledger's money figures.

    [prices]
    spot_per_chip_hour = 1.47
    on_demand_per_chip_hour = 4.20

Empty or 0 values take the shipped table (``console.services.ledger.prices``: Google's list
prices with their source and date) for the pod's accelerator and region. The settings carry
attribute docstrings: ``phantom init``'s example is generated from them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

_TYPE_RE = re.compile(r"^v\d+[a-z]*-\d+$")
_REGION_RE = re.compile(r"^[a-z][a-z0-9-]*$")


@dataclass(frozen=True)
class PricesConfig:
    """[prices]: what a chip-hour costs, for the ledger (goodput in money, spot vs on-demand)."""

    accelerator_type: str = ""
    """The accelerator billed, e.g. "v5p-64" (empty: cluster.accelerator_type)."""
    region: str = ""
    """The region billed, e.g. "us-east5" (empty: the region of cluster.zone)."""
    chips: int = 0
    """Chips in the slice (0: from the accelerator type; v4-32 has 16)."""
    spot_per_chip_hour: float = 0.0
    """USD per chip-hour on spot (0: the shipped table for the accelerator and region)."""
    on_demand_per_chip_hour: float = 0.0
    """USD per chip-hour on demand (0: the shipped table for the accelerator and region)."""


def prices_value_problems(key: str, value: Any) -> list[str]:
    """What is wrong with one ``prices.*`` value (its type already checked)."""
    if (
        key in ("prices.spot_per_chip_hour", "prices.on_demand_per_chip_hour", "prices.chips")
        and value < 0
    ):
        return [f"{key} = {value!r}: must be 0 (the shipped table) or more"]
    if key == "prices.accelerator_type" and value and not _TYPE_RE.match(value):
        return [f"{key} = {value!r}: an accelerator type such as v4-32 or v5p-64, or empty"]
    if key == "prices.region" and value and not _REGION_RE.match(value):
        return [f"{key} = {value!r}: a region such as us-central2 (not a zone), or empty"]
    return []


def prices_cross_problems(prices: PricesConfig) -> list[str]:
    """Spot and on-demand are given together: one alone would price half the comparison
    from the shipped table and half from yours."""
    spot, od = prices.spot_per_chip_hour, prices.on_demand_per_chip_hour
    if (spot > 0) != (od > 0):
        given, missing = (
            ("spot_per_chip_hour", "on_demand_per_chip_hour")
            if spot > 0
            else ("on_demand_per_chip_hour", "spot_per_chip_hour")
        )
        return [
            f"prices.{given} is set but prices.{missing} is not: set both (your own "
            "figures), or neither (the shipped table)"
        ]
    return []
