"""Protobuf request bodies, for the kinds kubectl 1.32+ sends that way.

``kubectl create configmap|secret|service|serviceaccount`` post typed objects as
``application/vnd.kubernetes.protobuf`` and do not retry as JSON after a 415. The
envelope is ``k8s\\x00`` + runtime.Unknown{typeMeta{apiVersion, kind}, raw}; ``raw`` is
the object, decoded here with the field numbers of k8s.io/api core/v1 generated.proto
(and apimachinery's ObjectMeta). Anything else stays a 415."""

from __future__ import annotations

import base64
from typing import Any

MAGIC = b"k8s\x00"

# message -> field number -> (json name, kind, message or element type)
# kinds: s string, b bool, i int, B bytes (base64 in JSON), m message,
# rs/rm repeated string/message, ms map<string,string>, mB map<string,bytes>
_S: dict[str, dict[int, tuple[str, str, str]]] = {
    "ObjectMeta": {
        1: ("name", "s", ""),
        2: ("generateName", "s", ""),
        3: ("namespace", "s", ""),
        5: ("uid", "s", ""),
        6: ("resourceVersion", "s", ""),
        7: ("generation", "i", ""),
        11: ("labels", "ms", ""),
        12: ("annotations", "ms", ""),
        14: ("finalizers", "rs", ""),
    },
    "ConfigMap": {
        1: ("metadata", "m", "ObjectMeta"),
        2: ("data", "ms", ""),
        3: ("binaryData", "mB", ""),
        4: ("immutable", "b", ""),
    },
    "Secret": {
        1: ("metadata", "m", "ObjectMeta"),
        2: ("data", "mB", ""),
        3: ("type", "s", ""),
        4: ("stringData", "ms", ""),
        5: ("immutable", "b", ""),
    },
    "ServiceAccount": {
        1: ("metadata", "m", "ObjectMeta"),
        3: ("imagePullSecrets", "rm", "LocalObjectReference"),
        4: ("automountServiceAccountToken", "b", ""),
    },
    "LocalObjectReference": {1: ("name", "s", "")},
    "Service": {1: ("metadata", "m", "ObjectMeta"), 2: ("spec", "m", "ServiceSpec")},
    "ServiceSpec": {
        1: ("ports", "rm", "ServicePort"),
        2: ("selector", "ms", ""),
        3: ("clusterIP", "s", ""),
        4: ("type", "s", ""),
        5: ("externalIPs", "rs", ""),
        7: ("sessionAffinity", "s", ""),
        10: ("externalName", "s", ""),
        11: ("externalTrafficPolicy", "s", ""),
        13: ("publishNotReadyAddresses", "b", ""),
        17: ("ipFamilyPolicy", "s", ""),
        18: ("clusterIPs", "rs", ""),
        19: ("ipFamilies", "rs", ""),
        22: ("internalTrafficPolicy", "s", ""),
    },
    "ServicePort": {
        1: ("name", "s", ""),
        2: ("protocol", "s", ""),
        3: ("port", "i", ""),
        4: ("targetPort", "m", "IntOrString"),
        5: ("nodePort", "i", ""),
        6: ("appProtocol", "s", ""),
    },
    "IntOrString": {1: ("type", "i", ""), 2: ("intVal", "i", ""), 3: ("strVal", "s", "")},
    "Unknown": {1: ("typeMeta", "m", "TypeMeta"), 2: ("raw", "B", "")},
    "TypeMeta": {1: ("apiVersion", "s", ""), 2: ("kind", "s", "")},
}
KINDS = frozenset({"ConfigMap", "Secret", "ServiceAccount", "Service"})


class Undecodable(ValueError):
    pass


def _varint(buf: bytes, i: int) -> tuple[int, int]:
    shift = value = 0
    while True:
        if i >= len(buf):
            raise Undecodable("truncated varint")
        byte = buf[i]
        i += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, i
        shift += 7


def _fields(buf: bytes) -> list[tuple[int, int | bytes]]:
    out: list[tuple[int, int | bytes]] = []
    i = 0
    while i < len(buf):
        key, i = _varint(buf, i)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, i = _varint(buf, i)
            out.append((number, value))
        elif wire == 2:
            size, i = _varint(buf, i)
            out.append((number, buf[i : i + size]))
            i += size
        elif wire in (1, 5):
            i += 8 if wire == 1 else 4
        else:
            raise Undecodable(f"wire type {wire}")
    return out


def _message(buf: bytes, name: str) -> dict[str, Any]:
    schema = _S[name]
    out: dict[str, Any] = {}
    for number, value in _fields(buf):
        if number not in schema:
            continue
        key, kind, sub = schema[number]
        if value in (b"", 0) and kind in ("s", "i"):
            continue  # gogo writes every non-pointer field; empty ones are JSON's omitempty
        if kind == "s" and isinstance(value, bytes):
            out[key] = value.decode()
        elif kind == "B" and isinstance(value, bytes):
            out[key] = value
        elif kind in ("b", "i") and isinstance(value, int):
            out[key] = bool(value) if kind == "b" else value
        elif kind == "m" and isinstance(value, bytes):
            out[key] = _message(value, sub)
        elif kind == "rs" and isinstance(value, bytes):
            out.setdefault(key, []).append(value.decode())
        elif kind == "rm" and isinstance(value, bytes):
            out.setdefault(key, []).append(_message(value, sub))
        elif kind in ("ms", "mB") and isinstance(value, bytes):
            entry = dict(_fields(value))
            k, v = entry.get(1, b""), entry.get(2, b"")
            if isinstance(k, bytes) and isinstance(v, bytes):
                text = v.decode() if kind == "ms" else base64.b64encode(v).decode()
                out.setdefault(key, {})[k.decode()] = text
    return out


def _int_or_string(port: dict[str, Any]) -> None:
    target = port.get("targetPort")
    if isinstance(target, dict):
        port["targetPort"] = (
            target.get("strVal", "") if target.get("type") else target.get("intVal", 0)
        )


def decode(body: bytes) -> dict[str, Any]:
    """The JSON form of a protobuf-encoded object of a kind in KINDS."""
    if not body.startswith(MAGIC):
        raise Undecodable("no k8s protobuf envelope")
    unknown = _message(body[len(MAGIC) :], "Unknown")
    tm = unknown.get("typeMeta") or {}
    kind = tm.get("kind", "")
    if kind not in KINDS:
        raise Undecodable(f"kind {kind!r}")
    obj = {"apiVersion": tm.get("apiVersion", "v1"), "kind": kind}
    obj.update(_message(unknown.get("raw", b""), kind))
    for port in (obj.get("spec") or {}).get("ports") or []:
        _int_or_string(port)
    return obj
