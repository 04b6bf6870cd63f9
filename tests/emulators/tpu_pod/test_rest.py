"""The REST front end of the emulated TPU API, judged by the real gcloud and the real
``google.cloud.tpu_v2`` REST transport."""

from __future__ import annotations

import json
import shutil
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from google.api_core import exceptions as gexc
from google.api_core.client_options import ClientOptions
from google.auth.credentials import AnonymousCredentials
from google.cloud import tpu_v2

from emulators.tpu_pod import client
from emulators.tpu_pod.client import PodInfo
from tests.support.emulator_helpers import (
    assert_loopback_only,
    gcloud_json,
    inet_connects,
    needs_gcloud,
    run_gcloud,
)


def rest_client(info: PodInfo) -> tpu_v2.TpuClient:
    return tpu_v2.TpuClient(
        transport="rest",
        credentials=AnonymousCredentials(),
        client_options=ClientOptions(api_endpoint=info.rest_endpoint.rstrip("/")),
    )


def http(info: PodInfo, method: str, path: str, body: object = None) -> tuple[int, dict]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(f"{info.rest_endpoint}{path}", data=data, method=method)
    req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


@needs_gcloud
def test_gcloud_lists_and_describes_the_node_and_sees_the_preemption(
    pod: PodInfo, tmp_path: Path
) -> None:
    cfg = tmp_path / "gcloud"
    trace = tmp_path / "connects.txt" if shutil.which("strace") else None
    listed = run_gcloud(
        pod, cfg, "compute", "tpus", "tpu-vm", "list", "--zone=local-a",
        "--project=phantom-local", trace=trace,
    )  # fmt: skip
    table = listed.stdout.splitlines()
    assert table[0].split()[:2] == ["NAME", "ZONE"] and "STATUS" in table[0]
    assert table[1].split()[:3] == ["phantom-pod", "local-a", "v4-32"]
    assert table[1].split()[-1] == "READY"
    if trace is not None:
        # gcloud's own probes (GCE check, metadata) must stay on loopback too.
        addresses = inet_connects(trace)
        assert "127.0.0.1" in addresses
        assert_loopback_only(addresses)

    node = gcloud_json(pod, cfg, "compute", "tpus", "tpu-vm", "describe", "phantom-pod",
                       "--zone=local-a")  # fmt: skip
    assert node["name"] == pod.node_path and node["state"] == "READY"
    assert node["acceleratorType"] == "v4-32" and node["schedulingConfig"] == {"spot": True}
    assert [(e["ipAddress"], e["port"]) for e in node["networkEndpoints"]] == [
        (h.ip, h.ssh_port) for h in pod.hosts
    ]
    assert node["apiVersion"] == "V2" and node["health"] == "HEALTHY"

    client.preempt(pod.run_dir, 1)
    node = gcloud_json(pod, cfg, "compute", "tpus", "tpu-vm", "describe", "phantom-pod",
                       "--zone=local-a")  # fmt: skip
    assert node["state"] == "PREEMPTED"
    assert [s["workerId"] for s in node["symptoms"]] == ["1"]
    listed = run_gcloud(pod, cfg, "compute", "tpus", "tpu-vm", "list", "--zone=-")
    assert listed.stdout.splitlines()[1].split()[-1] == "PREEMPTED"


@needs_gcloud
def test_gcloud_delete_and_create_run_long_running_operations(pod: PodInfo, tmp_path: Path) -> None:
    cfg = tmp_path / "gcloud"
    deleted = run_gcloud(pod, cfg, "compute", "tpus", "tpu-vm", "delete", "phantom-pod",
                         "--zone=local-a", "--quiet")  # fmt: skip
    assert "Waiting for operation" in deleted.stderr, deleted.stderr
    assert gcloud_json(pod, cfg, "compute", "tpus", "tpu-vm", "list", "--zone=local-a") == []
    run_gcloud(
        pod, cfg, "compute", "tpus", "tpu-vm", "create", "phantom-pod", "--zone=local-a",
        "--accelerator-type=v4-32", "--version=tpu-ubuntu2204-base", "--spot",
    )  # fmt: skip
    fresh = client.pod_status(pod.run_dir)
    assert fresh is not None and fresh.state == "READY"
    assert {h.host_key for h in fresh.hosts}.isdisjoint({h.host_key for h in pod.hosts})
    locations = gcloud_json(pod, cfg, "compute", "tpus", "locations", "list")
    assert [loc["locationId"] for loc in locations] == ["local-a", "local-b", "local-c"]


def test_the_rest_transport_of_the_real_client_library(pod: PodInfo) -> None:
    api = rest_client(pod)
    nodes = list(api.list_nodes(parent=pod.parent))
    assert [n.name for n in nodes] == [pod.node_path]
    assert nodes[0].state == tpu_v2.Node.State.READY
    attrs = api.get_guest_attributes(
        request={"name": pod.node_path, "query_path": "hostkeys/ssh-host-key"}
    )
    assert [a.query_value.items[0].value for a in attrs.guest_attributes] == [
        h.host_key for h in pod.hosts
    ]
    with pytest.raises(gexc.NotFound, match="not found"):
        api.get_node(name=pod.node_path + "-x")
    op = api.delete_node(name=pod.node_path)
    op.result(timeout=60)
    assert list(api.list_nodes(parent="projects/phantom-local/locations/-")) == []
    created = api.create_node(
        parent=pod.parent, node_id=pod.node_name, node=tpu_v2.Node(accelerator_type="v4-32")
    ).result(timeout=60)
    assert created.state == tpu_v2.Node.State.READY
    # The delete and the create are listed as finished operations of the zone.
    ops = api.list_operations(request={"name": pod.parent}).operations
    assert len(ops) >= 2 and all(o.done for o in ops)
    assert all(o.name.startswith(f"{pod.parent}/operations/") for o in ops)


def test_rest_wire_format_errors_and_operations(pod: PodInfo) -> None:
    status, body = http(pod, "GET", f"v2/{pod.node_path}")
    assert status == 200 and body["state"] == "READY" and isinstance(body["id"], str)
    assert "network_endpoints" not in body and "networkEndpoints" in body

    status, body = http(pod, "GET", f"v2/{pod.parent}/nodes/nope")
    assert status == 404
    assert body["error"]["status"] == "NOT_FOUND" and body["error"]["code"] == 404

    status, body = http(pod, "POST", f"v2/{pod.parent}/nodes?nodeId={pod.node_name}", {})
    assert status == 409 and body["error"]["status"] == "ALREADY_EXISTS"

    status, body = http(pod, "POST", f"v2/{pod.parent}/nodes?nodeId=Bad_Name", {})
    assert status == 400 and "node id 'Bad_Name'" in body["error"]["message"]

    status, op = http(pod, "DELETE", f"v2/{pod.node_path}")
    assert status == 200 and op["name"].startswith(f"{pod.parent}/operations/operation-")
    meta = op["metadata"]
    assert meta["@type"] == "type.googleapis.com/google.cloud.tpu.v2.OperationMetadata"
    assert meta["verb"] == "delete" and meta["target"] == pod.node_path
    done = client.wait_for(pod.run_dir, lambda p: p.state == "NOT_FOUND", 60, "node deleted")
    assert done.state == "NOT_FOUND"
    status, op = http(pod, "GET", f"v2/{op['name']}")
    assert status == 200 and op["done"] is True
    assert op["response"]["@type"] == "type.googleapis.com/google.protobuf.Empty"

    status, body = http(pod, "GET", "v2/projects/other/locations/local-a/nodes")
    assert status == 404 and "not found" in body["error"]["message"]
    status, body = http(pod, "GET", "v1/projects/phantom-local/locations")
    assert [loc["locationId"] for loc in body["locations"]] == ["local-a", "local-b", "local-c"]
    status, body = http(pod, "PATCH", f"v2/{pod.node_path}", {})
    assert status == 501 and body["error"]["status"] == "UNIMPLEMENTED"
