"""The Google Cloud side of the cluster: the GKE API (container.googleapis.com v1, and
v1beta1 for `gcloud beta`) and the project lookup of Resource Manager, on the same loopback
port as the Kubernetes API.

What `gcloud container clusters list|describe|get-credentials` and `gcloud container
node-pools list|describe` send when ``api_endpoint_overrides/container`` points here, and
`gcloud projects describe` with ``api_endpoint_overrides/cloudresourcemanager`` and
`gcloud monitoring dashboards list` with ``api_endpoint_overrides/monitoring`` (no
dashboards): xpk runs them around its work on the cluster. The paths (``/v1/projects/...``) never meet the
Kubernetes ones (``/api``, ``/apis``). Errors are Google API errors (``{"error": {...}}``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aiohttp import web

from emulators.gke import layout as L

if TYPE_CHECKING:
    from emulators.gke.daemon import Cluster

PROJECT_NUMBER = "100000000042"
CREATED = "2026-01-01T00:00:00+00:00"


def _error(code: int, status: str, message: str) -> web.Response:
    body = {"error": {"code": code, "message": message, "status": status}}
    return web.json_response(body, status=code)


def _pool(c: Cluster, name: str) -> dict[str, Any]:
    tpu = name != L.CPU_POOL
    base = f"projects/{L.PROJECT}/locations/{L.LOCATION}/clusters/{c.name}/nodePools/{name}"
    pool: dict[str, Any] = {
        "name": name,
        "config": {
            "machineType": c.shape.machine_type if tpu else L.CPU_MACHINE_TYPE,
            "diskSizeGb": 100,
            "imageType": "COS_CONTAINERD",
            **({"spot": True} if tpu else {}),
        },
        "initialNodeCount": c.shape.nodes if tpu else 1,
        "locations": [L.ZONE],
        "selfLink": f"https://container.googleapis.com/v1/{base}",
        "version": L.KUBELET_VERSION.lstrip("v"),
        "status": "RUNNING",
    }
    if tpu:
        pool["placementPolicy"] = {"type": "COMPACT", "tpuTopology": c.shape.topology}
        if c.slice_state(name) != "READY":
            # A preempted slice's pool is being repaired, as GKE shows it.
            pool["status"] = "RECONCILING"
    return pool


def cluster_resource(c: Cluster) -> dict[str, Any]:
    """``Cluster`` (container v1) of the emulated cluster; ``endpoint`` is the TLS port."""
    version = L.GIT_VERSION.lstrip("v")
    return {
        "name": c.name,
        "location": L.LOCATION,
        "zone": L.LOCATION,
        "locations": [L.ZONE],
        "endpoint": f"127.0.0.1:{c.tls_port}",
        "masterAuth": c.tls.master_auth(),
        "status": "RUNNING",
        "currentMasterVersion": version,
        "currentNodeVersion": version,
        "initialClusterVersion": version,
        "createTime": CREATED,
        "selfLink": (
            f"https://container.googleapis.com/v1/projects/{L.PROJECT}/locations/"
            f"{L.LOCATION}/clusters/{c.name}"
        ),
        "network": "default",
        "subnetwork": "default",
        "releaseChannel": {"channel": "RAPID"},
        "currentNodeCount": sum(c.shape.nodes for p in c.pools if c.slice_state(p) == "READY") + 1,
        "nodePools": [_pool(c, p) for p in (L.CPU_POOL, *c.pools)],
    }


def answer(c: Cluster, request: web.Request, parts: list[str]) -> web.Response | None:
    """The response for a GKE or Resource Manager path, None for any other path."""
    # v1beta1: what `gcloud beta container ...` sends (xpk lists node pools with it before
    # a Pathways workload); its resources are v1's plus beta fields, none of which xpk reads.
    if parts[:1] not in (["v1"], ["v1beta1"]) or parts[1:2] != ["projects"]:
        return None
    if len(parts) < 3 or request.method != "GET":
        return None
    project = parts[2]
    rest = parts[3:]
    if project not in (L.PROJECT, PROJECT_NUMBER):
        return _error(403, "PERMISSION_DENIED", f"Permission denied on project {project}.")
    if not rest:  # cloudresourcemanager v1 projects.get
        return web.json_response(
            {
                "projectNumber": PROJECT_NUMBER,
                "projectId": L.PROJECT,
                "lifecycleState": "ACTIVE",
                "name": L.PROJECT,
                "createTime": CREATED,
            }
        )
    if rest == ["dashboards"]:  # Cloud Monitoring: xpk looks for its TPU dashboards
        return web.json_response({})
    # /v1/projects/P/{locations|zones}/L/clusters[/C[/nodePools[/N]]]
    if len(rest) < 3 or rest[0] not in ("locations", "zones") or rest[2] != "clusters":
        return _error(404, "NOT_FOUND", "Requested entity was not found.")
    location, tail = rest[1], rest[3:]
    here = location in ("-", L.LOCATION)
    if not tail:
        return web.json_response({"clusters": [cluster_resource(c)] if here else []})
    if not here or tail[0] != c.name:
        return _error(
            404,
            "NOT_FOUND",
            f'Not found: "projects/{project}/locations/{location}/clusters/{tail[0]}".',
        )
    if len(tail) == 1:
        return web.json_response(cluster_resource(c))
    if tail[1] != "nodePools":
        return _error(404, "NOT_FOUND", "Requested entity was not found.")
    pools = {p["name"]: p for p in cluster_resource(c)["nodePools"]}
    if len(tail) == 2:
        return web.json_response({"nodePools": list(pools.values())})
    if tail[2] in pools:
        return web.json_response(pools[tail[2]])
    return _error(404, "NOT_FOUND", f'Not found: "nodePools/{tail[2]}".')
