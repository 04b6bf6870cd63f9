"""The TPU types a GKE TPU node pool offers, as GKE labels their nodes: one table for the config's
``gke.tpu_type``, a workload's ``tpu_type`` (its manifests' node selectors) and the console's
embedded GKE emulator, so none of them accepts a type another refuses.

GKE runs multi-host TPU slices of four generations (xpk's ``system_characteristics.py``):
v4 (``tpu-v4-podslice``), v5p (``tpu-v5p-slice``), v5e (``v5litepod-N``,
``tpu-v5-lite-podslice``) and v6e (``tpu-v6e-slice``). Sizes and topologies are Cloud TPU's
"TPU types and topologies" (the number in the type counts TensorCores for v4 and v5p, two per
chip, and chips for v5litepod and v6e); a slice runs 4 chips on each node, as xpk counts them,
so the smallest is one node (v4-8, v5p-8, v5litepod-4, v6e-4).
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass

from console.config.validate import Invalid, shown

CHIPS_PER_NODE = 4


@dataclass(frozen=True)
class TpuType:
    """One slice of a TPU type, as GKE labels its nodes."""

    name: str
    accelerator: str  # cloud.google.com/gke-tpu-accelerator
    topology: str  # cloud.google.com/gke-tpu-topology
    vms: int  # nodes (hosts) per slice
    pathways: str  # the Pathways resource manager's --instance_type prefix (xpk's map)
    chips_per_vm: int = CHIPS_PER_NODE


_V4_V5P = {
    8: "2x2x1",
    16: "2x2x2",
    32: "2x2x4",
    64: "2x4x4",
    128: "4x4x4",
    256: "4x4x8",
    512: "4x8x8",
    1024: "8x8x8",
    2048: "8x8x16",
    4096: "8x16x16",
}
_V5E_V6E = {4: "2x2", 8: "2x4", 16: "4x4", 32: "4x8", 64: "8x8", 128: "8x16", 256: "16x16"}

# generation -> (its gke-tpu-accelerator label, TensorCores per chip, size -> topology, the
# Pathways instance type: xpk's PathwaysExpectedInstancesMap)
GENERATIONS: dict[str, tuple[str, int, dict[int, str], str]] = {
    "v4": ("tpu-v4-podslice", 2, {**_V4_V5P, 1536: "8x8x12"}, "tpuv4"),
    "v5p": ("tpu-v5p-slice", 2, {**_V4_V5P, 8192: "16x16x16", 12288: "16x16x24"}, "tpuv5"),
    "v5litepod": ("tpu-v5-lite-podslice", 1, _V5E_V6E, "tpuv5e"),
    "v6e": ("tpu-v6e-slice", 1, _V5E_V6E, "tpuv6e"),
}

TPU_TYPES: dict[str, TpuType] = {
    f"{gen}-{size}": TpuType(
        f"{gen}-{size}", accel, topology, max(1, size // per_chip // CHIPS_PER_NODE), pathways
    )
    for gen, (accel, per_chip, sizes, pathways) in GENERATIONS.items()
    for size, topology in sorted(sizes.items())
}

OFFERED = "v4-N, v5p-N, v5litepod-N or v6e-N (e.g. v4-32, v5p-64, v5litepod-16, v6e-16)"
_TYPE = re.compile(r"^([a-z0-9]+)-(\d+)$")


def gke_tpu_type(label: str, value: str) -> str:
    """``value`` if a GKE TPU node pool offers it, else Invalid naming ``label``, the
    generations GKE offers and, for one of them, its sizes."""
    if value in TPU_TYPES:
        return value
    m = _TYPE.match(value)
    if m and m.group(1) in GENERATIONS:
        sizes = ", ".join(str(n) for n in sorted(GENERATIONS[m.group(1)][2]))
        raise Invalid(
            f"{label} {shown(value)}: a GKE TPU node pool of {m.group(1)} comes in sizes {sizes}"
        )
    close = difflib.get_close_matches(value, list(TPU_TYPES), n=1, cutoff=0.6)
    hint = f"; did you mean {close[0]}?" if close else ""
    raise Invalid(
        f"{label} {shown(value)}: not a TPU type of a GKE TPU node pool; use {OFFERED}{hint}"
    )
