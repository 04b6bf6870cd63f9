"""Structural schemas of the served kinds: what strict field validation and OpenAPI use.

JobSet's is the CRD's ``openAPIV3Schema`` (``data/jobset-v1alpha2.schema.json``, made by
``schema_gen``). Pods and Jobs reuse the PodSpec and JobSpec that CRD embeds (the same
upstream types, with their descriptions). ObjectMeta, ConfigMap, Service and
ServiceAccount are written out here with the fields kube-apiserver knows.
"""

from __future__ import annotations

import copy
import functools
import json
from pathlib import Path
from typing import Any

Schema = dict[str, Any]
DATA = Path(__file__).with_name("data") / "jobset-v1alpha2.schema.json"
META_REF = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"


def _s(description: str, type_: str = "string", **extra: Any) -> Schema:
    return {"description": description, "type": type_, **extra}


_STR_MAP = {"type": "object", "additionalProperties": {"type": "string"}}
_ANY = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}

OBJECT_META: Schema = _s(
    "ObjectMeta is metadata that all persisted resources must have, which includes all "
    "objects users must create.",
    "object",
    properties={
        "annotations": {
            **_STR_MAP,
            "description": "Annotations is an unstructured key value map stored with a resource.",
        },
        "creationTimestamp": _s(
            "CreationTimestamp is a timestamp representing the server "
            "time when this object was created.",
            format="date-time",
        ),
        "deletionGracePeriodSeconds": _s(
            "Number of seconds allowed for this object to gracefully terminate.",
            "integer",
            format="int64",
        ),
        "deletionTimestamp": _s(
            "DeletionTimestamp is RFC 3339 date and time at which this resource will be deleted.",
            format="date-time",
        ),
        "finalizers": _s(
            "Must be empty before the object is deleted from the registry.",
            "array",
            items={"type": "string"},
        ),
        "generateName": _s(
            "GenerateName is an optional prefix, used by the server, to "
            "generate a unique name ONLY IF the Name field has not been provided."
        ),
        "generation": _s(
            "A sequence number representing a specific generation of the desired state.",
            "integer",
            format="int64",
        ),
        "labels": {
            **_STR_MAP,
            "description": "Map of string keys and values that can be "
            "used to organize and categorize (scope and select) objects.",
        },
        "managedFields": _s(
            "ManagedFields maps workflow-id and version to the set of "
            "fields that are managed by that workflow.",
            "array",
            items=_ANY,
        ),
        "name": _s("Name must be unique within a namespace."),
        "namespace": _s("Namespace defines the space within which each name must be unique."),
        "ownerReferences": _s("List of objects depended by this object.", "array", items=_ANY),
        "resourceVersion": _s(
            "An opaque value that represents the internal version of this object."
        ),
        "selfLink": _s("Deprecated: selfLink is a legacy read-only field."),
        "uid": _s("UID is the unique in time and space value for this object."),
    },
)


@functools.cache
def _jobset() -> Schema:
    return dict(json.loads(DATA.read_text())["openAPIV3Schema"])


def _top(description: str, spec: Schema | None, **more: Schema) -> Schema:
    props: Schema = {
        "apiVersion": _s(
            "APIVersion defines the versioned schema of this representation of an object."
        ),
        "kind": _s("Kind is a string value representing the REST resource this object represents."),
        "metadata": {"$ref": META_REF, "description": "Standard object's metadata."},
    }
    if spec is not None:
        props["spec"] = spec
        props["status"] = {**_ANY, "description": "Most recently observed status."}
    props.update(more)
    return {"description": description, "type": "object", "properties": props}


def _job_spec() -> Schema:
    rj = _jobset()["properties"]["spec"]["properties"]["replicatedJobs"]["items"]
    spec = copy.deepcopy(rj["properties"]["template"]["properties"]["spec"])
    # A Job's pod template carries a full ObjectMeta (the CRD prunes it to five fields).
    tmpl = spec["properties"]["template"]["properties"]
    tmpl["metadata"] = {"$ref": META_REF, "description": tmpl["metadata"].get("description", "")}
    return spec


def _pod_spec() -> Schema:
    return copy.deepcopy(_job_spec()["properties"]["template"]["properties"]["spec"])


def _service_spec() -> Schema:
    port = _s(
        "ServicePort contains information on service's port.",
        "object",
        properties={
            "appProtocol": _s("The application protocol for this port."),
            "name": _s("The name of this port within the service."),
            "nodePort": _s("The port on each node on which this service is exposed.", "integer"),
            "port": _s("The port that will be exposed by this service.", "integer"),
            "protocol": _s('The IP protocol for this port. Supports "TCP", "UDP", and "SCTP".'),
            "targetPort": {
                "description": "Number or name of the port to access on the pods "
                "targeted by the service.",
                "x-kubernetes-int-or-string": True,
            },
        },
    )
    names = {
        "allocateLoadBalancerNodePorts": (
            "boolean",
            "Whether NodePorts are allocated for LoadBalancer services.",
        ),
        "clusterIP": ("string", 'The IP address of the service; "None" makes it headless.'),
        "clusterIPs": ("array", "IP addresses assigned to this service."),
        "externalIPs": ("array", "IPs for which nodes accept traffic for this service."),
        "externalName": ("string", "The external reference for type ExternalName."),
        "externalTrafficPolicy": ("string", "How nodes distribute external traffic."),
        "healthCheckNodePort": ("integer", "The healthcheck nodePort for the service."),
        "internalTrafficPolicy": ("string", "How nodes distribute cluster-internal traffic."),
        "ipFamilies": ("array", "IP families (IPv4, IPv6) assigned to this service."),
        "ipFamilyPolicy": ("string", "Dual-stackness requested or required by this Service."),
        "loadBalancerClass": ("string", "The class of the load balancer implementation."),
        "loadBalancerIP": ("string", "Deprecated: the load balancer IP."),
        "loadBalancerSourceRanges": ("array", "Client IPs allowed through the load balancer."),
        "publishNotReadyAddresses": ("boolean", "Publish DNS records of not-ready pods too."),
        "selector": (
            "object",
            "Route service traffic to pods with label keys and values matching this selector.",
        ),
        "sessionAffinity": ("string", 'Supports "ClientIP" and "None".'),
        "sessionAffinityConfig": ("object", "Configurations of session affinity."),
        "trafficDistribution": ("string", "How traffic is distributed to endpoints."),
        "type": ("string", "ExternalName, ClusterIP, NodePort, or LoadBalancer."),
    }
    props: Schema = {n: _s(d, t) for n, (t, d) in names.items()}
    for n in ("clusterIPs", "externalIPs", "ipFamilies", "loadBalancerSourceRanges"):
        props[n]["items"] = {"type": "string"}
    props["selector"]["additionalProperties"] = {"type": "string"}
    props["sessionAffinityConfig"]["x-kubernetes-preserve-unknown-fields"] = True
    props["ports"] = _s("The list of ports that are exposed by this service.", "array", items=port)
    return _s(
        "ServiceSpec describes the attributes that a user creates on a service.",
        "object",
        properties=props,
    )


@functools.cache
def kinds() -> dict[tuple[str, str], Schema]:
    """(group, kind) -> the kind's schema (``metadata`` by $ref to ObjectMeta)."""
    js = copy.deepcopy(_jobset())
    js["properties"]["metadata"] = {"$ref": META_REF, "description": "Standard object's metadata."}
    refs = {
        "type": "array",
        "items": _s(
            "LocalObjectReference.", "object", properties={"name": _s("Name of the referent.")}
        ),
    }
    return {
        ("jobset.x-k8s.io", "JobSet"): js,
        ("", "Pod"): _top("Pod is a collection of containers that can run on a host.", _pod_spec()),
        ("batch", "Job"): _top("Job represents the configuration of a single job.", _job_spec()),
        ("", "Service"): _top(
            "Service is a named abstraction of software service (for "
            "example, mysql) consisting of local port (for example 3306) "
            "that the proxy listens on, and the selector that determines "
            "which pods will answer requests sent through the proxy.",
            _service_spec(),
        ),
        ("", "ConfigMap"): _top(
            "ConfigMap holds configuration data for pods to consume.",
            None,
            data={**_STR_MAP, "description": "Data contains the configuration data."},
            binaryData={**_STR_MAP, "description": "BinaryData contains the binary data."},
            immutable=_s(
                "Immutable, if set to true, ensures that data stored in the "
                "ConfigMap cannot be updated.",
                "boolean",
            ),
        ),
        ("", "ServiceAccount"): _top(
            "ServiceAccount binds together: a name, understood by users, and perhaps by "
            "peripheral systems, for an identity; a principal that can be authenticated and "
            "authorized; a set of secrets.",
            None,
            automountServiceAccountToken=_s(
                "Whether pods running as this service account "
                "should have an API token automatically "
                "mounted.",
                "boolean",
            ),
            imagePullSecrets={**refs, "description": "Secrets for pulling images."},
            secrets={"type": "array", "items": _ANY, "description": "Deprecated."},
        ),
    }


def for_kind(group: str, kind: str) -> Schema | None:
    return kinds().get((group, kind))


def unknown_fields(schema: Schema, obj: Any) -> list[str]:
    """Paths of the fields ``schema`` does not declare, in document order, written as the
    API server's strict decoder writes them (``spec.containers[0].imag``)."""
    out: list[str] = []

    def walk(node: Any, sch: Schema, path: str) -> None:
        if "$ref" in sch:
            sch = OBJECT_META
        if isinstance(node, dict):
            if sch.get("x-kubernetes-preserve-unknown-fields"):
                return
            props = sch.get("properties")
            extra = sch.get("additionalProperties")
            for k, v in node.items():
                sub = f"{path}.{k}" if path else k
                if props is not None and k in props:
                    walk(v, props[k], sub)
                elif isinstance(extra, dict):
                    walk(v, extra, sub)
                elif props is not None:
                    out.append(sub)
        elif isinstance(node, list) and isinstance(sch.get("items"), dict):
            for i, item in enumerate(node):
                walk(item, sch["items"], f"{path}[{i}]")

    walk(obj, schema, "")
    return out
