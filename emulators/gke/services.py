"""Services: the API server's defaults (a ClusterIP from GKE's service range) and the
JobSet controller's headless Service, which gives pods with ``hostname``/``subdomain``
their DNS names (``<jobset>-<rjob>-<job>-<index>.<subdomain>``)."""

from __future__ import annotations

import ipaddress
import secrets

from emulators.gke.jobs import owner_ref
from emulators.gke.store import Obj, Store

# GKE's default Service range for new clusters (a /20 in 34.118.224.0).
SERVICE_RANGE = ipaddress.ip_network("34.118.224.0/20")
JOBSET_API = "jobset.x-k8s.io/v1alpha2"


def apply_service_defaults(svc: Obj) -> None:
    spec = svc.setdefault("spec", {})
    spec.setdefault("type", "ClusterIP")
    spec.setdefault("sessionAffinity", "None")
    spec.setdefault("internalTrafficPolicy", "Cluster")
    spec.setdefault("ipFamilies", ["IPv4"])
    spec.setdefault("ipFamilyPolicy", "SingleStack")
    if not spec.get("clusterIP"):
        host = secrets.randbelow(SERVICE_RANGE.num_addresses - 2) + 1
        spec["clusterIP"] = str(SERVICE_RANGE.network_address + host)
    spec.setdefault("clusterIPs", [spec["clusterIP"]])
    for port in spec.get("ports") or []:
        port.setdefault("protocol", "TCP")
        port.setdefault("targetPort", port.get("port"))
        if spec["type"] in ("NodePort", "LoadBalancer") and not port.get("nodePort"):
            port["nodePort"] = 30000 + secrets.randbelow(2768)  # the default node port range
    svc.setdefault("status", {"loadBalancer": {}})


def jobset_service(js: Obj) -> Obj | None:
    """The headless Service JobSet creates when ``network.enableDNSHostnames`` is on
    (pkg/controllers/jobset_controller.go: createHeadlessSvcIfNecessary)."""
    net = (js.get("spec") or {}).get("network") or {}
    if not net.get("enableDNSHostnames"):
        return None
    meta = js["metadata"]
    name = net.get("subdomain") or meta["name"]
    svc: Obj = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": name,
            "namespace": meta.get("namespace", "default"),
            "ownerReferences": [owner_ref(js, "JobSet", JOBSET_API)],
        },
        "spec": {
            "clusterIP": "None",
            "selector": {"jobset.sigs.k8s.io/jobset-name": meta["name"]},
            "publishNotReadyAddresses": bool(net.get("publishNotReadyAddresses", True)),
        },
    }
    apply_service_defaults(svc)
    return svc


def ensure_jobset_service(store: Store, js: Obj) -> None:
    svc = jobset_service(js)
    if svc is None:
        return
    meta = svc["metadata"]
    if store.get("services", meta["namespace"], meta["name"]) is None:
        store.create("services", svc)


def kubernetes_service() -> Obj:
    """default/kubernetes: the API server's own Service, first address of the range."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": "kubernetes",
            "namespace": "default",
            "labels": {"component": "apiserver", "provider": "kubernetes"},
        },
        "spec": {
            "clusterIP": str(SERVICE_RANGE.network_address + 1),
            "ports": [{"name": "https", "port": 443, "protocol": "TCP", "targetPort": 443}],
            "sessionAffinity": "None",
            "type": "ClusterIP",
            "internalTrafficPolicy": "Cluster",
            "ipFamilies": ["IPv4"],
            "ipFamilyPolicy": "SingleStack",
            "clusterIPs": [str(SERVICE_RANGE.network_address + 1)],
        },
        "status": {"loadBalancer": {}},
    }
