"""Admission: what the API server checks and defaults before it stores an object, and
the Status errors it answers with (422 Invalid with causes, 400 BadRequest)."""

from __future__ import annotations

import base64
import copy

from emulators.gke import discovery as D
from emulators.gke import services
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


def immutable_jobset(obj: Obj, new: Obj) -> None:
    """The JobSet webhook lets only ``spec.suspend`` (and metadata) change."""
    before = {k: v for k, v in obj["spec"].items() if k != "suspend"}
    after = {k: v for k, v in new["spec"].items() if k != "suspend"}
    if before != after:
        raise V.Invalid(
            "JobSet",
            obj["metadata"]["name"],
            [
                V.Cause(
                    "FieldValueInvalid",
                    "spec.replicatedJobs",
                    'Invalid value: "object": field is immutable',
                )
            ],
            "jobset.x-k8s.io",
        )


_POD_MUTABLE = (
    "Forbidden: pod updates may not change fields other than "
    "`spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,"
    "`spec.tolerations` (only additions to existing tolerations),"
    "`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously "
    "negative)"
)


def immutable_fields(res: D.Resource, obj: Obj, new: Obj) -> None:
    """What kube-apiserver's update validation refuses to change, per kind."""
    name = obj["metadata"]["name"]
    if res.name == "pods":

        def strip(spec: Obj) -> Obj:
            out = copy.deepcopy(spec)
            for key in ("containers", "initContainers"):
                for c in out.get(key) or []:
                    c.pop("image", None)
            for key in ("activeDeadlineSeconds", "tolerations"):
                out.pop(key, None)
            return out

        if strip(obj.get("spec") or {}) != strip(new.get("spec") or {}):
            raise V.Invalid("Pod", name, [V.Cause("FieldValueForbidden", "spec", _POD_MUTABLE)])
    elif res.name == "jobs":
        old_spec, new_spec = obj.get("spec") or {}, new.get("spec") or {}
        for key in ("template", "completions", "completionMode", "selector"):
            if old_spec.get(key) != new_spec.get(key):
                raise V.Invalid(
                    "Job",
                    name,
                    [V.Cause("FieldValueInvalid", f"spec.{key}", "field is immutable")],
                    "batch",
                )
    elif res.name == "services":
        old_ip = (obj.get("spec") or {}).get("clusterIP")
        new_ip = (new.get("spec") or {}).get("clusterIP")
        if new_ip in (None, ""):
            new["spec"]["clusterIP"] = old_ip
            new["spec"]["clusterIPs"] = (obj.get("spec") or {}).get("clusterIPs")
        elif new_ip != old_ip:
            raise V.Invalid(
                "Service",
                name,
                [
                    V.Cause(
                        "FieldValueInvalid",
                        "spec.clusterIPs[0]",
                        f'Invalid value: []string{{"{new_ip}"}}: may not change once set',
                    )
                ],
            )
    elif res.name in ("configmaps", "secrets") and obj.get("immutable"):
        keys = ("data", "binaryData")
        if [obj.get(k) for k in keys] != [new.get(k) for k in keys]:
            raise V.Invalid(
                res.kind,
                name,
                [
                    V.Cause(
                        "FieldValueForbidden",
                        "data",
                        "Forbidden: field is immutable when `immutable` is set",
                    )
                ],
            )


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
        elif res.name in ("configmaps", "serviceaccounts"):
            V.check_simple(res.kind, obj)
        elif res.name == "services":
            V.check_simple(res.kind, obj)
            services.apply_service_defaults(obj)
    except V.Invalid as exc:
        raise invalid(exc) from exc
