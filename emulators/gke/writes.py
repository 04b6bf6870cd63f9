"""Writes: create, update (PUT), patch (merge, strategic, server-side apply) and delete,
with ``dryRun=All`` (checked and answered, never stored) and ``fieldValidation``
(Strict refuses, Warn answers one ``Warning: 299`` header per unknown field).

Wording, from kube-apiserver (staging/src/k8s.io/apiserver/pkg/endpoints/handlers):
a body that does not decode strictly on POST/PUT is a 400 ``<Kind> in version "<v>"
cannot be handled as a <Kind>: strict decoding error: unknown field "<path>"``; on a
merge or strategic PATCH it is a 422 ``Invalid`` over the field ``patch`` whose value is
the patched object; on server-side apply a 400 ``failed to create typed patch object``.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import yaml
from aiohttp import web
from multidict import CIMultiDict

from emulators.gke import admission, protobuf, schemas
from emulators.gke import discovery as D
from emulators.gke import layout as L
from emulators.gke import validate as V
from emulators.gke.admission import ApiError
from emulators.gke.events import disruption_target
from emulators.gke.jobs import TERMINAL, delete_pod, label_job
from emulators.gke.merge import merge_patch, strategic_merge
from emulators.gke.priority import UnknownPriorityClass, resolve_priority
from emulators.gke.store import Obj, now_iso

if TYPE_CHECKING:
    from emulators.gke.daemon import Cluster

APPLY = "application/apply-patch+yaml"


@dataclass(frozen=True)
class Path:
    res: D.Resource
    namespace: str
    name: str
    sub: str


def not_found(res: D.Resource, name: str) -> ApiError:
    return ApiError(
        404,
        "NotFound",
        f'{res.qualified} "{name}" not found',
        {"name": name, "group": res.group, "kind": res.name},
    )


def dry_run(request: web.Request) -> bool:
    values = request.query.getall("dryRun", [])
    bad = [v for v in values if v != "All"]
    if bad:
        raise ApiError(
            422,
            "Invalid",
            f'{"CreateOptions"}.meta.k8s.io "" is invalid: dryRun: Unsupported value: '
            f'["{bad[0]}"]: supported values: "All"',
        )
    return bool(values)


def go_quote(text: str) -> str:
    """A string as Go's %q writes it (what the Warning header's quoted-string needs)."""
    return json.dumps(text, ensure_ascii=False)


def go_format(value: Any) -> str:
    """``fmt.Sprintf("%+v", v)`` of a decoded JSON value (maps print sorted)."""
    if isinstance(value, dict):
        inner = " ".join(f"{k}:{go_format(value[k])}" for k in sorted(value))
        return f"map[{inner}]"
    if isinstance(value, list):
        return "[" + " ".join(go_format(v) for v in value) + "]"
    if value is None:
        return "<nil>"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def warning_headers(warnings: list[str]) -> CIMultiDict[str]:
    """One ``299 - "<text>"`` value per warning, inner quotes escaped as RFC 7230 wants."""
    out: CIMultiDict[str] = CIMultiDict()
    for w in dict.fromkeys(warnings):
        out.add("Warning", f"299 - {go_quote(w)}")
    return out


def _mode(request: web.Request) -> str:
    mode = request.query.get("fieldValidation", "") or "Warn"
    if mode not in ("Ignore", "Warn", "Strict"):
        raise ApiError(
            422,
            "Invalid",
            f'PatchOptions.meta.k8s.io "" is invalid: fieldValidation: Unsupported value: '
            f'"{mode}": supported values: "", "Ignore", "Strict", "Warn"',
        )
    return mode


def _unknown(res: D.Resource, obj: Obj, before: Obj | None = None) -> list[str]:
    schema = schemas.for_kind(res.group, res.kind)
    if schema is None:
        return []
    found = schemas.unknown_fields(schema, obj)
    if before is not None:
        old = set(schemas.unknown_fields(schema, before))
        found = [f for f in found if f not in old]
    return found


def _decoding_error(res: D.Resource, unknown: list[str]) -> str:
    return "strict decoding error: " + ", ".join(f'unknown field "{f}"' for f in unknown)


def _cannot_handle(res: D.Resource, unknown: list[str]) -> ApiError:
    return ApiError(
        400,
        "BadRequest",
        f'{res.kind} in version "{res.version}" cannot be handled as a {res.kind}: '
        + _decoding_error(res, unknown),
    )


def _prune(res: D.Resource, obj: Obj, paths: list[str]) -> None:
    """Drop unknown fields before storing, as decoding (or CRD pruning) does."""
    for path in paths:
        parts = path.replace("]", "").replace("[", ".").split(".")
        cur: Any = obj
        for p in parts[:-1]:
            cur = cur[int(p)] if isinstance(cur, list) else cur.get(p)
            if cur is None:
                break
        if isinstance(cur, dict):
            cur.pop(parts[-1], None)


async def read_body(request: web.Request) -> Any:
    raw = await request.read()
    ctype = request.headers.get("Content-Type", "")
    if "protobuf" in ctype:
        try:
            return protobuf.decode(raw)
        except protobuf.Undecodable as exc:
            raise ApiError(
                415,
                "UnsupportedMediaType",
                f"the emulator decodes protobuf bodies of {', '.join(sorted(protobuf.KINDS))} "
                f"only ({exc}); send JSON (kubectl create -f does)",
            ) from exc
    try:
        if "yaml" in ctype:
            return yaml.safe_load(raw)
        return json.loads(raw or b"{}")
    except (ValueError, yaml.YAMLError) as exc:
        raise ApiError(
            400,
            "BadRequest",
            f"the object provided is unrecognized (must be of type "
            f"{request.match_info.get('tail', '')}): couldn't get version/kind; "
            f"json parse error: {exc}",
        ) from exc


class Writes:
    def __init__(self, cluster: Cluster) -> None:
        self.c = cluster
        self.store = cluster.store

    # --- create -------------------------------------------------------------------------

    async def create(self, request: web.Request, path: Path) -> web.Response:
        obj = await read_body(request)
        return self._create(request, path, obj, apply=False)

    def _create(self, request: web.Request, path: Path, obj: Any, apply: bool) -> web.Response:
        res = path.res
        if not isinstance(obj, dict):
            raise ApiError(400, "BadRequest", "the body of the request was in an unknown format")
        # As the API server's decoder does: a body without kind/apiVersion takes the endpoint's
        # (client-go's and the Python client's typed objects are sent without them).
        if not obj.get("kind"):
            obj["kind"] = res.kind
            obj.setdefault("apiVersion", res.group_version)
        if not obj.get("apiVersion") and obj["kind"] == res.kind:
            obj["apiVersion"] = res.group_version
        if obj.get("kind") != res.kind or obj.get("apiVersion") != res.group_version:
            raise ApiError(
                400,
                "BadRequest",
                f"the API version in the data ({obj.get('apiVersion')}) does not "
                f"match the expected API version ({res.group_version})"
                if obj.get("kind") == res.kind
                else f'{obj.get("kind")} in version "{res.version}" cannot be handled as '
                f'a {res.kind}: no kind "{obj.get("kind")}" is registered for '
                f'version "{res.group_version}"',
            )
        meta = (
            obj.setdefault("metadata", {}) if isinstance(obj.get("metadata"), dict | None) else None
        )
        if meta is None:
            raise admission.invalid(
                V.Invalid(
                    res.kind,
                    "",
                    [V.Cause("FieldValueTypeInvalid", "metadata", "must be an object")],
                    res.group,
                )
            )
        if apply and path.name:
            meta.setdefault("name", path.name)
        if res.namespaced:
            ns = meta.get("namespace") or path.namespace or L.NAMESPACE
            if path.namespace and ns != path.namespace:
                raise ApiError(
                    400,
                    "BadRequest",
                    "the namespace of the provided object does "
                    "not match the namespace sent on the request",
                )
            if self.store.get("namespaces", "", ns) is None:
                raise ApiError(
                    404,
                    "NotFound",
                    f'namespaces "{ns}" not found',
                    {"name": ns, "kind": "namespaces"},
                )
            meta["namespace"] = ns
        warnings = self._field_validation(request, res, obj, None, "apply" if apply else "body")
        admission.admit(res, obj)
        if res.name == "pods":
            try:
                resolve_priority(self.store, obj["spec"])
            except UnknownPriorityClass as exc:
                raise ApiError(
                    403, "Forbidden", f'pods "{meta.get("name", "")}" is forbidden: {exc}'
                ) from None
        name = meta.get("name", "")
        if name and self.store.get(res.name, meta.get("namespace", ""), name) is not None:
            raise ApiError(
                409,
                "AlreadyExists",
                f'{res.qualified} "{name}" already exists',
                {"name": name, "group": res.group, "kind": res.name},
            )
        obj.pop("status", None)
        # Built-in kinds serialise an empty status struct; a CR has none until written.
        empty: Obj | None = {"jobs": {}, "services": {"loadBalancer": {}}}.get(res.name)
        if empty is not None:
            obj["status"] = empty
        headers = warning_headers(warnings)
        if dry_run(request):
            meta.setdefault("uid", "00000000-0000-0000-0000-000000000000")
            meta.setdefault("creationTimestamp", now_iso())
            meta.setdefault("generation", 1)
            return web.json_response(obj, status=201, headers=headers)
        stored = self.store.create(res.name, obj)
        if res.name == "jobs":
            stored = self.store.mutate("jobs", stored, label_job)
        return web.json_response(copy.deepcopy(stored), status=201, headers=headers)

    def _field_validation(
        self,
        request: web.Request,
        res: D.Resource,
        obj: Obj,
        before: Obj | None,
        how: str,
        patch_value: str = "",
    ) -> list[str]:
        """Unknown fields per ``fieldValidation``. ``patch_value`` is what a refused
        strategic patch quotes (Go's ``%+v`` of the patch); a merge patch quotes the
        patched object as JSON."""
        mode = _mode(request)
        unknown = _unknown(res, obj, before)
        if not unknown or mode == "Ignore":
            _prune(res, obj, unknown)
            return []
        if mode == "Strict":
            if how == "patch":
                shown = patch_value or json.dumps(obj, separators=(",", ":"))
                detail = f"Invalid value: {go_quote(shown)}: " + _decoding_error(res, unknown)
                raise ApiError(
                    422,
                    "Invalid",
                    f' "" is invalid: patch: {detail}',
                    {
                        "causes": [
                            {"reason": "FieldValueInvalid", "message": detail, "field": "patch"}
                        ]
                    },
                )
            if how == "apply":
                # structured-merge-diff's ValidationErrors: one line, or "errors:" and a list.
                errs = [f".{f}: field not declared in schema" for f in unknown]
                text = (
                    errs[0] if len(errs) == 1 else "\n".join(["errors:", *(f"  {e}" for e in errs)])
                )
                raise ApiError(
                    400,
                    "BadRequest",
                    f"failed to create typed patch object ({res.group_version}, "
                    f"Kind={res.kind}): {text}",
                )
            raise _cannot_handle(res, unknown)
        _prune(res, obj, unknown)
        return [f'unknown field "{f}"' for f in unknown]

    # --- delete -------------------------------------------------------------------------

    async def delete(self, request: web.Request, path: Path) -> web.Response:
        res = path.res
        obj = self.store.get(res.name, path.namespace, path.name)
        if obj is None:
            raise not_found(res, path.name)
        grace = request.query.get("gracePeriodSeconds")
        body = await request.read()
        dry = dry_run(request)
        if body:
            opts = json.loads(body)
            if isinstance(opts, dict):
                if opts.get("gracePeriodSeconds") is not None:
                    grace = str(opts["gracePeriodSeconds"])
                dry = dry or "All" in (opts.get("dryRun") or [])
        if dry:
            return web.json_response(obj)
        if res.name == "pods":
            delete_pod(self.store, obj, float(grace) if grace is not None else None)
            current = self.store.get("pods", path.namespace, path.name)
            return web.json_response(current or obj)
        if res.name == "jobs":
            self.c.jobs.delete_job(obj)
            return web.json_response(self.store.get("jobs", path.namespace, path.name) or obj)
        gone = self.store.delete(res.name, path.namespace, path.name) or obj
        return web.json_response(
            {
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Success",
                "details": {
                    "name": path.name,
                    "group": res.group,
                    "kind": res.name,
                    "uid": gone["metadata"]["uid"],
                },
            }
        )

    # --- the Eviction API ----------------------------------------------------------------

    async def evict(self, request: web.Request, path: Path) -> web.Response:
        """POST pods/NAME/eviction (policy/v1 Eviction), as `kubectl drain` sends it: the
        pod gets DisruptionTarget (EvictionByEvictionAPI) and is deleted gracefully (the
        Eviction's deleteOptions.gracePeriodSeconds, else the pod's own). The cluster has
        no PodDisruptionBudgets, so every eviction is allowed (201); one of a pod already
        being deleted is answered the same and changes nothing."""
        body = await read_body(request)
        if not isinstance(body, dict) or body.get("kind") not in (None, "Eviction"):
            raise ApiError(400, "BadRequest", "the body of the request was not an Eviction")
        name = (body.get("metadata") or {}).get("name")
        if name and name != path.name:
            raise ApiError(
                400,
                "BadRequest",
                f"name in URL does not match name in Eviction object: {path.name} != {name}",
            )
        pod = self.store.get("pods", path.namespace, path.name)
        if pod is None:
            raise not_found(path.res, path.name)
        grace = (body.get("deleteOptions") or {}).get("gracePeriodSeconds")
        dry = dry_run(request) or "All" in ((body.get("deleteOptions") or {}).get("dryRun") or [])
        deleting = bool(pod["metadata"].get("deletionTimestamp"))
        if not dry and not deleting:
            if (pod.get("status") or {}).get("phase") not in TERMINAL:
                evicting = disruption_target("EvictionByEvictionAPI", "Eviction API: evicting")
                pod = self.store.mutate("pods", pod, evicting)
            delete_pod(self.store, pod, None if grace is None else float(grace))
        return web.json_response(
            {
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Success",
                "code": 201,
            },
            status=201,
        )

    # --- update and patch ---------------------------------------------------------------

    async def patch(self, request: web.Request, path: Path) -> web.Response:
        res = path.res
        body = await read_body(request)
        ctype = request.headers.get("Content-Type", "").split(";")[0].strip()
        obj = self.store.get(res.name, path.namespace, path.name)
        if obj is None:
            if ctype == APPLY:  # server-side apply creates what does not exist
                return self._create(request, path, body, apply=True)
            raise not_found(res, path.name)
        if not isinstance(body, dict):
            raise ApiError(400, "BadRequest", "the body of the request was in an unknown format")
        how = "patch"
        if request.method == "PUT":
            new, how = copy.deepcopy(body), "body"
            rv = (body.get("metadata") or {}).get("resourceVersion")
            if rv and rv != obj["metadata"]["resourceVersion"]:
                raise ApiError(
                    409,
                    "Conflict",
                    f'Operation cannot be fulfilled on {res.qualified} "{path.name}": the '
                    "object has been modified; please apply your changes to the latest "
                    "version and try again",
                    {"name": path.name, "group": res.group, "kind": res.name},
                )
        elif ctype == "application/json-patch+json":
            raise ApiError(
                415,
                "UnsupportedMediaType",
                f"the emulator supports merge, strategic-merge and apply patches, not {ctype}",
            )
        elif ctype == "application/merge-patch+json":
            new = merge_patch(obj, body)
        elif ctype in ("application/strategic-merge-patch+json", APPLY):
            if ctype != APPLY and res.group not in ("", "batch"):
                raise ApiError(
                    415,
                    "UnsupportedMediaType",
                    f"the body of the request was in an unknown format - accepted media "
                    f"types include: application/json-patch+json, "
                    f"application/merge-patch+json, {APPLY}",
                )
            how = "apply" if ctype == APPLY else "patch"
            new = strategic_merge(obj, body)
        else:
            raise ApiError(415, "UnsupportedMediaType", f"unsupported media type {ctype!r}")
        meta = new.setdefault("metadata", {})
        for key in ("uid", "creationTimestamp", "namespace", "name", "generation"):
            if key in obj["metadata"]:
                meta[key] = obj["metadata"][key]
        meta["resourceVersion"] = obj["metadata"]["resourceVersion"]
        if "status" in obj:
            new["status"] = obj["status"]
        for key in ("labels", "annotations"):  # omitempty, as the API server encodes them
            if meta.get(key) == {}:
                del meta[key]
        shown = go_format(body) if ctype == "application/strategic-merge-patch+json" else ""
        warnings = self._field_validation(request, res, new, obj, how, shown)
        self._admit_update(res, obj, new)
        headers = warning_headers(warnings)
        if dry_run(request) or new == obj:
            return web.json_response(new, headers=headers)
        self.store.update(res.name, new)
        return web.json_response(
            self.store.get(res.name, path.namespace, path.name), headers=headers
        )

    def _admit_update(self, res: D.Resource, obj: Obj, new: Obj) -> None:
        """The API server's update rules: what each kind lets change."""
        try:
            if res.name == "jobsets":
                V.check_jobset(new)
                admission.apply_jobset_defaults(new)
                admission.immutable_jobset(obj, new)
            elif res.name in ("secrets", "configmaps", "services", "serviceaccounts"):
                admission.admit(res, new)
                admission.immutable_fields(res, obj, new)
            elif res.name in ("pods", "jobs"):
                admission.immutable_fields(res, obj, new)
            elif res.name == "nodes":
                _cordon_taint(new)
            elif res.name != "namespaces":
                raise ApiError(
                    405,
                    "MethodNotAllowed",
                    "the server does not allow this method on the requested resource",
                )
        except V.Invalid as exc:
            raise admission.invalid(exc) from exc
        if new.get("spec") != obj.get("spec"):
            new["metadata"]["generation"] = int(obj["metadata"].get("generation", 1)) + 1


UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"


def _cordon_taint(node: Obj) -> None:
    """What the node lifecycle controller keeps beside ``spec.unschedulable`` (`kubectl
    cordon`): the ``node.kubernetes.io/unschedulable:NoSchedule`` taint, on while cordoned."""
    spec = node.setdefault("spec", {})
    old = spec.get("taints") or []
    taints = [t for t in old if t.get("key") != UNSCHEDULABLE_TAINT]
    if spec.get("unschedulable"):
        had = [t for t in old if t.get("key") == UNSCHEDULABLE_TAINT]
        taints += had[:1] or [
            {"key": UNSCHEDULABLE_TAINT, "effect": "NoSchedule", "timeAdded": now_iso()}
        ]
    if taints:
        spec["taints"] = taints
    else:
        spec.pop("taints", None)
