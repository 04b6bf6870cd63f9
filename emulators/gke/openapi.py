"""Just enough OpenAPI for a plain ``kubectl apply -f`` (what xpk runs).

kubectl 1.28+ asks /openapi/v3 whether the server supports ``fieldValidation`` on PATCH
for the object's GVK (cli-runtime's queryParamVerifierV3); when it does, kubectl sends
``fieldValidation=Strict`` and leaves validation to the server, which the emulator does.
kubectl 1.27 fetches /openapi/v2 as protobuf (gnostic ``openapi_v2.Document``) and skips
client-side validation of kinds the document does not describe: a document with no
definitions is encoded by hand below.
"""

from __future__ import annotations

import hashlib
import json

from emulators.gke import discovery as D
from emulators.gke import layout as L
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
        "components": {"schemas": {}},
    }


def _key(group: str, version: str) -> str:
    return f"api/{version}" if not group else f"apis/{group}/{version}"


DOCS: dict[str, Obj] = {_key(g, v): _gv_doc(g, v) for g, v in [("", "v1"), *D.GROUPS]}


def v3_root() -> Obj:
    out = {}
    for key, doc in DOCS.items():
        digest = hashlib.sha512(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:32]
        out[key] = {"serverRelativeURL": f"/openapi/v3/{key}?hash={digest.upper()}"}
    return {"paths": out}


def v3_doc(key: str) -> Obj | None:
    return DOCS.get(key)


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


def v2_json() -> Obj:
    return {
        "swagger": "2.0",
        "info": {"title": "Kubernetes", "version": L.GIT_VERSION},
        "paths": {},
        "definitions": {},
    }
