"""The console's table of GKE TPU types against the GKE emulator's node pools, and the door
that refuses any other type in the config (`[gke] tpu_type`) and in a workload."""

from __future__ import annotations

import contextlib

import pytest

from console.config import ConfigError, parse_config
from console.config.gke_tpu import TPU_TYPES, gke_tpu_type
from console.config.validate import Invalid
from console.services.jobs.workload import WorkloadSpec
from emulators.gke import layout as L
from emulators.tpu_pod import accelerators


def test_every_type_is_the_emulators_node_pool_and_no_other() -> None:
    """Each console type is a slice the emulator makes (same accelerator label, topology and
    nodes), and every type the emulator makes (`phantom gke up --tpu-type`) is in the table:
    v4, v5p, v5litepod and v6e, not only v5p (issue 36)."""
    for name, tpu in TPU_TYPES.items():
        shape = L.slice_shape(name)
        assert (tpu.accelerator, tpu.topology, tpu.vms, tpu.chips_per_vm) == (
            shape.accelerator,
            shape.topology,
            shape.nodes,
            shape.chips_per_node,
        ), name
    offered = set()
    for gen in accelerators.GENERATIONS.values():
        for size in gen.topologies:
            with contextlib.suppress(ValueError):
                offered.add(L.slice_shape(f"{gen.name}-{size}").tpu_type)
    assert offered == set(TPU_TYPES)
    assert {"v4-32", "v5p-64", "v5litepod-16", "v6e-16"} <= offered


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ("v9z-8", "not a TPU type of a GKE TPU node pool; use v4-N, v5p-N, v5litepod-N or v6e-N"),
        ("v2-8", "not a TPU type of a GKE TPU node pool"),
        ("v5litepod-1", "a GKE TPU node pool of v5litepod comes in sizes 4, 8, 16"),
        ("v5p-63", "a GKE TPU node pool of v5p comes in sizes 8, 16, 32, 64, 128"),
        ("v5litpod-16", "did you mean v5litepod-16?"),
    ],
)
def test_the_config_refuses_a_type_gke_has_no_node_pool_for(value: str, said: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_config({"gke": {"tpu_type": value}}, source="t.toml")
    message = str(err.value)
    assert f"gke.tpu_type = {value!r}" in message and said in message


@pytest.mark.parametrize("value", ["v4-32", "v5p-64", "v5litepod-16", "v6e-16", "v4-8"])
def test_the_config_and_a_workload_take_every_gke_type(value: str) -> None:
    assert parse_config({"gke": {"tpu_type": value}}, source="t.toml").gke.tpu_type == value
    spec = WorkloadSpec(name="w", image="gcr.io/p/i:1", command="run", tpu_type=value)
    assert "tpu_type" not in spec.validate()
    assert spec.tpu is not None and spec.tpu.name == value


def test_a_workloads_bad_type_is_named_with_the_types_offered() -> None:
    spec = WorkloadSpec(name="w", image="gcr.io/p/i:1", command="run", tpu_type="v6e-9")
    assert spec.validate()["tpu_type"] == (
        "'v6e-9': a GKE TPU node pool of v6e comes in sizes 4, 8, 16, 32, 64, 128, 256"
    )
    with pytest.raises(Invalid, match=r"^--tpu-type 'x': not a TPU type"):
        gke_tpu_type("--tpu-type", "x")
