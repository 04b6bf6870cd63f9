"""``KubeApi`` on kubernetes-asyncio: the real client, for GKE and for the emulator alike.

Every call passes ``_preload_content=False`` and reads the JSON itself: watches and log
follows are line streams, and lists stay plain dicts (see ``kube``). A refused call's
``Status`` becomes a ``KubeError``. Plain calls are bounded by ``timeout_s``; watches and
follows are not (they end when the server closes them, and the caller resumes).
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio import config as k8s_config

from console.services.backends.gke.kube import (
    JOBSET_GROUP,
    JOBSET_VERSION,
    KubeError,
    LogRequest,
    Obj,
    ObjectList,
    Resource,
    WatchEvent,
    WatchType,
    error_from_status,
)

# Watch lines are one object each; a JobSet with its status is a few KB, a node ~5 KB.
_MAX_LINE = 16 * 1024 * 1024


class AsyncioKubeApi:
    def __init__(self, api: k8s.ApiClient, namespace: str, *, timeout_s: float = 30.0) -> None:
        self._api = api
        self.namespace = namespace
        self.timeout_s = timeout_s
        self._core = k8s.CoreV1Api(api)
        self._batch = k8s.BatchV1Api(api)
        self._custom = k8s.CustomObjectsApi(api)

    @classmethod
    async def connect(
        cls,
        kubeconfig: str | os.PathLike[str],
        *,
        context: str = "",
        namespace: str = "default",
        timeout_s: float = 30.0,
    ) -> AsyncioKubeApi:
        """A client for ``kubeconfig`` (its current context unless ``context``)."""
        cfg = k8s.Configuration()
        await k8s_config.load_kube_config(
            config_file=str(kubeconfig),
            context=context or None,
            client_configuration=cfg,
            persist_config=False,
        )
        return cls(k8s.ApiClient(configuration=cfg), namespace, timeout_s=timeout_s)

    async def close(self) -> None:
        await self._api.close()

    # -- calls ------------------------------------------------------------------------------
    def _list_call(
        self, resource: Resource
    ) -> tuple[Callable[..., Awaitable[Any]], tuple[Any, ...]]:
        ns = self.namespace
        if resource is Resource.PODS:
            return self._core.list_namespaced_pod, (ns,)
        if resource is Resource.NODES:
            return self._core.list_node, ()
        if resource is Resource.EVENTS:
            return self._core.list_namespaced_event, (ns,)
        if resource is Resource.SECRETS:
            return self._core.list_namespaced_secret, (ns,)
        if resource is Resource.JOBS:
            return self._batch.list_namespaced_job, (ns,)
        return self._custom.list_namespaced_custom_object, (
            JOBSET_GROUP,
            JOBSET_VERSION,
            ns,
            "jobsets",
        )

    async def _json(self, call: Awaitable[Any], what: str) -> Any:
        resp: aiohttp.ClientResponse = await call
        try:
            raw = await resp.read()
        finally:
            resp.release()
        body = _loads(raw)
        if not 200 <= resp.status <= 299:
            raise error_from_status(resp.status, body if isinstance(body, dict) else None, what)
        return body

    async def list(
        self, resource: Resource, *, label_selector: str = "", field_selector: str = ""
    ) -> ObjectList:
        fn, args = self._list_call(resource)
        kwargs: dict[str, Any] = {"_preload_content": False, "_request_timeout": self.timeout_s}
        if label_selector:
            kwargs["label_selector"] = label_selector
        if field_selector:
            kwargs["field_selector"] = field_selector
        body = await self._json(fn(*args, **kwargs), f"list {resource}")
        rv = str((body.get("metadata") or {}).get("resourceVersion") or "")
        return ObjectList(list(body.get("items") or []), rv)

    async def watch(
        self,
        resource: Resource,
        resource_version: str,
        *,
        label_selector: str = "",
        timeout_s: float | None = None,
    ) -> AsyncIterator[WatchEvent]:
        fn, args = self._list_call(resource)
        kwargs: dict[str, Any] = {
            "watch": True,
            "resource_version": resource_version,
            "allow_watch_bookmarks": True,
            "_preload_content": False,
            # No read timeout: a quiet watch is normal (bookmarks arrive every minute).
            "_request_timeout": aiohttp.ClientTimeout(total=None, sock_connect=self.timeout_s),
        }
        if label_selector:
            kwargs["label_selector"] = label_selector
        if timeout_s is not None:
            kwargs["timeout_seconds"] = max(1, int(timeout_s))
        resp: aiohttp.ClientResponse = await fn(*args, **kwargs)
        try:
            if not 200 <= resp.status <= 299:
                body = _loads(await resp.read())
                raise error_from_status(
                    resp.status, body if isinstance(body, dict) else None, f"watch {resource}"
                )
            while True:
                line = await resp.content.readline()
                if not line:
                    return  # the server ended the watch: the caller resumes from its version
                if len(line) > _MAX_LINE or not line.strip():
                    continue
                event = _loads(line)
                if not isinstance(event, dict) or "type" not in event:
                    continue
                obj = event.get("object") or {}
                if event["type"] == WatchType.ERROR:
                    raise error_from_status(int(obj.get("code") or 500), obj, "watch error")
                yield WatchEvent(str(event["type"]), obj)
        finally:
            resp.release()

    async def get(self, resource: Resource, name: str) -> Obj:
        ns = self.namespace
        kw: dict[str, Any] = {"_preload_content": False, "_request_timeout": self.timeout_s}
        call: Awaitable[Any]
        if resource is Resource.PODS:
            call = self._core.read_namespaced_pod(name, ns, **kw)
        elif resource is Resource.NODES:
            call = self._core.read_node(name, **kw)
        elif resource is Resource.SECRETS:
            call = self._core.read_namespaced_secret(name, ns, **kw)
        elif resource is Resource.JOBS:
            call = self._batch.read_namespaced_job(name, ns, **kw)
        elif resource is Resource.JOBSETS:
            call = self._custom.get_namespaced_custom_object(
                JOBSET_GROUP, JOBSET_VERSION, ns, "jobsets", name, **kw
            )
        else:
            call = self._core.read_namespaced_event(name, ns, **kw)
        result: Obj = await self._json(call, f"{resource} {name!r}")
        return result

    async def create(self, resource: Resource, body: Obj, *, dry_run: bool = False) -> Obj:
        ns = self.namespace
        kw: dict[str, Any] = {"_preload_content": False, "_request_timeout": self.timeout_s}
        if dry_run:
            kw["dry_run"] = "All"
        call: Awaitable[Any]
        # The generated stubs ask for V1Job/V1Secret models; the client sends any JSON body,
        # and plain dicts are what this backend holds (see ``kube``).
        if resource is Resource.JOBSETS:
            call = self._custom.create_namespaced_custom_object(
                JOBSET_GROUP, JOBSET_VERSION, ns, "jobsets", body, **kw
            )
        elif resource is Resource.JOBS:
            call = self._batch.create_namespaced_job(ns, body, **kw)  # type: ignore[arg-type]
        elif resource is Resource.SECRETS:
            call = self._core.create_namespaced_secret(ns, body, **kw)  # type: ignore[arg-type]
        else:
            raise KubeError(405, "MethodNotAllowed", f"the backend does not create {resource}")
        name = (body.get("metadata") or {}).get("name", "")
        result: Obj = await self._json(call, f"create {resource} {name!r}")
        return result

    async def replace(self, resource: Resource, name: str, body: Obj) -> Obj:
        if resource is not Resource.SECRETS:
            raise KubeError(405, "MethodNotAllowed", f"the backend does not replace {resource}")
        call = self._core.replace_namespaced_secret(
            name,
            self.namespace,
            body,  # type: ignore[arg-type]
            _preload_content=False,
            _request_timeout=self.timeout_s,
        )
        result: Obj = await self._json(call, f"replace {resource} {name!r}")
        return result

    async def delete(self, resource: Resource, name: str) -> None:
        ns = self.namespace
        kw: dict[str, Any] = {
            "_preload_content": False,
            "_request_timeout": self.timeout_s,
            "propagation_policy": "Background",
        }
        call: Awaitable[Any]
        if resource is Resource.JOBSETS:
            call = self._custom.delete_namespaced_custom_object(
                JOBSET_GROUP, JOBSET_VERSION, ns, "jobsets", name, **kw
            )
        elif resource is Resource.JOBS:
            call = self._batch.delete_namespaced_job(name, ns, **kw)
        elif resource is Resource.SECRETS:
            call = self._core.delete_namespaced_secret(name, ns, **kw)
        elif resource is Resource.PODS:
            call = self._core.delete_namespaced_pod(name, ns, **kw)
        else:
            raise KubeError(405, "MethodNotAllowed", f"the backend does not delete {resource}")
        await self._json(call, f"delete {resource} {name!r}")

    async def drop_finalizers(self, resource: Resource, name: str) -> Obj:
        if resource is not Resource.PODS:
            raise KubeError(405, "MethodNotAllowed", f"the backend does not patch {resource}")
        call = self._core.patch_namespaced_pod(
            name,
            self.namespace,
            {"metadata": {"finalizers": None}},
            _preload_content=False,
            _request_timeout=self.timeout_s,
        )
        result: Obj = await self._json(call, f"patch {resource} {name!r}")
        return result

    async def log(self, request: LogRequest) -> AsyncIterator[str]:
        kwargs: dict[str, Any] = {
            "_preload_content": False,
            "_request_timeout": (
                aiohttp.ClientTimeout(total=None, sock_connect=self.timeout_s)
                if request.follow
                else self.timeout_s
            ),
            **dict(request.extra),
        }
        for key in ("container", "follow", "timestamps", "since_seconds", "tail_lines"):
            value = getattr(request, key)
            if value not in (None, "", False):
                kwargs[key] = value
        if request.previous:
            kwargs["previous"] = True
        resp: aiohttp.ClientResponse = await self._core.read_namespaced_pod_log(  # type: ignore[assignment]
            request.pod, self.namespace, **kwargs
        )
        try:
            if not 200 <= resp.status <= 299:
                body = _loads(await resp.read())
                raise error_from_status(
                    resp.status, body if isinstance(body, dict) else None, f"log {request.pod!r}"
                )
            partial = b""
            while True:
                chunk = await resp.content.readline()
                if not chunk:
                    break
                partial += chunk
                if not partial.endswith(b"\n"):
                    continue  # a line longer than the reader's buffer: keep collecting
                yield partial[:-1].decode("utf-8", "replace")
                partial = b""
            if partial:
                yield partial.decode("utf-8", "replace")
        except (aiohttp.ClientPayloadError, asyncio.IncompleteReadError):
            return  # a stream cut mid-line ends like a server close: the caller resumes
        finally:
            resp.release()


def _loads(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return None
