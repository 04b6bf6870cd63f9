"""OpenAPI v3 (and v2 as JSON) with a component schema per served kind, so
``kubectl explain`` works and ``kubectl apply -f`` validates on the server (what xpk runs).

Names follow kube-apiserver: built-in kinds as ``io.k8s.api.<group>.<version>.<Kind>``,
the JobSet CRD as ``io.x-k8s.jobset.v1alpha2.JobSet`` (the group reversed), metadata by
``$ref`` to ``io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta``; each kind's schema
carries ``x-kubernetes-group-version-kind``, which is how kubectl finds it.

kubectl 1.28+ asks /openapi/v3 whether the server supports ``fieldValidation`` on PATCH
for the object's GVK (cli-runtime's queryParamVerifierV3); when it does, kubectl sends
``fieldValidation=Strict`` and leaves validation to the server, which the emulator does.
kubectl 1.27 fetches /openapi/v2 as protobuf (gnostic ``openapi_v2.Document``) and skips
client-side validation of kinds the document does not describe: a document with no
definitions is encoded by hand below.
"""

from __future__ import annotations

import functools
import hashlib
import json

from emulators.gke import discovery as D
from emulators.gke import layout as L
from emulators.gke import schemas
from emulators.gke.store import Obj

_PARAMS = [
    {"name": n, "in": "query", "schema": {"type": "string", "uniqueItems": True}}
    for n in ("dryRun", "fieldManager", "fieldValidation", "pretty")
]


def _gv_doc(group: str, version: str) -> Obj:
    paths: Obj = {}
    for r in D.RESOURCES:
        if (r.group, r.version) != (group, version):
            continue
        base = f"/api/{version}" if not group else f"/apis/{group}/{version}"
        ns = "/namespaces/{namespace}" if r.namespaced else ""
        gvk = {"group": group, "version": version, "kind": r.kind}
        ops = {}
        for verb in ("patch", "put"):
            ops[verb] = {
                "operationId": f"{verb}{r.kind}",
                "x-kubernetes-action": verb,
                "x-kubernetes-group-version-kind": gvk,
                "parameters": _PARAMS,
                "responses": {"200": {"description": "OK"}},
            }
        paths[f"{base}{ns}/{r.name}/{{name}}"] = ops
        paths[f"{base}{ns}/{r.name}"] = {
            "post": {
                "operationId": f"create{r.kind}",
                "x-kubernetes-action": "post",
                "x-kubernetes-group-version-kind": gvk,
                "parameters": _PARAMS,
                "responses": {"201": {"description": "Created"}},
            }
        }
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": L.GIT_VERSION},
        "paths": paths,
        "components": {"schemas": components(group, version, "#/components/schemas/")},
    }


def schema_name(group: str, version: str, kind: str) -> str:
    if group == "jobset.x-k8s.io":
        return f"io.x-k8s.jobset.{version}.{kind}"
    return f"io.k8s.api.{group or 'core'}.{version}.{kind}"


def _refs(node: object, prefix: str) -> object:
    if isinstance(node, dict):
        return {
            k: (prefix + v if k == "$ref" and isinstance(v, str) else _refs(v, prefix))
            for k, v in node.items()
        }
    if isinstance(node, list):
        return [_refs(v, prefix) for v in node]
    return node


def components(group: str, version: str, prefix: str) -> Obj:
    out: Obj = {schemas.META_REF: schemas.OBJECT_META}
    for r in D.RESOURCES:
        if (r.group, r.version) != (group, version):
            continue
        schema = schemas.for_kind(r.group, r.kind)
        if schema is None:
            continue
        gvk = [{"group": r.group, "version": r.version, "kind": r.kind}]
        out[schema_name(r.group, r.version, r.kind)] = {
            **_refs(schema, prefix),  # type: ignore[dict-item]
            "x-kubernetes-group-version-kind": gvk,
        }
    return out


def _key(group: str, version: str) -> str:
    return f"api/{version}" if not group else f"apis/{group}/{version}"


@functools.cache
def docs() -> dict[str, Obj]:
    return {_key(g, v): _gv_doc(g, v) for g, v in [("", "v1"), *D.GROUPS]}


@functools.cache
def _root() -> Obj:
    out = {}
    for key, doc in docs().items():
        digest = hashlib.sha512(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:32]
        out[key] = {"serverRelativeURL": f"/openapi/v3/{key}?hash={digest.upper()}"}
    return {"paths": out}


def v3_root() -> Obj:
    return _root()


def v3_doc(key: str) -> Obj | None:
    return docs().get(key)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field (wire type 2)."""
    tag = (number << 3) | 2
    length = len(payload)
    varint = b""
    while True:
        byte = length & 0x7F
        length >>= 7
        varint += bytes([byte | (0x80 if length else 0)])
        if not length:
            break
    return bytes([tag]) + varint + payload


def v2_protobuf() -> bytes:
    """openapi_v2.Document{swagger: "2.0", info: {title, version}} with no paths."""
    info = _field(1, b"Kubernetes") + _field(2, L.GIT_VERSION.encode())
    return _field(1, b"2.0") + _field(2, info)


@functools.cache
def v2_json() -> Obj:
    return {
        "swagger": "2.0",
        "info": {"title": "Kubernetes", "version": L.GIT_VERSION},
        "paths": {},
        "definitions": {
            k: v
            for g, ver in [("", "v1"), *D.GROUPS]
            for k, v in components(g, ver, "#/definitions/").items()
        },
    }
