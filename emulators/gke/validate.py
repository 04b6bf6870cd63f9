"""Checks the API server applies before storing an object, with Kubernetes' field paths.

Stdlib only, so the console can run the same checks before it submits anything.

Image references: the real API server only requires a non-empty image without leading or
trailing whitespace; a malformed reference is the kubelet's business (the container stays
Waiting with reason InvalidImageName). The emulator does the same, and
``image_reference_error`` is the kubelet's parser (the docker reference grammar).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS1123_SUBDOMAIN = re.compile(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
)
_DNS1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")

_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|[-]+)[a-z0-9]+)*"
_DOMAIN_PART = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = rf"(?:{_DOMAIN_PART}(?:\.{_DOMAIN_PART})*|\[[0-9a-fA-F:]+\])(?::[0-9]+)?"
_TAG = r"[\w][\w.-]{0,127}"
_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"
_REFERENCE = re.compile(
    rf"^(?:{_DOMAIN}/)?{_COMPONENT}(?:/{_COMPONENT})*(?::{_TAG})?(?:@{_DIGEST})?$"
)


def image_reference_error(ref: str) -> str | None:
    """None for a well-formed image reference, else the kubelet's message for it."""
    if _REFERENCE.match(ref) and len(ref.split("@")[0].rsplit(":", 1)[0]) <= 255:
        return None
    return (
        f'Failed to apply default image tag "{ref}": couldn\'t parse image name "{ref}": '
        "invalid reference format"
    )


@dataclass(frozen=True)
class Cause:
    """One entry of a 422 Status: ``reason`` is FieldValueRequired, FieldValueInvalid, ..."""

    reason: str
    field: str
    message: str

    def text(self) -> str:
        return f"{self.field}: {self.message}"


class Invalid(Exception):
    def __init__(self, kind: str, name: str, causes: list[Cause], group: str = "") -> None:
        super().__init__("; ".join(c.text() for c in causes))
        self.kind = kind
        self.name = name
        self.causes = causes
        self.group = group


def _required(path: str) -> Cause:
    return Cause("FieldValueRequired", path, "Required value")


def _invalid(path: str, value: Any, detail: str) -> Cause:
    shown = f'"{value}"' if isinstance(value, str) else repr(value).replace("'", '"')
    return Cause("FieldValueInvalid", path, f"Invalid value: {shown}: {detail}")


def _type(path: str, value: Any, want: str) -> Cause:
    shown = f'"{value}"' if isinstance(value, str) else repr(value)
    gotten = type(value).__name__
    gotten = {
        "str": "string",
        "int": "integer",
        "dict": "object",
        "list": "array",
        "float": "number",
        "bool": "boolean",
        "NoneType": "null",
    }.get(gotten, gotten)
    return Cause(
        "FieldValueTypeInvalid",
        path,
        f'Invalid value: {shown}: {path} in body must be of type {want}: "{gotten}"',
    )


def _int(obj: dict[str, Any], key: str, path: str, causes: list[Cause], minimum: int = 0) -> None:
    if key not in obj or obj[key] is None:
        return
    v = obj[key]
    if isinstance(v, bool) or not isinstance(v, int):
        causes.append(_type(f"{path}.{key}", v, "integer"))
    elif v < minimum:
        causes.append(_invalid(f"{path}.{key}", v, f"must be greater than or equal to {minimum}"))


def check_name(meta: Any, causes: list[Cause], dns1035: bool = False) -> str:
    if not isinstance(meta, dict):
        causes.append(_type("metadata", meta, "object"))
        return ""
    name = meta.get("name") or ""
    if not name and not meta.get("generateName"):
        causes.append(
            Cause(
                "FieldValueRequired",
                "metadata.name",
                "Required value: name or generateName is required",
            )
        )
        return ""
    if name:
        pattern = _DNS1035_LABEL if dns1035 else _DNS1123_SUBDOMAIN
        if not isinstance(name, str) or not pattern.match(name) or len(name) > 63:
            rule = (
                "a DNS-1035 label must consist of lower case alphanumeric characters or '-', "
                "start with an alphabetic character, and end with an alphanumeric character"
                if dns1035
                else "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric "
                "characters, '-' or '.', and must start and end with an alphanumeric character"
            )
            causes.append(_invalid("metadata.name", name, rule))
    return str(name)


def check_pod_spec(spec: Any, path: str, causes: list[Cause], job: bool) -> None:
    if not isinstance(spec, dict):
        causes.append(_required(path) if spec is None else _type(path, spec, "object"))
        return
    containers = spec.get("containers")
    if not containers:
        causes.append(_required(f"{path}.containers"))
    elif not isinstance(containers, list):
        causes.append(_type(f"{path}.containers", containers, "array"))
    else:
        for i, c in enumerate(containers):
            _check_container(c, f"{path}.containers[{i}]", causes)
    for i, c in enumerate(spec.get("initContainers") or []):
        _check_container(c, f"{path}.initContainers[{i}]", causes)
    policy = spec.get("restartPolicy")
    allowed = ["OnFailure", "Never"] if job else ["Always", "OnFailure", "Never"]
    if policy is not None and policy not in allowed:
        shown = ", ".join(f'"{a}"' for a in allowed)
        causes.append(
            Cause(
                "FieldValueNotSupported",
                f"{path}.restartPolicy",
                f'Unsupported value: "{policy}": supported values: {shown}',
            )
        )
    _int(spec, "terminationGracePeriodSeconds", path, causes)


def _check_container(c: Any, path: str, causes: list[Cause]) -> None:
    if not isinstance(c, dict):
        causes.append(_type(path, c, "object"))
        return
    name = c.get("name")
    if not name:
        causes.append(_required(f"{path}.name"))
    elif not isinstance(name, str) or not _DNS1123_LABEL.match(name):
        causes.append(
            _invalid(
                f"{path}.name",
                name,
                "a lowercase RFC 1123 label must consist of lower case "
                "alphanumeric characters or '-'",
            )
        )
    image = c.get("image")
    if not image:
        causes.append(_required(f"{path}.image"))
    elif not isinstance(image, str):
        causes.append(_type(f"{path}.image", image, "string"))
    elif image != image.strip():
        causes.append(
            _invalid(f"{path}.image", image, "must not have leading or trailing whitespace")
        )
    for key in ("command", "args"):
        v = c.get(key)
        if v is not None and (not isinstance(v, list) or not all(isinstance(a, str) for a in v)):
            causes.append(_type(f"{path}.{key}", v, "array of strings"))
    for j, e in enumerate(c.get("env") or []):
        epath = f"{path}.env[{j}]"
        if not isinstance(e, dict) or not e.get("name"):
            causes.append(_required(f"{epath}.name"))
            continue
        if not _ENV_NAME.match(str(e["name"])):
            causes.append(
                _invalid(
                    f"{epath}.name",
                    e["name"],
                    "a valid environment variable name must consist of "
                    "alphabetic characters, digits, '_', '-', or '.', and "
                    "must not start with a digit",
                )
            )
        if "value" in e and e.get("valueFrom"):
            causes.append(
                _invalid(f"{epath}.valueFrom", "", "may not be specified when `value` is not empty")
            )
        ref = (e.get("valueFrom") or {}).get("secretKeyRef")
        if ref is not None:
            if not ref.get("name"):
                causes.append(_required(f"{epath}.valueFrom.secretKeyRef.name"))
            if not ref.get("key"):
                causes.append(_required(f"{epath}.valueFrom.secretKeyRef.key"))


def check_job_spec(spec: Any, path: str, causes: list[Cause]) -> None:
    if not isinstance(spec, dict):
        causes.append(_required(path) if spec is None else _type(path, spec, "object"))
        return
    for key in ("parallelism", "completions", "backoffLimit", "activeDeadlineSeconds"):
        _int(spec, key, path, causes)
    mode = spec.get("completionMode")
    if mode is not None and mode not in ("Indexed", "NonIndexed"):
        causes.append(
            Cause(
                "FieldValueNotSupported",
                f"{path}.completionMode",
                f'Unsupported value: "{mode}": supported values: "NonIndexed", "Indexed"',
            )
        )
    if mode == "Indexed" and spec.get("completions") is None:
        causes.append(
            Cause(
                "FieldValueRequired",
                f"{path}.completions",
                "Required value: when completion mode is Indexed",
            )
        )
    tmpl = spec.get("template")
    if not isinstance(tmpl, dict):
        causes.append(_required(f"{path}.template"))
        return
    check_pod_spec(tmpl.get("spec"), f"{path}.template.spec", causes, job=True)
    pfp = spec.get("podFailurePolicy")
    if pfp is not None:
        for i, rule in enumerate(pfp.get("rules") or []):
            action = rule.get("action")
            if action not in ("FailJob", "Ignore", "Count", "FailIndex"):
                causes.append(
                    Cause(
                        "FieldValueNotSupported",
                        f"{path}.podFailurePolicy.rules[{i}].action",
                        f'Unsupported value: "{action}": supported values: '
                        '"Count", "FailIndex", "FailJob", "Ignore"',
                    )
                )
            codes = rule.get("onExitCodes")
            if codes is not None and codes.get("operator") not in ("In", "NotIn"):
                causes.append(
                    Cause(
                        "FieldValueNotSupported",
                        f"{path}.podFailurePolicy.rules[{i}].onExitCodes.operator",
                        f'Unsupported value: "{codes.get("operator")}": '
                        'supported values: "In", "NotIn"',
                    )
                )


_FAILURE_ACTIONS = (
    "FailJobSet",
    "RestartJobSet",
    "RestartJobSetAndIgnoreMaxRestarts",
    "RestartJob",
    "RestartJobAndIgnoreMaxRestarts",
)


def check_jobset(obj: dict[str, Any]) -> None:
    """Raise Invalid (422) listing every problem of a JobSet, as the CRD schema and the
    JobSet validating webhook would."""
    causes: list[Cause] = []
    name = check_name(obj.get("metadata"), causes, dns1035=True)
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        causes.append(_required("spec") if spec is None else _type("spec", spec, "object"))
        raise Invalid("JobSet", name, causes, "jobset.x-k8s.io")
    rjobs = spec.get("replicatedJobs")
    if not rjobs:
        causes.append(_required("spec.replicatedJobs"))
    elif not isinstance(rjobs, list):
        causes.append(_type("spec.replicatedJobs", rjobs, "array"))
    else:
        seen: set[str] = set()
        for i, rj in enumerate(rjobs):
            path = f"spec.replicatedJobs[{i}]"
            if not isinstance(rj, dict):
                causes.append(_type(path, rj, "object"))
                continue
            rname = rj.get("name")
            if not rname:
                causes.append(_required(f"{path}.name"))
            elif not isinstance(rname, str) or not _DNS1035_LABEL.match(rname):
                causes.append(
                    _invalid(
                        f"{path}.name",
                        rname,
                        "a DNS-1035 label must consist "
                        "of lower case alphanumeric characters or '-'",
                    )
                )
            elif rname in seen:
                causes.append(
                    Cause("FieldValueDuplicate", f"{path}.name", f'Duplicate value: "{rname}"')
                )
            else:
                seen.add(rname)
                replicas = rj.get("replicas", 1)
                last = replicas - 1 if isinstance(replicas, int) and replicas > 0 else 0
                longest = f"{name}-{rname}-{last}"
                if name and len(longest) > 63:
                    causes.append(
                        _invalid(
                            "metadata.name",
                            name,
                            f"JobSet name is too long, job name {longest!r} "
                            "must be no more than 63 characters",
                        )
                    )
            _int(rj, "replicas", path, causes)
            tmpl = rj.get("template")
            if not isinstance(tmpl, dict):
                causes.append(_required(f"{path}.template"))
                continue
            check_job_spec(tmpl.get("spec"), f"{path}.template.spec", causes)
    fp = spec.get("failurePolicy")
    if fp is not None:
        if not isinstance(fp, dict):
            causes.append(_type("spec.failurePolicy", fp, "object"))
        else:
            _int(fp, "maxRestarts", "spec.failurePolicy", causes)
            strategy = fp.get("restartStrategy")
            if strategy is not None and strategy not in ("Recreate", "BlockingRecreate"):
                causes.append(
                    Cause(
                        "FieldValueNotSupported",
                        "spec.failurePolicy.restartStrategy",
                        f'Unsupported value: "{strategy}": supported values: '
                        '"Recreate", "BlockingRecreate"',
                    )
                )
            for i, rule in enumerate(fp.get("rules") or []):
                if rule.get("action") not in _FAILURE_ACTIONS:
                    shown = ", ".join(f'"{a}"' for a in _FAILURE_ACTIONS)
                    causes.append(
                        Cause(
                            "FieldValueNotSupported",
                            f"spec.failurePolicy.rules[{i}].action",
                            f'Unsupported value: "{rule.get("action")}": supported values: {shown}',
                        )
                    )
    sp = spec.get("successPolicy")
    if isinstance(sp, dict):
        op = sp.get("operator")
        if op not in ("All", "Any"):
            causes.append(
                Cause(
                    "FieldValueNotSupported",
                    "spec.successPolicy.operator",
                    f'Unsupported value: "{op}": supported values: "All", "Any"',
                )
            )
        names = {rj.get("name") for rj in rjobs or [] if isinstance(rj, dict)}
        for target in sp.get("targetReplicatedJobs") or []:
            if target not in names:
                causes.append(
                    _invalid(
                        "spec.successPolicy.targetReplicatedJobs",
                        target,
                        "must be the name of a replicatedJob",
                    )
                )
    if causes:
        raise Invalid("JobSet", name, causes, "jobset.x-k8s.io")


def check_job(obj: dict[str, Any]) -> None:
    causes: list[Cause] = []
    name = check_name(obj.get("metadata"), causes)
    check_job_spec(obj.get("spec"), "spec", causes)
    if causes:
        raise Invalid("Job", name, causes, "batch")


def check_secret(obj: dict[str, Any]) -> None:
    causes: list[Cause] = []
    name = check_name(obj.get("metadata"), causes)
    for key in ("data", "stringData"):
        v = obj.get(key)
        if v is not None and not isinstance(v, dict):
            causes.append(_type(key, v, "object"))
    if causes:
        raise Invalid("Secret", name, causes)


def check_simple(kind: str, obj: dict[str, Any]) -> None:
    """ConfigMap, Service, ServiceAccount: a valid name and maps of strings."""
    causes: list[Cause] = []
    name = check_name(obj.get("metadata"), causes, dns1035=kind == "Service")
    for key in ("data", "binaryData"):
        v = obj.get(key)
        if v is not None and not isinstance(v, dict):
            causes.append(_type(key, v, "object"))
        elif isinstance(v, dict):
            for k, item in v.items():
                if not isinstance(item, str):
                    causes.append(_type(f"{key}.{k}", item, "string"))
    if causes:
        raise Invalid(kind, name, causes)
