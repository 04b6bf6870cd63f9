"""The console's door to the GKE emulator: finding (or refusing to start) it, how the
backend reaches it, its chaos, and a script's `gke up` / `gke down`."""

from __future__ import annotations

from pathlib import Path

import pytest

from console.wiring.gke import GkeChaos, LocalGkeControl, emulator_bucket, ensure_gke, gke_access
from emulators.gke import client as gke_client
from tests.support.fixtures_gke import gke_module
from tests.support.gke_services import gke_config

__all__ = ["gke_module"]


def test_no_emulator_and_no_autostart_names_the_fix(tmp_path: Path) -> None:
    cfg = gke_config(tmp_path / "absent")
    with pytest.raises(
        ValueError, match=r"no GKE emulator is running for .*absent.*phantom gke up"
    ):
        ensure_gke(cfg, autostart=False)


def test_access_points_at_the_emulator(gke_module: gke_client.GkeInfo) -> None:
    cfg = gke_config(gke_module.run_dir, project="", location="")
    info = ensure_gke(cfg, autostart=False)
    access = gke_access(cfg, info)
    assert access.kubeconfig == str(gke_module.kubeconfig)
    assert access.context == "gke_phantom-local_us-east5_phantom-gke"
    assert (access.ref.project, access.ref.location, access.ref.cluster) == (
        "phantom-local",
        "us-east5",
        "phantom-gke",
    )
    assert access.gcs_root == gke_module.bucket == emulator_bucket(cfg)
    assert access.accelerator == "v5p-64 (2x4x4) x1"
    assert access.metrics_lag_s == 1.0  # the emulated trainer flushes every step


async def test_chaos_finds_a_nodes_slice(gke_module: gke_client.GkeInfo) -> None:
    chaos = GkeChaos(gke_config(gke_module.run_dir))
    node = gke_module.slices[0].nodes[3]
    assert chaos._slice_of(node) == "phantom-gke-np-0"
    assert chaos._slice_of("phantom-gke-np-0") == "phantom-gke-np-0"
    with pytest.raises(ValueError, match="preempt-slice 7"):
        await chaos.preempt_slice("7", None)


async def test_gke_up_and_down(tmp_path: Path) -> None:
    run_dir = tmp_path / "gke"
    control = LocalGkeControl(gke_config(run_dir))
    try:
        assert not await control.is_up()
        up = await control.up(1)
        assert up["kubeconfig"].endswith("kubeconfig") and up["slices"][0]["nodes"] == 8
        assert await control.is_up()
    finally:
        assert await control.down()
    assert not await control.is_up()
    assert gke_client.leftover_pids(run_dir) == []


async def test_the_embedded_emulator_runs_the_configs_tpu_type(tmp_path: Path) -> None:
    """`[gke] tpu_type` of any type a GKE TPU node pool offers (not only v5p) is what the
    console's embedded emulator runs, started by the console itself or by a script's
    `gke up`, and what the backend says it runs (issue 36)."""
    run_dir = tmp_path / "gke"
    cfg = gke_config(run_dir, tpu_type="v6e-16")
    try:
        info = ensure_gke(cfg, autostart=True)
        assert info.tpu_type == "v6e-16" and [len(s.nodes) for s in info.slices] == [4]
        assert gke_access(cfg, info).accelerator == "v6e-16 (4x4) x1"
    finally:
        assert gke_client.stop(run_dir)
    control = LocalGkeControl(gke_config(run_dir, tpu_type="v4-32"))
    try:
        up = await control.up(2)
        assert up["tpu_type"] == "v4-32" and [s["nodes"] for s in up["slices"]] == [4, 4]
    finally:
        assert await control.down()
    assert gke_client.leftover_pids(run_dir) == []
