"""Capacity (issue 16): zones, stockouts, a PREEMPTED node holding its slice, queued resources."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from google.api_core import exceptions as gexc
from google.api_core.client_options import ClientOptions
from google.auth.credentials import AnonymousCredentials
from google.cloud import tpu_v2
from google.protobuf import duration_pb2
from google.rpc import code_pb2

from emulators.tpu_pod import client
from emulators.tpu_pod.cli import pod_main
from emulators.tpu_pod.client import PodInfo
from emulators.tpu_pod.layout import host_ip
from tests.support.emulator_helpers import (
    gcloud_json,
    metadata_get,
    needs_gcloud,
    run_gcloud,
    running_pod,
    tpu,
)
from tests.support.fixtures_pod import ssh_run
from tests.support.waiting import until

STOCKOUT = (
    'There is no more capacity in the zone "{zone}"; you can try in another zone where Cloud '
    "TPU Nodes are offered (see https://cloud.google.com/tpu/docs/regions) [EID: 0x"
)
QR = tpu_v2.QueuedResourceState.State


def assert_stockout(exc: BaseException, zone: str) -> None:
    """The shape a stockout reaches a client in: an operation error, code 8.

    api_core's async operation raises a plain GoogleAPICallError whatever the code; the
    google.rpc.Status it carries says RESOURCE_EXHAUSTED.
    """
    assert isinstance(exc, gexc.GoogleAPICallError)
    (status,) = exc.errors
    assert status.code == code_pb2.RESOURCE_EXHAUSTED
    assert status.message.startswith(STOCKOUT.format(zone=zone))


def parent(info: PodInfo, zone: str) -> str:
    return f"projects/{info.project}/locations/{zone}"


def spec() -> tpu_v2.Node:
    return tpu_v2.Node(
        accelerator_type="v4-32", scheduling_config=tpu_v2.SchedulingConfig(spot=True)
    )


async def create(info: PodInfo, zone: str, node_id: str) -> tpu_v2.Node:
    async with tpu(info) as api:
        op = await api.create_node(parent=parent(info, zone), node_id=node_id, node=spec())
        return await op.result()


async def delete(info: PodInfo, path: str) -> None:
    async with tpu(info) as api:
        await (await api.delete_node(name=path)).result()


async def all_nodes(info: PodInfo) -> list[str]:
    async with tpu(info) as api:
        pager = await api.list_nodes(parent=parent(info, "-"))
        return [n.name async for n in pager]


async def test_stockout_is_resource_exhausted_and_another_zone_works(tmp_path: Path) -> None:
    with running_pod(tmp_path / "pod", stockouts=["local-b:0-"]) as info:
        assert [(z.name, z.stockout) for z in info.zones] == [
            ("local-a", False), ("local-b", True), ("local-c", False),
        ]  # fmt: skip
        with pytest.raises(gexc.GoogleAPICallError) as err:
            await create(info, "local-b", "phantom-pod")
        assert_stockout(err.value, "local-b")
        assert await all_nodes(info) == [info.node_path]  # nothing left behind

        node = await create(info, "local-c", "phantom-pod")
        assert [e.ip_address for e in node.network_endpoints] == [
            host_ip(i, zone=2) for i in range(4)
        ]  # 127.2.0.10 ...
        moved = client.pod_status(info.run_dir)
        assert moved is not None and moved.zone == "local-c" and moved.hosts[0].ip == "127.2.0.10"
        assert {h.host_key for h in moved.hosts}.isdisjoint(h.host_key for h in info.hosts)
        result = ssh_run(moved, 3, "echo $PHANTOM_HOST_IP $HOME")
        assert result.returncode == 0, result.stderr
        ip, home = result.stdout.split()
        assert ip == "127.2.0.13" and Path(home).parent.name != info.hosts[3].name
        zone = metadata_get(moved.hosts[1].metadata, "instance/zone")[1]
        assert moved.hosts[1].metadata.startswith("127.2.0.11:") and zone.endswith("/local-c")
        # Two nodes of one name in two zones: each lists, neither shares a sandbox.
        assert sorted(await all_nodes(info)) == sorted([info.node_path, moved.node_path])
        assert len({n.path for n in moved.nodes}) == 2


async def test_a_preempted_node_holds_its_slice_until_deleted(pod: PodInfo) -> None:
    client.preempt(pod.run_dir, "all")
    with pytest.raises(gexc.GoogleAPICallError) as err:
        await create(pod, "local-a", "second")
    assert_stockout(err.value, "local-a")
    zone = client.pod_status(pod.run_dir).zone_info("local-a")  # type: ignore[union-attr]
    assert (zone.capacity, zone.used, zone.free) == (1, 1, 0)

    await delete(pod, pod.node_path)
    again = await create(pod, "local-a", "phantom-pod")
    assert again.state == tpu_v2.Node.State.READY

    # More capacity: a second slice gets the next address block (slot 1).
    client.set_zone(pod.run_dir, "local-a", capacity=2)
    other = await create(pod, "local-a", "second")
    assert other.network_endpoints[0].ip_address == host_ip(0, zone=0, slot=1)


async def test_stockouts_set_at_run_time(pod: PodInfo, capsys: pytest.CaptureFixture[str]) -> None:
    info = client.set_zone(pod.run_dir, "local-c", stockout_s=0)
    assert info.zone_info("local-c").stockout
    with pytest.raises(gexc.GoogleAPICallError) as err:
        await create(pod, "local-c", "phantom-pod")
    assert_stockout(err.value, "local-c")
    # The REST equivalent, through the real client's REST transport (its sync operation
    # maps the code: ResourceExhausted).
    rest = tpu_v2.TpuClient(
        transport="rest",
        credentials=AnonymousCredentials(),
        client_options=ClientOptions(api_endpoint=pod.rest_endpoint.rstrip("/")),
    )
    op = rest.create_node(parent=parent(pod, "local-c"), node_id="phantom-pod", node=spec())
    with pytest.raises(gexc.ResourceExhausted, match='no more capacity in the zone "local-c"'):
        op.result(timeout=60)
    client.set_zone(pod.run_dir, "local-c", clear_stockouts=True)
    assert (await create(pod, "local-c", "phantom-pod")).state == tpu_v2.Node.State.READY

    common = ["--run-dir", str(pod.run_dir)]
    assert pod_main(["zone", "local-b", "--stockout", "120", *common]) == 0
    assert "local-b    0/1 slices used  STOCKOUT" in capsys.readouterr().out
    assert pod_main(["zone", "local-z", "--capacity", "2", *common]) == 2
    assert "unknown zone 'local-z'" in capsys.readouterr().err


def test_bad_capacity_flags_are_usage_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = str(tmp_path / "pod")
    for flags, message in (
        (["--stockout", "local-q:0-10"], "unknown zone 'local-q'"),
        (["--stockout", "local-a:10-5"], "need 0 <= START < END"),
        (["--capacity", "local-a:x"], "is not a whole number"),
        (["--zones", "Local-A"], "not a zone name"),
    ):
        assert pod_main(["up", "--run-dir", run_dir, *flags]) == 2
        assert message in capsys.readouterr().err
    assert client.pod_status(run_dir) is None


async def qr_state(info: PodInfo, name: str) -> tpu_v2.QueuedResource:
    async with tpu(info) as api:
        return await api.get_queued_resource(name=name)


async def wait_qr(info: PodInfo, name: str, state: int) -> tpu_v2.QueuedResource:
    async def reached() -> bool:
        return (await qr_state(info, name)).state.state == state

    await until(reached, 60, f"{name} {QR(state).name}")
    return await qr_state(info, name)


async def test_queued_resource_active_suspended_on_preemption_reset_active(
    pod: PodInfo,
) -> None:
    zone_b = parent(pod, "local-b")
    request = tpu_v2.QueuedResource(
        tpu=tpu_v2.QueuedResource.Tpu(
            node_spec=[
                tpu_v2.QueuedResource.Tpu.NodeSpec(
                    parent=zone_b, node_id="phantom-pod", node=spec()
                )
            ]
        ),
        spot=tpu_v2.QueuedResource.Spot(),
    )
    async with tpu(pod) as api:
        op = await api.create_queued_resource(
            parent=zone_b, queued_resource_id="pod-qr", queued_resource=request
        )
        created = await op.result()
    name = f"{zone_b}/queuedResources/pod-qr"
    assert created.name == name
    active = await wait_qr(pod, name, QR.ACTIVE)
    assert "active_data" in active.state
    info = client.pod_status(pod.run_dir)
    assert info is not None and info.zone == "local-b" and info.state == "READY"
    async with tpu(pod) as api:
        node = await api.get_node(name=info.node_path)
    assert node.queued_resource == name
    first_keys = {h.host_key for h in info.hosts}

    client.preempt(pod.run_dir, 2)  # the pod's node is now the queued resource's
    suspended = await wait_qr(pod, name, QR.SUSPENDED)
    assert suspended.state.state_initiator == tpu_v2.QueuedResourceState.StateInitiator.SERVICE
    assert f"{zone_b}/nodes/phantom-pod" not in await all_nodes(pod)  # the service deleted it

    # Reset while the zone has no capacity: it waits, then provisions when it comes back.
    client.set_zone(pod.run_dir, "local-b", stockout_s=0)
    async with tpu(pod) as api:
        await (await api.reset_queued_resource(name=name)).result()
    await wait_qr(pod, name, QR.WAITING_FOR_RESOURCES)
    client.set_zone(pod.run_dir, "local-b", clear_stockouts=True)
    await wait_qr(pod, name, QR.ACTIVE)
    back = client.wait_for(pod.run_dir, lambda p: p.state == "READY", 60, "READY")
    assert back.zone == "local-b" and first_keys.isdisjoint(h.host_key for h in back.hosts)

    async with tpu(pod) as api:
        with pytest.raises(gexc.FailedPrecondition, match="delete the node first"):
            await api.delete_queued_resource(name=name)
        await (await api.delete_queued_resource(request={"name": name, "force": True})).result()
        with pytest.raises(gexc.NotFound):
            await api.get_queued_resource(name=name)
    assert await all_nodes(pod) == [pod.node_path]


async def test_queued_resource_fails_when_valid_until_passes(pod: PodInfo) -> None:
    client.set_zone(pod.run_dir, "local-c", stockout_s=0)
    zone_c = parent(pod, "local-c")
    request = tpu_v2.QueuedResource(
        tpu=tpu_v2.QueuedResource.Tpu(
            node_spec=[
                tpu_v2.QueuedResource.Tpu.NodeSpec(parent=zone_c, node_id="late", node=spec())
            ]
        ),
        queueing_policy=tpu_v2.QueuedResource.QueueingPolicy(
            valid_until_duration=duration_pb2.Duration(seconds=1)
        ),
    )
    async with tpu(pod) as api:
        await (
            await api.create_queued_resource(
                parent=zone_c, queued_resource_id="late", queued_resource=request
            )
        ).result()
    failed = await wait_qr(pod, f"{zone_c}/queuedResources/late", QR.FAILED)
    assert "valid-until" in failed.state.failed_data.error.message


@needs_gcloud
def test_gcloud_queued_resources_and_a_stockout_over_rest(pod: PodInfo, tmp_path: Path) -> None:
    cfg = tmp_path / "gcloud"
    run_gcloud(
        pod, cfg, "compute", "tpus", "queued-resources", "create", "qr1", "--zone=local-b",
        "--node-id=phantom-pod", "--accelerator-type=v4-32",
        "--runtime-version=tpu-ubuntu2204-base", "--spot",
    )  # fmt: skip
    listed = run_gcloud(pod, cfg, "compute", "tpus", "queued-resources", "list", "--zone=local-b")
    header, row = listed.stdout.splitlines()[:2]
    assert header.split()[0] == "NAME" and row.split()[0] == "qr1"
    client.wait_for(pod.run_dir, lambda p: p.zone == "local-b" and p.state == "READY", 60, "b")
    qr = gcloud_json(pod, cfg, "compute", "tpus", "queued-resources", "describe", "qr1",
                     "--zone=local-b")  # fmt: skip
    assert qr["state"]["state"] == "ACTIVE"
    assert qr["tpu"]["nodeSpec"][0]["nodeId"] == "phantom-pod" and "spot" in qr
    client.preempt(pod.run_dir, 0)
    client.wait_for(
        pod.run_dir,
        lambda p: p.queued_resources[0]["state"] == "SUSPENDED",
        60,
        "SUSPENDED",
    )
    qr = gcloud_json(pod, cfg, "compute", "tpus", "queued-resources", "describe", "qr1",
                     "--zone=local-b")  # fmt: skip
    assert qr["state"]["state"] == "SUSPENDED" and qr["state"]["stateInitiator"] == "SERVICE"
    run_gcloud(pod, cfg, "compute", "tpus", "queued-resources", "reset", "qr1", "--zone=local-b")
    run_gcloud(pod, cfg, "compute", "tpus", "queued-resources", "delete", "qr1",
               "--zone=local-b", "--force", "--quiet")  # fmt: skip
    assert gcloud_json(pod, cfg, "compute", "tpus", "queued-resources", "list",
                       "--zone=local-b") == []  # fmt: skip

    client.set_zone(pod.run_dir, "local-c", stockout_s=0)
    failed = run_gcloud(
        pod, cfg, "compute", "tpus", "tpu-vm", "create", "x", "--zone=local-c",
        "--accelerator-type=v4-32", "--version=tpu-ubuntu2204-base", check=False,
    )  # fmt: skip
    assert failed.returncode == 1 and "Waiting for operation" in failed.stderr
    error = json.loads(failed.stderr[failed.stderr.index("{") :])
    assert error["code"] == 8 and error["message"].startswith(STOCKOUT.format(zone="local-c"))
