"""TPU accelerator types, runtime versions and quota metrics, as the Cloud TPU API knows them.

Stdlib only: the CLI checks ``--accelerator-type`` with it before a daemon starts.

Sources (see README, "GCP-faithful fidelity"): the Cloud TPU docs' per-version pages
(``/tpu/docs/v2``..``v6e``, "TPU types and topologies"): v2-v4 and v5p types count
TensorCores (2 per chip, 4 chips per host: ``v4-8`` = 4 chips = 1 host, ``v4-32`` = 4
hosts, ``v5p-64`` = 8 hosts); v5litepod and v6e types count chips (1 per chip), with up
to 8 chips on one host and 4 chips per host in multi-host slices. The topology of each
type is the docs' table (the ``AcceleratorConfig.topology`` field of
``google/cloud/tpu/v2/cloud_tpu.proto``, "Topology of TPU in chips").
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Generation:
    name: str  # the prefix of a type: "v4"
    config_type: str  # AcceleratorConfig.Type enum name
    cores_per_chip: int  # what the number in a type counts per chip (TensorCores, or 1)
    chips_per_host: int  # in a multi-host slice
    max_single_host_chips: int  # a slice of up to this many chips is one host
    topologies: dict[int, str]  # the number in the type -> topology in chips
    quota_family: str  # the quota metric's stem, e.g. "TPUV4s"
    spot_quota: str  # spot/preemptible metric id
    quota: str  # on-demand metric id


@dataclass(frozen=True)
class Shape:
    """One accelerator type: e.g. v4-32 = 16 chips on 4 hosts, topology 2x2x4."""

    type: str
    generation: Generation
    chips: int
    hosts: int
    topology: str

    @property
    def units(self) -> int:
        """What quota counts for this type: the number in its name (cores or chips)."""
        return self.chips * self.generation.cores_per_chip


_V2V3_HOST = 4  # chips per v2/v3 host (one v2-8/v3-8 device)

GENERATIONS: dict[str, Generation] = {
    g.name: g
    for g in (
        Generation(
            "v2",
            "V2",
            2,
            _V2V3_HOST,
            4,
            {8: "2x2", 32: "4x4", 128: "8x8", 256: "8x16", 512: "16x16"},
            "TPUV2s",
            "TPUV2sPreemptiblePodPerProjectPerZoneForTPUAPI",
            "TPUV2sPodPerProjectPerZoneForTPUAPI",
        ),
        Generation(
            "v3",
            "V3",
            2,
            _V2V3_HOST,
            4,
            {
                8: "2x2",
                32: "4x4",
                64: "4x8",
                128: "8x8",
                256: "8x16",
                512: "16x16",
                1024: "16x32",
                2048: "32x32",
            },
            "TPUV3s",
            "TPUV3sPreemptiblePodPerProjectPerZoneForTPUAPI",
            "TPUV3sPodPerProjectPerZoneForTPUAPI",
        ),
        Generation(
            "v4",
            "V4",
            2,
            4,
            4,
            {
                8: "2x2x1",
                16: "2x2x2",
                32: "2x2x4",
                64: "2x4x4",
                128: "4x4x4",
                256: "4x4x8",
                512: "4x8x8",
                1024: "8x8x8",
                1536: "8x8x12",
                2048: "8x8x16",
                4096: "8x16x16",
            },
            "TPUV4s",
            "TPUV4sPreemptiblePodPerProjectPerZoneForTPUAPI",
            "TPUV4sPodPerProjectPerZoneForTPUAPI",
        ),
        Generation(
            "v5p",
            "V5P",
            2,
            4,
            4,
            {
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
                8192: "16x16x16",
                12288: "16x16x24",
            },
            "TPUV5P",
            "TPUV5PPreemptiblePerProjectPerZoneForTPUAPI",
            "TPUV5PPerProjectPerZoneForTPUAPI",
        ),
        Generation(
            "v5litepod",
            "V5LITE_POD",
            1,
            4,
            8,
            {
                1: "1x1",
                4: "2x2",
                8: "2x4",
                16: "4x4",
                32: "4x8",
                64: "8x8",
                128: "8x16",
                256: "16x16",
            },
            "TPUV5sLitepod",
            "TPUV5sPreemptibleLitepodPerProjectPerZoneForTPUAPI",
            "TPUV5sLitepodPerProjectPerZoneForTPUAPI",
        ),
        Generation(
            "v6e",
            "V6E",
            1,
            4,
            8,
            {
                1: "1x1",
                4: "2x2",
                8: "2x4",
                16: "4x4",
                32: "4x8",
                64: "8x8",
                128: "8x16",
                256: "16x16",
            },
            "TPUV6E",
            "TPUV6EPreemptiblePerProjectPerZoneForTPUAPI",
            "TPUV6EPerProjectPerZoneForTPUAPI",
        ),
    )
}

# `gcloud compute tpus versions list` (runtimeVersions) as the docs' "TPU software
# versions" page lists them; a create naming another is refused.
RUNTIME_VERSIONS = (
    "tpu-ubuntu2204-base",
    "tpu-vm-base",
    "tpu-vm-v4-base",
    "tpu-vm-tf-2.16.1-pjrt",
    "tpu-vm-tf-2.16.1-pod-pjrt",
    "tpu-vm-tf-2.17.0-pjrt",
    "tpu-vm-tf-2.17.0-pod-pjrt",
    "tpu-vm-tf-2.18.0-pjrt",
    "tpu-vm-tf-2.18.0-pod-pjrt",
    "v2-alpha-tpuv5",
    "v2-alpha-tpuv5-lite",
    "v2-alpha-tpuv6e",
    "v2-tpuv5-litepod",
)

_TYPE = re.compile(r"^([a-z0-9]+)-(\d+)$")


def _shape(gen: Generation, size: int) -> Shape:
    chips = size // gen.cores_per_chip
    hosts = 1 if chips <= gen.max_single_host_chips else chips // gen.chips_per_host
    return Shape(f"{gen.name}-{size}", gen, chips, hosts, gen.topologies[size])


def parse(accelerator_type: str) -> Shape:
    """``"v4-32"`` -> its shape; ValueError if no generation has such a type."""
    m = _TYPE.match(accelerator_type)
    gen = GENERATIONS.get(m.group(1)) if m else None
    if m is None or gen is None or int(m.group(2)) not in gen.topologies:
        raise ValueError(f"unknown accelerator type {accelerator_type!r}")
    return _shape(gen, int(m.group(2)))


def from_config(config_type: str, topology: str) -> Shape:
    """The shape an ``AcceleratorConfig`` (type enum name, topology) names; ValueError."""
    for gen in GENERATIONS.values():
        if gen.config_type == config_type:
            for size, topo in gen.topologies.items():
                if topo == topology:
                    return _shape(gen, size)
    raise ValueError(f"unknown accelerator config {config_type} {topology!r}")


def for_hosts(like: Shape, hosts: int) -> Shape | None:
    """The type of ``like``'s generation with ``hosts`` hosts (the smallest), if any."""
    for size in sorted(like.generation.topologies):
        shape = _shape(like.generation, size)
        if shape.hosts == hosts:
            return shape
    return None


def all_shapes() -> list[Shape]:
    return [_shape(g, s) for g in GENERATIONS.values() for s in sorted(g.topologies)]


def quota_metric(shape: Shape, spot: bool) -> str:
    return shape.generation.spot_quota if spot else shape.generation.quota


def quota_message(metric: str, limit: int, zone: str) -> str:
    """The Cloud TPU API's wording when a create exceeds a quota (HTTP 429,
    RESOURCE_EXHAUSTED), as seen from the real API: ``Quota limit
    'TPUV6EPreemptiblePerProjectPerRegionForTPUAPI' has been exceeded. Limit: 0 in region
    us-east5.``"""
    return f"Quota limit '{metric}' has been exceeded. Limit: {limit} in zone {zone}."


def not_found_message(accelerator_type: str, zone: str, eid: str) -> str:
    """The API's INVALID_ARGUMENT wording for an accelerator type a zone does not offer."""
    return (
        "Cloud TPU received a bad request. The requested accelerator configuration for "
        f'accelerator type, "{accelerator_type}", could not be found in the zonal accelerator '
        f'configurations for "{zone}".; the accelerator {accelerator_type} was not found in '
        f"zone {zone} [EID: 0x{eid}]"
    )


def parse_quota(items: list[str], zones: tuple[str, ...]) -> dict[tuple[str, str], int]:
    """``--quota v4:64`` (every zone) or ``local-a:v5p:128`` -> {(zone or "", family): n}.

    A quota counts what the family's type names count (TensorCores for v2-v5p, chips
    for v5litepod and v6e), as Cloud TPU quota does."""
    out: dict[tuple[str, str], int] = {}
    hint = "use FAMILY:N or ZONE:FAMILY:N, e.g. v4:32 or local-a:v5p:128"
    for item in items:
        for part in (p.strip() for p in item.split(",") if p.strip()):
            bits = part.split(":")
            if len(bits) not in (2, 3):
                raise ValueError(f"--quota {part!r}: {hint}")
            zone = bits[0] if len(bits) == 3 else ""
            family, n = bits[-2], bits[-1]
            if zone and zone not in zones:
                raise ValueError(
                    f"--quota {part!r}: unknown zone {zone!r}; zones are {list(zones)}"
                )
            if family not in GENERATIONS:
                raise ValueError(
                    f"--quota {part!r}: unknown family {family!r}; use one of "
                    f"{', '.join(GENERATIONS)}"
                )
            if not n.isdigit():
                raise ValueError(f"--quota {part!r}: {n!r} is not a whole number; {hint}")
            out[(zone, family)] = int(n)
    return out
