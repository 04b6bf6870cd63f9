"""The Kubernetes REST subset on aiohttp: discovery, get/list/watch (JSON or Table),
create/patch/delete, pods/{name}/log. Errors are ``Status`` objects as the API server
writes them, so kubectl and kubernetes-asyncio print and raise what they would on GKE."""

from __future__ import annotations

import asyncio
import json
import logging
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from aiohttp import web

from emulators.gke import discovery as D
from emulators.gke import gkeapi, health, openapi
from emulators.gke import layout as L
from emulators.gke.admission import ApiError
from emulators.gke.logs import LogOptions, stream_log
from emulators.gke.store import Gone, Obj, Selector, SelectorError
from emulators.gke.tables import PRINTERS, to_table
from emulators.gke.writes import Path, Writes, not_found

if TYPE_CHECKING:
    from emulators.gke.daemon import Cluster

log = logging.getLogger("phantom.gke.api")


def _truthy(v: str | None) -> bool:
    return v is not None and v.lower() in ("true", "1")


class Api:
    def __init__(self, cluster: Cluster) -> None:
        self.c = cluster
        self.store = cluster.store
        self.writes = Writes(cluster)

    def app(self) -> web.Application:
        app = web.Application(client_max_size=16 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self.dispatch)
        return app

    async def dispatch(self, request: web.Request) -> web.StreamResponse:
        try:
            return await self._dispatch(request)
        except ApiError as exc:
            return web.json_response(exc.status(), status=exc.code)
        except SelectorError as exc:
            return web.json_response(ApiError(400, "BadRequest", str(exc)).status(), status=400)
        except (ConnectionResetError, asyncio.CancelledError):
            raise
        except Exception as exc:
            log.exception("%s %s", request.method, request.path)
            err = ApiError(500, "InternalError", f"Internal error occurred: {exc}")
            return web.json_response(err.status(), status=500)

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        parts = [p for p in request.path.split("/") if p]
        checked = health.answer(request, parts) if request.method == "GET" else None
        if checked is not None:
            return checked
        if request.method == "GET":
            static = self._static(parts, request)
            if static is not None:
                return web.json_response(static)
        if parts[:1] == ["openapi"] and request.method == "GET":
            return self._openapi(request, parts[1:])
        cloud = gkeapi.answer(self.c, request, parts)
        if cloud is not None:
            return cloud
        if parts[:2] == ["computeMetadata", "v1"]:
            return self._metadata(request, parts[2:])
        path = self._resolve(parts)
        if path is None:
            raise ApiError(
                404,
                "NotFound",
                "the server could not find the requested resource",
                {
                    "causes": [
                        {"reason": "UnexpectedServerResponse", "message": "404 page not found"}
                    ]
                },
            )
        verb = request.method
        if path.sub == "log" and path.res.name == "pods" and verb == "GET":
            return await self._log(request, path)
        if path.sub == "eviction" and path.res.name == "pods" and path.name and verb == "POST":
            return await self.writes.evict(request, path)
        if path.sub and path.sub != "status":
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        if verb == "GET" and path.name:
            obj = self.store.get(path.res.name, path.namespace, path.name)
            if obj is None:
                raise not_found(path.res, path.name)
            return self._respond(request, path.res, obj)
        if verb == "GET":
            if _truthy(request.query.get("watch")):
                return await self._watch(request, path)
            return self._list(request, path)
        if path.sub and verb != "GET":
            raise ApiError(
                405,
                "MethodNotAllowed",
                "the server does not allow this method on the requested resource",
            )
        if verb == "POST" and not path.name:
            return await self.writes.create(request, path)
        if verb == "DELETE" and path.name:
            return await self.writes.delete(request, path)
        if verb in ("PATCH", "PUT") and path.name:
            return await self.writes.patch(request, path)
        raise ApiError(
            405,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource",
        )

    # --- discovery ----------------------------------------------------------------------

    def _static(self, parts: list[str], request: web.Request) -> Obj | None:
        if parts == ["version"]:
            return D.version_info()
        if parts == ["api"]:
            return D.api_versions(f"127.0.0.1:{request.url.port}")
        if parts == ["apis"]:
            return D.api_group_list()
        if parts == ["api", "v1"]:
            return D.resource_list("", "v1")
        if len(parts) == 2 and parts[0] == "apis":
            return D.api_group(parts[1])
        if len(parts) == 3 and parts[0] == "apis":
            return D.resource_list(parts[1], parts[2])
        return None

    def _openapi(self, request: web.Request, parts: list[str]) -> web.Response:
        if parts == ["v2"]:
            if "protobuf" in request.headers.get("Accept", ""):
                return web.Response(
                    body=openapi.v2_protobuf(),
                    content_type="application/com.github.proto-openapi.spec.v2.v1.0+protobuf",
                )
            return web.json_response(openapi.v2_json())
        if parts == ["v3"]:
            return web.json_response(openapi.v3_root())
        doc = openapi.v3_doc("/".join(parts[1:])) if parts[:1] == ["v3"] else None
        if doc is None:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        return web.json_response(doc)

    def _metadata(self, request: web.Request, parts: list[str]) -> web.Response:
        """A few GCE metadata paths, so Google libraries in workloads never probe outside."""
        if request.headers.get("Metadata-Flavor") != "Google":
            return web.Response(status=403, text="Missing Metadata-Flavor:Google header.")
        values = {
            ("project", "project-id"): L.PROJECT,
            ("project", "numeric-project-id"): "123456789012",
            ("instance", "zone"): f"projects/123456789012/zones/{L.ZONE}",
            ("instance", "preempted"): "FALSE",
            ("instance", "attributes", "cluster-name"): self.c.name,
        }
        value = values.get(tuple(parts))
        if value is None:
            return web.Response(status=404, text="Not Found")
        return web.Response(text=value, headers={"Metadata-Flavor": "Google"})

    def _resolve(self, parts: list[str]) -> Path | None:
        if parts[:2] == ["api", "v1"]:
            group, version, rest = "", "v1", parts[2:]
        elif len(parts) >= 3 and parts[0] == "apis":
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            return None
        ns = ""
        if len(rest) >= 3 and rest[0] == "namespaces":
            ns, rest = rest[1], rest[2:]
        if not rest:
            return None
        res = D.find(group, version, rest[0])
        if res is None:
            return None
        if res.namespaced is False and ns:
            return None
        name = rest[1] if len(rest) > 1 else ""
        sub = rest[2] if len(rest) > 2 else ""
        return Path(res, ns, name, sub)

    # --- reads --------------------------------------------------------------------------

    def _wants_table(self, request: web.Request) -> bool:
        accept = request.headers.get("Accept", "")
        first = accept.split(",")[0]
        return "as=Table" in first and "g=meta.k8s.io" in first

    def _respond(self, request: web.Request, res: D.Resource, obj: Obj) -> web.Response:
        if self._wants_table(request) and res.name in PRINTERS:
            include = request.query.get("includeObject", "Metadata")
            return web.json_response(
                to_table(res.name, [obj], obj["metadata"]["resourceVersion"], include)
            )
        return web.json_response(obj)

    def _selector(self, request: web.Request, path: Path) -> Selector:
        return Selector.parse(
            path.res.name,
            path.namespace,
            request.query.get("labelSelector", ""),
            request.query.get("fieldSelector", ""),
        )

    def _list(self, request: web.Request, path: Path) -> web.Response:
        items = self.store.list(path.res.name, self._selector(request, path))
        rv = str(self.store.rv)
        if self._wants_table(request) and path.res.name in PRINTERS:
            include = request.query.get("includeObject", "Metadata")
            return web.json_response(to_table(path.res.name, items, rv, include))
        return web.json_response(
            {
                "kind": f"{path.res.kind}List",
                "apiVersion": path.res.group_version,
                "metadata": {"resourceVersion": rv},
                "items": items,
            }
        )

    async def _watch(self, request: web.Request, path: Path) -> web.StreamResponse:
        q = request.query
        selector = self._selector(request, path)
        rv_text = q.get("resourceVersion", "")
        initial = rv_text in ("", "0") or _truthy(q.get("sendInitialEvents"))
        since = None if initial else int(rv_text)
        table = self._wants_table(request) and path.res.name in PRINTERS
        include = q.get("includeObject", "Metadata")
        resp = web.StreamResponse(
            headers={"Content-Type": "application/json", "Cache-Control": "no-cache, private"}
        )
        await resp.prepare(request)
        first = [True]

        async def send(type_: str, obj: Obj) -> None:
            if table and type_ not in ("BOOKMARK", "ERROR"):
                obj = to_table(
                    path.res.name,
                    [obj],
                    obj["metadata"]["resourceVersion"],
                    include,
                    headers=first[0],
                )
                first[0] = False
            await resp.write(json.dumps({"type": type_, "object": obj}).encode() + b"\n")

        try:
            watcher = self.store.watch(path.res.name, selector, since)
        except Gone as exc:
            err = ApiError(410, "Expired", str(exc)).status()
            await send("ERROR", err)
            return resp
        bookmarks = _truthy(q.get("allowWatchBookmarks"))
        try:
            if initial:
                for obj in self.store.list(path.res.name, selector):
                    await send("ADDED", obj)
                if _truthy(q.get("sendInitialEvents")):
                    await send(
                        "BOOKMARK", self._bookmark(path.res, {"k8s.io/initial-events-end": "true"})
                    )
            timeout = float(q.get("timeoutSeconds", "0") or 0)
            loop = asyncio.get_running_loop()
            deadline = loop.time() + timeout if timeout > 0 else None
            interval = self.c.cfg.bookmark_interval
            while True:
                wait = interval if bookmarks else None
                if deadline is not None:
                    left = deadline - loop.time()
                    if left <= 0:
                        break
                    wait = left if wait is None else min(wait, left)
                try:
                    item = await asyncio.wait_for(watcher.queue.get(), wait)
                except TimeoutError:
                    if bookmarks:
                        await send("BOOKMARK", self._bookmark(path.res, None))
                    continue
                if item is None:
                    break
                await send(*item)
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            self.store.unwatch(watcher)
        return resp

    def _bookmark(self, res: D.Resource, annotations: dict[str, str] | None) -> Obj:
        meta: Obj = {"resourceVersion": str(self.store.rv)}
        if annotations:
            meta["annotations"] = annotations
        return {"kind": res.kind, "apiVersion": res.group_version, "metadata": meta}

    # --- logs ---------------------------------------------------------------------------

    async def _log(self, request: web.Request, path: Path) -> web.StreamResponse:
        q = request.query
        pod = self.store.get("pods", path.namespace, path.name)
        if pod is None:
            raise not_found(path.res, path.name)
        names = [c["name"] for c in pod["spec"].get("containers") or []]
        names += [c["name"] for c in pod["spec"].get("initContainers") or []]
        container = q.get("container") or ""
        if not container:
            if len(pod["spec"].get("containers") or []) != 1:
                raise ApiError(
                    400,
                    "BadRequest",
                    f"a container name must be specified for pod {path.name}, "
                    f"choose one of: [{' '.join(names)}]",
                )
            container = names[0]
        if container not in names:
            raise ApiError(
                400, "BadRequest", f"container {container} is not valid for pod {path.name}"
            )
        if not pod["spec"].get("nodeName"):
            raise ApiError(400, "BadRequest", f"pod {path.name} does not have a host assigned")
        instances = self.c.kubelet.logs.get((pod["metadata"]["uid"], container), [])
        previous = _truthy(q.get("previous"))
        if previous:
            logfile = instances[-2] if len(instances) >= 2 else None
            if logfile is None:
                raise ApiError(
                    400,
                    "BadRequest",
                    f'previous terminated container "{container}" in pod "{path.name}" not found',
                )
        else:
            logfile = instances[-1] if instances else None
            if logfile is None:
                reason = self._waiting_reason(pod, container)
                raise ApiError(
                    400,
                    "BadRequest",
                    f'container "{container}" in pod "{path.name}" is waiting to start: {reason}',
                )
        since = None
        if q.get("sinceSeconds"):
            since = datetime.now(UTC) - timedelta(seconds=int(q["sinceSeconds"]))
        elif q.get("sinceTime"):
            # metav1.Time: the API server keeps whole seconds only.
            since = datetime.fromisoformat(q["sinceTime"].replace("Z", "+00:00")).replace(
                microsecond=0
            )
        opts = LogOptions(
            follow=_truthy(q.get("follow")) and not previous,
            tail_lines=int(q["tailLines"]) if q.get("tailLines") else None,
            since=since,
            timestamps=_truthy(q.get("timestamps")),
            limit_bytes=int(q["limitBytes"]) if q.get("limitBytes") else None,
            idle_timeout=self.c.cfg.log_idle_timeout,
            max_duration=self.c.cfg.log_max_duration,
            stream=q.get("stream", "All"),
        )
        resp = web.StreamResponse(headers={"Content-Type": "text/plain"})
        await resp.prepare(request)
        try:
            async for chunk in stream_log(logfile, opts):
                await resp.write(chunk)
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        return resp

    @staticmethod
    def _waiting_reason(pod: Obj, container: str) -> str:
        st = pod.get("status") or {}
        for cs in (st.get("containerStatuses") or []) + (st.get("initContainerStatuses") or []):
            if cs.get("name") == container:
                return str(
                    ((cs.get("state") or {}).get("waiting") or {}).get(
                        "reason", "ContainerCreating"
                    )
                )
        return "ContainerCreating"
