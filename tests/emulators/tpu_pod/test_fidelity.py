"""GCP-faithful fidelity (issue 26): accelerator types from a table of real generations,
acceleratorConfig, runtime versions, endpoint port 8470, preemptible vs spot as sent, no
invented symptoms, CREATING -> READY, quota distinct from stockout, stop/start; judged by
the real gcloud where it is on PATH (and by the real client library otherwise)."""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from google.api_core import exceptions as gexc
from google.cloud import tpu_v2

from emulators.tpu_pod import accelerators, client
from emulators.tpu_pod.client import PodInfo
from tests.support.emulator_helpers import gcloud_json, needs_gcloud, run_gcloud, running_pod, tpu
from tests.support.waiting import until

# A v4-32 pod in local-a; the quota of v4 is one v4-32 (32 TensorCores) per zone.
QUOTA = "v4:32"


@pytest.fixture(scope="module")
def fpod(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PodInfo]:
    run_dir = tmp_path_factory.mktemp("fidelity") / "pod"
    with running_pod(run_dir, faithful=True, quota=[QUOTA]) as info:
        yield info


async def create(info: PodInfo, zone: str, name: str, accelerator_type: str) -> None:
    spec = tpu_v2.Node(
        accelerator_type=accelerator_type, scheduling_config=tpu_v2.SchedulingConfig(spot=True)
    )
    async with tpu(info) as api:
        parent = f"projects/{info.project}/locations/{zone}"
        await (await api.create_node(parent=parent, node_id=name, node=spec)).result()


async def state_of(info: PodInfo, zone: str, name: str) -> str:
    async with tpu(info) as api:
        node = await api.get_node(name=f"projects/{info.project}/locations/{zone}/nodes/{name}")
        return str(node.state.name)


async def delete(info: PodInfo, zone: str, *names: str) -> None:
    async with tpu(info) as api:
        for name in names:
            path = f"projects/{info.project}/locations/{zone}/nodes/{name}"
            await (await api.delete_node(name=path)).result()


def gcloud(info: PodInfo, cfg: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_gcloud(info, cfg, "compute", "tpus", *args, check=False)


def test_the_table_of_generations() -> None:
    shapes = {t: accelerators.parse(t) for t in ("v4-8", "v4-32", "v5p-64", "v4-4096")}
    assert [(s.hosts, s.topology) for s in shapes.values()] == [
        (1, "2x2x1"),
        (4, "2x2x4"),
        (8, "2x4x4"),
        (512, "8x16x16"),  # 2,048 chips: a v4 type counts TensorCores, 2 per chip
    ]
    assert accelerators.parse("v5p-8192").hosts == 1024
    # v5litepod and v6e count chips: up to 8 on one host, then 4 a host.
    assert [accelerators.parse(t).hosts for t in ("v5litepod-8", "v5litepod-16", "v6e-256")] == [
        1,
        4,
        64,
    ]
    assert accelerators.parse("v2-32").hosts == 4 and accelerators.parse("v3-8").hosts == 1
    for bad in ("v4-33x", "banana", "v4-24", "v7-8", "v4-"):
        with pytest.raises(ValueError, match="unknown accelerator type"):
            accelerators.parse(bad)
    assert accelerators.from_config("V4", "2x2x4").type == "v4-32"
    assert accelerators.parse_quota(["v4:32,local-b:v5p:64"], ("local-a", "local-b")) == {
        ("", "v4"): 32,
        ("local-b", "v5p"): 64,
    }
    with pytest.raises(ValueError, match="unknown family 'v9'"):
        accelerators.parse_quota(["v9:1"], ("local-a",))


async def test_types_host_counts_config_port_and_scheduling_through_the_api(
    fpod: PodInfo,
) -> None:
    parent = f"projects/{fpod.project}/locations/local-b"
    async with tpu(fpod) as api:
        for bad in ("v4-33x", "banana"):
            with pytest.raises(gexc.InvalidArgument, match=f'accelerator type, "{bad}"'):
                await api.create_node(
                    parent=parent, node_id="bad", node=tpu_v2.Node(accelerator_type=bad)
                )
        with pytest.raises(gexc.InvalidArgument, match="runtimeVersion"):
            await api.create_node(
                parent=parent,
                node_id="bad",
                node=tpu_v2.Node(accelerator_type="v4-8", runtime_version="tpu-vm-nope"),
            )
        spec = tpu_v2.Node(
            accelerator_type="v4-8",
            runtime_version="tpu-ubuntu2204-base",
            scheduling_config=tpu_v2.SchedulingConfig(preemptible=True),
        )
        op = await api.create_node(parent=parent, node_id="small", node=spec)
        states = []

        async def seen_ready() -> bool:
            node = await api.get_node(name=f"{parent}/nodes/small")
            states.append(node.state.name)
            return node.state == tpu_v2.Node.State.READY

        await until(seen_ready, 60, "the v4-8 READY")
        node = await op.result()
        # CREATING -> READY, never REPAIRING for a node being created.
        assert set(states) <= {"CREATING", "READY"}, states
        assert len(node.network_endpoints) == 1
        assert node.network_endpoints[0].port == 8470
        assert node.accelerator_config.topology == "2x2x1"
        assert node.accelerator_config.type_ == tpu_v2.AcceleratorConfig.Type.V4
        assert (node.scheduling_config.preemptible, node.scheduling_config.spot) == (True, False)

        # A single-host node stops and starts; a multi-host slice is refused.
        stopped = await (await api.stop_node(request={"name": node.name})).result()
        assert stopped.state == tpu_v2.Node.State.STOPPED
        started = await (await api.start_node(request={"name": node.name})).result()
        assert started.state == tpu_v2.Node.State.READY
        with pytest.raises(gexc.InvalidArgument, match="not supported for TPU Pod slices"):
            await api.stop_node(request={"name": fpod.node_path})
        await (await api.delete_node(name=node.name)).result()

        # The pod's node: preempted as a whole slice, with no invented symptoms.
        client.preempt(fpod.run_dir, "all")
        pod_node = await api.get_node(name=fpod.node_path)
        assert pod_node.state == tpu_v2.Node.State.PREEMPTED
        assert list(pod_node.symptoms) == []
        await (await api.delete_node(name=fpod.node_path)).result()


@needs_gcloud
def test_gcloud_refuses_bad_types_and_versions_naming_the_field(
    fpod: PodInfo, tmp_path: Path
) -> None:
    cfg = tmp_path / "gcloud"
    for bad in ("banana", "v4-33x"):
        res = gcloud(fpod, cfg, "tpu-vm", "create", "x", "--zone=local-c",
                     f"--accelerator-type={bad}", "--version=tpu-ubuntu2204-base")  # fmt: skip
        assert res.returncode != 0
        assert "INVALID_ARGUMENT" in res.stderr and f'accelerator type, "{bad}"' in res.stderr
    res = gcloud(fpod, cfg, "tpu-vm", "create", "x", "--zone=local-c",
                 "--accelerator-type=v4-8", "--version=tpu-vm-nope")  # fmt: skip
    assert res.returncode != 0 and "runtimeVersion" in res.stderr, res.stderr


@needs_gcloud
def test_gcloud_describes_a_v4_8_with_one_endpoint_and_its_config(
    fpod: PodInfo, tmp_path: Path
) -> None:
    cfg = tmp_path / "gcloud"
    zone = "--zone=local-c"
    res = gcloud(fpod, cfg, "tpu-vm", "create", "one", zone, "--accelerator-type=v4-8",
                 "--version=tpu-ubuntu2204-base", "--spot")  # fmt: skip
    assert res.returncode == 0, res.stderr
    try:
        node = gcloud_json(fpod, cfg, "compute", "tpus", "tpu-vm", "describe", "one", zone)
        assert node["acceleratorType"] == "v4-8"
        assert node["acceleratorConfig"] == {"type": "V4", "topology": "2x2x1"}
        assert len(node["networkEndpoints"]) == 1
        assert node["networkEndpoints"][0]["port"] == 8470
        assert node["schedulingConfig"] == {"spot": True}
        table = run_gcloud(fpod, cfg, "compute", "tpus", "tpu-vm", "list", zone).stdout
        header, row = table.splitlines()[:2]
        assert header.split()[2:5] == ["ACCELERATOR_TYPE", "TYPE", "TOPOLOGY"]
        assert row.split()[:5] == ["one", "local-c", "v4-8", "V4", "2x2x1"], table
    finally:
        asyncio.run(delete(fpod, "local-c", "one"))


@needs_gcloud
def test_gcloud_stops_and_starts_a_single_host_node(fpod: PodInfo, tmp_path: Path) -> None:
    cfg = tmp_path / "gcloud"
    asyncio.run(create(fpod, "local-c", "two", "v4-8"))
    try:
        # as the API does (a single host), not HTTP 501
        for verb, state in (("stop", "STOPPED"), ("start", "READY")):
            res = gcloud(fpod, cfg, "tpu-vm", verb, "two", "--zone=local-c")
            assert res.returncode == 0, res.stderr
            assert asyncio.run(state_of(fpod, "local-c", "two")) == state
    finally:
        asyncio.run(delete(fpod, "local-c", "two"))


@needs_gcloud
def test_gcloud_lists_accelerator_types_and_versions(fpod: PodInfo, tmp_path: Path) -> None:
    cfg = tmp_path / "gcloud"
    zone = "--zone=local-c"
    types = gcloud_json(fpod, cfg, "compute", "tpus", "tpu-vm", "accelerator-types", "list", zone)
    assert {"v4-8", "v5p-64", "v6e-256", "v5litepod-16"} <= {t["type"] for t in types}
    v4 = next(t for t in types if t["type"] == "v4-32")
    assert v4["acceleratorConfigs"] == [{"type": "V4", "topology": "2x2x4"}]
    versions = gcloud_json(fpod, cfg, "compute", "tpus", "tpu-vm", "versions", "list", zone)
    assert "tpu-ubuntu2204-base" in {v["version"] for v in versions}
    v1 = gcloud_json(fpod, cfg, "compute", "tpus", "versions", "list", zone)
    assert "tpu-ubuntu2204-base" in {v["version"] for v in v1}


@needs_gcloud
def test_gcloud_quota_refusal_names_the_quota_and_a_stockout_keeps_its_words(
    fpod: PodInfo, tmp_path: Path
) -> None:
    cfg = tmp_path / "gcloud"
    zone = "--zone=local-b"
    args = ("--version=tpu-ubuntu2204-base", "--spot")
    # A second node in the zone: no stockout is set, so it fits, until the quota is spent.
    asyncio.run(create(fpod, "local-b", "a", "v4-16"))
    asyncio.run(create(fpod, "local-b", "b", "v4-16"))
    res = gcloud(fpod, cfg, "tpu-vm", "create", "c", zone, "--accelerator-type=v4-8", *args)
    assert res.returncode != 0
    assert (
        "Quota limit 'TPUV4sPreemptiblePodPerProjectPerZoneForTPUAPI' has been exceeded. "
        "Limit: 32 in zone local-b."
    ) in res.stderr, res.stderr
    assert "no more capacity" not in res.stderr
    asyncio.run(delete(fpod, "local-b", "a", "b"))

    client.set_zone(fpod.run_dir, "local-b", stockout_s=0)
    try:
        res = gcloud(fpod, cfg, "tpu-vm", "create", "d", zone, "--accelerator-type=v4-8", *args)
        assert res.returncode != 0
        assert '"code": 8' in res.stderr and "no more capacity in the zone" in res.stderr
    finally:
        client.set_zone(fpod.run_dir, "local-b", clear_stockouts=True)


@needs_gcloud
def test_gcloud_create_in_a_zone_without_room_is_a_stockout_not_a_quota_error(
    fpod: PodInfo, tmp_path: Path
) -> None:
    """A zone whose capacity is taken answers as the real API does: the operation fails with
    the stockout (code 8, "no more capacity in the zone"), never a quota error, which would
    send the user to the quota page. Only ``--quota`` refuses with the quota's words."""
    cfg = tmp_path / "gcloud"
    args = ("--version=tpu-ubuntu2204-base", "--spot", "--accelerator-type=v4-8")
    client.set_zone(fpod.run_dir, "local-c", capacity=0)
    try:
        res = gcloud(fpod, cfg, "tpu-vm", "create", "full", "--zone=local-c", *args)
        assert res.returncode != 0
        assert '"code": 8' in res.stderr and "no more capacity in the zone" in res.stderr
        assert "Quota limit" not in res.stderr, res.stderr
    finally:
        client.set_zone(fpod.run_dir, "local-c", capacity=1)


@needs_gcloud
def test_gcloud_describes_the_real_node_fields_only(fpod: PodInfo, tmp_path: Path) -> None:
    """What the real v2 Node carries (REST reference, projects.locations.nodes): the full
    network paths, the service account it runs as and its shielded instance config; and
    nothing the emulator made up (no label of its own, no description nobody sent)."""
    cfg = tmp_path / "gcloud"
    asyncio.run(create(fpod, "local-c", "seen", "v4-8"))
    try:
        node = gcloud_json(fpod, cfg, "compute", "tpus", "tpu-vm", "describe", "seen",
                           "--zone=local-c")  # fmt: skip
    finally:
        asyncio.run(delete(fpod, "local-c", "seen"))
    project, region = fpod.project, "local"
    assert node["networkConfig"]["network"] == f"projects/{project}/global/networks/default"
    assert node["networkConfig"]["subnetwork"] == (
        f"projects/{project}/regions/{region}/subnetworks/default"
    )
    account = node["serviceAccount"]
    assert account["email"].endswith("-compute@developer.gserviceaccount.com"), account
    assert account["scope"] == ["https://www.googleapis.com/auth/cloud-platform"]
    assert "shieldedInstanceConfig" in node, sorted(node)
    assert "emulator" not in node.get("labels", {}), node.get("labels")
    assert "emulator" not in node.get("description", ""), node.get("description")


async def test_a_faithful_pod_of_a_type_has_that_types_hosts(tmp_path: Path) -> None:
    for kwargs, words in (
        ({"accelerator_type": "banana"}, "--accelerator-type 'banana': not a Cloud TPU type"),
        ({"accelerator_type": "v4-8", "hosts": 3}, "--hosts 3 does not match"),
    ):
        with pytest.raises(client.PodUsageError, match=words):
            client.start_pod(tmp_path / "bad", faithful=True, **kwargs)  # type: ignore[arg-type]
    assert client.pod_status(tmp_path / "bad") is None  # nothing started
    with running_pod(
        tmp_path / "pod", faithful=True, hosts=None, accelerator_type="v5p-16"
    ) as info:
        assert len(info.hosts) == 2 and info.accelerator_type == "v5p-16"
        async with tpu(info) as api:
            node = await api.get_node(name=info.node_path)
        assert node.accelerator_config.topology == "2x2x2" and len(node.network_endpoints) == 2
