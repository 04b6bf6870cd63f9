"""Admission: what the API server checks and defaults before it stores an object, and
the Status errors it answers with (422 Invalid with causes, 400 BadRequest)."""

from __future__ import annotations

import base64
import copy
from typing import Any

from emulators.gke import discovery as D
from emulators.gke import validate as V
from emulators.gke.jobs import apply_job_defaults, apply_pod_defaults
from emulators.gke.jobset import apply_jobset_defaults
from emulators.gke.store import Obj


class ApiError(Exception):
    def __init__(self, code: int, reason: str, message: str, details: Obj | None = None) -> None:
        super().__init__(message)
        self.code, self.reason, self.message, self.details = code, reason, message, details

    def status(self) -> Obj:
        s: Obj = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details:
            s["details"] = self.details
        return s


def invalid(exc: V.Invalid) -> ApiError:
    group = f".{exc.group}" if exc.group else ""
    texts = [c.text() for c in exc.causes]
    joined = texts[0] if len(texts) == 1 else "[" + ", ".join(texts) + "]"
    return ApiError(
        422,
        "Invalid",
        f'{exc.kind}{group} "{exc.name}" is invalid: {joined}',
        {
            "name": exc.name,
            "group": exc.group,
            "kind": exc.kind,
            "causes": [
                {"reason": c.reason, "message": c.message, "field": c.field} for c in exc.causes
            ],
        },
    )


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = copy.deepcopy(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge_patch(out.get(k), v)
    return out


def field_validation(mode: str, res: D.Resource, obj: Obj) -> list[str]:
    if res.name != "jobsets":
        return []
    unknown = V.unknown_jobset_fields(obj)
    if not unknown or mode == "Ignore":
        return []
    texts = [f'unknown field "{f}"' for f in unknown]
    if mode == "Strict":
        raise ApiError(
            400,
            "BadRequest",
            f'{res.kind} in version "{res.version}" cannot be handled as a {res.kind}: '
            "strict decoding error: " + ", ".join(texts),
        )
    return texts


def admit(res: D.Resource, obj: Obj) -> None:
    try:
        if res.name == "jobsets":
            V.check_jobset(obj)
            apply_jobset_defaults(obj)
        elif res.name == "jobs":
            V.check_job(obj)
            apply_job_defaults(obj)
        elif res.name == "secrets":
            V.check_secret(obj)
            data = dict(obj.get("data") or {})
            for k, v in (obj.pop("stringData", None) or {}).items():
                data[k] = base64.b64encode(str(v).encode()).decode()
            obj["data"] = data
            obj.setdefault("type", "Opaque")
        elif res.name == "pods":
            causes: list[V.Cause] = []
            V.check_name(obj.get("metadata"), causes)
            V.check_pod_spec(obj.get("spec"), "spec", causes, job=False)
            if causes:
                raise V.Invalid("Pod", str(obj["metadata"].get("name", "")), causes)
            apply_pod_defaults(obj["spec"])
            obj["status"] = {"phase": "Pending", "qosClass": "BestEffort"}
        elif res.name == "namespaces":
            obj["status"] = {"phase": "Active"}
    except V.Invalid as exc:
        raise invalid(exc) from exc
