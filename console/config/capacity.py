"""The [capacity] section's checks (``config.CapacityConfig``), beside ``console.config``'s own.

``config`` runs every ``capacity.*`` key through ``capacity_value_problems`` and the section
as a whole (with ``[cluster]``) through ``capacity_cross_problems``. Each problem names the
key and the fix.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from console.config.names import NAME_RE as _NAME_RE

if TYPE_CHECKING:
    from console.config import CapacityConfig, ClusterConfig

ACQUIRE_MODES = ("node", "queued-resource")
FAILOVER_STRATEGIES = ("eager-failover", "same-zone", "risk-aware")


def capacity_value_problems(key: str, value: Any) -> list[str]:
    """What is wrong with one ``capacity.*`` value (its type already checked)."""
    if key == "capacity.acquire" and value not in ACQUIRE_MODES:
        return [f"{key} = {value!r}: allowed values are {', '.join(ACQUIRE_MODES)}"]
    if key == "capacity.failover" and value not in FAILOVER_STRATEGIES:
        return [f"{key} = {value!r}: allowed values are {', '.join(FAILOVER_STRATEGIES)}"]
    if key == "capacity.zones":
        bad = [z for z in value if not _NAME_RE.match(z)]
        if bad:
            return [f"{key}: {bad!r} are not zone names (e.g. us-central2-b)"]
        if len(set(value)) != len(value):
            return [f"{key} = {list(value)!r}: each zone once"]
    if key == "capacity.queued_resource" and value and not _NAME_RE.match(value):
        return [f"{key} = {value!r}: lower-case letters, digits and '-', starting with a letter"]
    return []


def capacity_cross_problems(cluster: ClusterConfig, cap: CapacityConfig) -> list[str]:
    """[capacity] against [cluster]: the starting zone listed, a provider that has zones."""
    problems = []
    if cap.zones and cluster.zone not in cap.zones:
        problems.append(
            f"capacity.zones = {list(cap.zones)!r}: must include cluster.zone "
            f"({cluster.zone!r}), the zone the pod starts in"
        )
    if cluster.provider != "gcp" and (len(cap.zones) > 1 or cap.acquire != "node"):
        problems.append(
            "capacity: zones and queued resources need provider = 'gcp' (on this machine: "
            "the GCP-faithful emulator, `phantom pod up --faithful`, with cluster.api_endpoint)"
        )
    if cap.backoff_max_s < cap.backoff_s:
        problems.append(
            f"capacity.backoff_max_s = {cap.backoff_max_s!r}: at least backoff_s "
            f"({cap.backoff_s!r})"
        )
    return problems
