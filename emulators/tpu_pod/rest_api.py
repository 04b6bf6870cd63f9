"""The REST (HTTP/JSON) front end of the TPU API, as ``tpu.googleapis.com`` serves it.

The gRPC transcoding of ``google.cloud.tpu.v2`` (the paths in the client library's
``rest_base.py``): JSON field names in camelCase, enums by name, int64 as strings,
long-running operations as ``google.longrunning.Operation`` JSON with ``@type``'d
``metadata``/``response``, errors as ``{"error": {"code", "message", "status"}}``.
Every request is handled by the same ``TpuApi`` methods as gRPC.

What gcloud 528 calls (seen with ``--log-http`` against this server):
``GET  /v2/projects/P/locations/Z/nodes`` (``tpu-vm list``; Z may be ``-``),
``GET  /v2/projects/P/locations/Z/nodes/N`` (``describe``),
``POST /v2/projects/P/locations/Z/nodes?nodeId=N`` / ``DELETE .../nodes/N`` (``create``,
``delete``, then ``GET /v2/<operation name>`` until done),
``GET|POST /v2/projects/P/locations/Z/queuedResources[?queuedResourceId=Q]``,
``GET|DELETE .../queuedResources/Q[?force=True]``, ``POST .../queuedResources/Q:reset``,
``GET /v1/projects/P/locations`` (``compute tpus locations list``),
``POST .../nodes/N:stop|:start`` (``tpu-vm stop|start``), ``GET .../acceleratorTypes``
(``compute tpus accelerator-types list``), ``GET .../runtimeVersions`` (``versions list``).
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Awaitable, Callable
from typing import Any

import grpc
import proto  # type: ignore[import-untyped]
from aiohttp import web
from google.cloud.location import locations_pb2
from google.cloud.tpu_v2.types import cloud_tpu
from google.longrunning import operations_pb2
from google.protobuf import json_format
from google.protobuf.message import Message

from emulators.tpu_pod.operations import ApiError
from emulators.tpu_pod.tpu_api import TpuApi

log = logging.getLogger("phantom.pod.rest")

# gRPC status -> HTTP status, as Google's API front ends map them.
HTTP_STATUS = {
    grpc.StatusCode.INVALID_ARGUMENT: 400,
    grpc.StatusCode.FAILED_PRECONDITION: 400,
    grpc.StatusCode.OUT_OF_RANGE: 400,
    grpc.StatusCode.UNAUTHENTICATED: 401,
    grpc.StatusCode.PERMISSION_DENIED: 403,
    grpc.StatusCode.NOT_FOUND: 404,
    grpc.StatusCode.ABORTED: 409,
    grpc.StatusCode.ALREADY_EXISTS: 409,
    grpc.StatusCode.RESOURCE_EXHAUSTED: 429,
    grpc.StatusCode.CANCELLED: 499,
    grpc.StatusCode.UNIMPLEMENTED: 501,
    grpc.StatusCode.UNAVAILABLE: 503,
    grpc.StatusCode.DEADLINE_EXCEEDED: 504,
}

_LOC = r"projects/[^/]+/locations/[^/]+"
Handler = Callable[[TpuApi, str, dict[str, str], dict[str, Any]], Awaitable[Any]]


def to_json(message: Any) -> dict[str, Any]:
    pb = type(message).pb(message) if isinstance(message, proto.Message) else message
    assert isinstance(pb, Message)
    return json_format.MessageToDict(pb)


def _parse(body: dict[str, Any], cls: Any) -> Any:
    """A proto-plus message of ``cls`` from its JSON; INVALID_ARGUMENT names the problem."""
    try:
        pb = json_format.ParseDict(body, cls.pb(cls()), ignore_unknown_fields=True)
    except json_format.ParseError as exc:
        raise ApiError(grpc.StatusCode.INVALID_ARGUMENT, f"invalid {cls.__name__}: {exc}") from None
    return cls.wrap(pb)


def _flag(value: str | None) -> bool:
    return (value or "").lower() in ("1", "true", "yes")


# --- routes: (method, path regex, custom verb) -> handler ---------------------------------


async def _list_nodes(api: TpuApi, path: str, q: dict[str, str], body: dict[str, Any]) -> Any:
    parent = path.rsplit("/nodes", 1)[0]
    return await api.call(api.list_nodes, cloud_tpu.ListNodesRequest(parent=parent))


async def _create_node(api: TpuApi, path: str, q: dict[str, str], body: dict[str, Any]) -> Any:
    req = cloud_tpu.CreateNodeRequest(
        parent=path.rsplit("/nodes", 1)[0],
        node_id=q.get("nodeId", ""),
        node=_parse(body, cloud_tpu.Node),
    )
    return await api.call(api.create_node, req)


async def _get_node(api: TpuApi, path: str, q: dict[str, str], body: dict[str, Any]) -> Any:
    return await api.call(api.get_node, cloud_tpu.GetNodeRequest(name=path))


async def _delete_node(api: TpuApi, path: str, q: dict[str, str], body: dict[str, Any]) -> Any:
    return await api.call(api.delete_node, cloud_tpu.DeleteNodeRequest(name=path))


async def _guest_attributes(api: TpuApi, path: str, q: dict[str, str], body: dict[str, Any]) -> Any:
    req = _parse({**body, "name": path}, cloud_tpu.GetGuestAttributesRequest)
    return await api.call(api.get_guest_attributes, req)


async def _stop_node(api: TpuApi, path: str, q: dict[str, str], body: dict[str, Any]) -> Any:
    return await api.call(api.stop_node, cloud_tpu.StopNodeRequest(name=path))


async def _start_node(api: TpuApi, path: str, q: dict[str, str], body: dict[str, Any]) -> Any:
    return await api.call(api.start_node, cloud_tpu.StartNodeRequest(name=path))


async def _list_types(api: TpuApi, path: str, q: dict[str, str], body: dict[str, Any]) -> Any:
    req = cloud_tpu.ListAcceleratorTypesRequest(parent=path.rsplit("/acceleratorTypes", 1)[0])
    return await api.call(api.list_accelerator_types, req)


async def _get_type(api: TpuApi, path: str, q: dict[str, str], body: dict[str, Any]) -> Any:
    req = cloud_tpu.GetAcceleratorTypeRequest(name=path)
    return await api.call(api.get_accelerator_type, req)


async def _list_versions(api: TpuApi, path: str, q: dict[str, str], body: dict[str, Any]) -> Any:
    req = cloud_tpu.ListRuntimeVersionsRequest(parent=path.rsplit("/runtimeVersions", 1)[0])
    return await api.call(api.list_runtime_versions, req)


async def _get_version(api: TpuApi, path: str, q: dict[str, str], body: dict[str, Any]) -> Any:
    req = cloud_tpu.GetRuntimeVersionRequest(name=path)
    return await api.call(api.get_runtime_version, req)


async def _tf_versions(api: TpuApi, path: str, q: dict[str, str], body: dict[str, Any]) -> Any:
    # v1's name for the runtime versions (`gcloud compute tpus versions list`).
    req = cloud_tpu.ListRuntimeVersionsRequest(parent=path.rsplit("/tensorflowVersions", 1)[0])
    listed = await api.call(api.list_runtime_versions, req)
    return {
        "tensorflowVersions": [
            {
                "name": v.name.replace("/runtimeVersions/", "/tensorflowVersions/"),
                "version": v.version,
            }
            for v in listed.runtime_versions
        ]
    }


async def _unsupported(api: TpuApi, path: str, q: dict[str, str], body: dict[str, Any]) -> Any:
    raise ApiError(grpc.StatusCode.UNIMPLEMENTED, f"the emulator does not implement {path!r}")


async def _list_qrs(api: TpuApi, path: str, q: dict[str, str], body: dict[str, Any]) -> Any:
    req = cloud_tpu.ListQueuedResourcesRequest(parent=path.rsplit("/queuedResources", 1)[0])
    return await api.call(api.list_queued_resources, req)


async def _create_qr(api: TpuApi, path: str, q: dict[str, str], body: dict[str, Any]) -> Any:
    req = cloud_tpu.CreateQueuedResourceRequest(
        parent=path.rsplit("/queuedResources", 1)[0],
        queued_resource_id=q.get("queuedResourceId", ""),
        queued_resource=_parse(body, cloud_tpu.QueuedResource),
    )
    return await api.call(api.create_queued_resource, req)


async def _get_qr(api: TpuApi, path: str, q: dict[str, str], body: dict[str, Any]) -> Any:
    return await api.call(api.get_queued_resource, cloud_tpu.GetQueuedResourceRequest(name=path))


async def _delete_qr(api: TpuApi, path: str, q: dict[str, str], body: dict[str, Any]) -> Any:
    req = cloud_tpu.DeleteQueuedResourceRequest(name=path, force=_flag(q.get("force")))
    return await api.call(api.delete_queued_resource, req)


async def _reset_qr(api: TpuApi, path: str, q: dict[str, str], body: dict[str, Any]) -> Any:
    req = cloud_tpu.ResetQueuedResourceRequest(name=path)
    return await api.call(api.reset_queued_resource, req)


async def _list_ops(api: TpuApi, path: str, q: dict[str, str], body: dict[str, Any]) -> Any:
    req = operations_pb2.ListOperationsRequest(name=path.rsplit("/operations", 1)[0])
    return await api.call(api.list_operations, req)


async def _get_op(api: TpuApi, path: str, q: dict[str, str], body: dict[str, Any]) -> Any:
    return await api.call(api.get_operation, operations_pb2.GetOperationRequest(name=path))


async def _delete_op(api: TpuApi, path: str, q: dict[str, str], body: dict[str, Any]) -> Any:
    return await api.call(api.delete_operation, operations_pb2.DeleteOperationRequest(name=path))


async def _cancel_op(api: TpuApi, path: str, q: dict[str, str], body: dict[str, Any]) -> Any:
    return await api.call(api.cancel_operation, operations_pb2.CancelOperationRequest(name=path))


async def _list_locations(api: TpuApi, path: str, q: dict[str, str], body: dict[str, Any]) -> Any:
    req = locations_pb2.ListLocationsRequest(name=path.rsplit("/locations", 1)[0])
    return await api.call(api.list_locations, req)


async def _get_location(api: TpuApi, path: str, q: dict[str, str], body: dict[str, Any]) -> Any:
    return await api.call(api.get_location, locations_pb2.GetLocationRequest(name=path))


ROUTES: list[tuple[str, re.Pattern[str], str, Handler]] = [
    (m, re.compile(p), verb, h)
    for m, p, verb, h in [
        ("GET", r"projects/[^/]+/locations", "", _list_locations),
        ("GET", _LOC, "", _get_location),
        ("GET", _LOC + r"/nodes", "", _list_nodes),
        ("POST", _LOC + r"/nodes", "", _create_node),
        ("GET", _LOC + r"/nodes/[^/]+", "", _get_node),
        ("DELETE", _LOC + r"/nodes/[^/]+", "", _delete_node),
        ("POST", _LOC + r"/nodes/[^/]+", "getGuestAttributes", _guest_attributes),
        ("POST", _LOC + r"/nodes/[^/]+", "start", _start_node),
        ("POST", _LOC + r"/nodes/[^/]+", "stop", _stop_node),
        ("GET", _LOC + r"/acceleratorTypes", "", _list_types),
        ("GET", _LOC + r"/acceleratorTypes/[^/]+", "", _get_type),
        ("GET", _LOC + r"/runtimeVersions", "", _list_versions),
        ("GET", _LOC + r"/runtimeVersions/[^/]+", "", _get_version),
        ("GET", _LOC + r"/tensorflowVersions", "", _tf_versions),
        ("PATCH", _LOC + r"/nodes/[^/]+", "", _unsupported),
        ("GET", _LOC + r"/queuedResources", "", _list_qrs),
        ("POST", _LOC + r"/queuedResources", "", _create_qr),
        ("GET", _LOC + r"/queuedResources/[^/]+", "", _get_qr),
        ("DELETE", _LOC + r"/queuedResources/[^/]+", "", _delete_qr),
        ("POST", _LOC + r"/queuedResources/[^/]+", "reset", _reset_qr),
        ("GET", _LOC + r"/operations", "", _list_ops),
        ("GET", _LOC + r"/operations/[^/]+", "", _get_op),
        ("DELETE", _LOC + r"/operations/[^/]+", "", _delete_op),
        ("POST", _LOC + r"/operations/[^/]+", "cancel", _cancel_op),
    ]
]


def _error(code: grpc.StatusCode, message: str) -> web.Response:
    status = HTTP_STATUS.get(code, 500)
    body = {"error": {"code": status, "message": message, "status": code.name}}
    return web.json_response(body, status=status)


class RestApi:
    def __init__(self, api: TpuApi) -> None:
        self.api = api
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
        self.port = 0

    async def start(self, port: int) -> int:
        """Listen on 127.0.0.1:port (0 = a free port); the port."""
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", port, shutdown_timeout=0.5)
        try:
            await site.start()
        except OSError as exc:
            await self._runner.cleanup()
            raise OSError(f"port {port} on 127.0.0.1 is in use; pass --rest-port") from exc
        self.port = int(self._runner.addresses[0][1])
        return self.port

    async def stop(self) -> None:
        await self._runner.cleanup()

    async def _handle(self, request: web.Request) -> web.Response:
        m = re.fullmatch(r"/(v1|v2)/(.+?)/?", request.path)
        if m is None:
            return _error(grpc.StatusCode.NOT_FOUND, f"no such API path {request.path!r}")
        path, _, verb = m.group(2).partition(":")
        if "/" in verb:  # a ':' inside a path segment, not a custom verb
            path, verb = m.group(2), ""
        body: dict[str, Any] = {}
        if request.can_read_body:
            try:
                raw = await request.text()
                body = json.loads(raw) if raw.strip() else {}
            except ValueError as exc:
                return _error(grpc.StatusCode.INVALID_ARGUMENT, f"request body is not JSON: {exc}")
            if not isinstance(body, dict):
                return _error(grpc.StatusCode.INVALID_ARGUMENT, "request body must be an object")
        allowed = [r for r in ROUTES if r[1].fullmatch(path) and r[2] == verb]
        route = next((r for r in allowed if r[0] == request.method), None)
        if route is None:
            if allowed:
                return _error(
                    grpc.StatusCode.UNIMPLEMENTED, f"{request.method} is not supported on {path!r}"
                )
            return _error(grpc.StatusCode.NOT_FOUND, f"no such API path {request.path!r}")
        try:
            result = await route[3](self.api, path, dict(request.query), body)
        except ApiError as exc:
            return _error(exc.code, str(exc))
        except Exception as exc:  # a bug must show as a 500, not a dropped connection
            log.exception("REST %s %s", request.method, request.path)
            return _error(grpc.StatusCode.INTERNAL, f"internal error: {exc}")
        return web.json_response(result if isinstance(result, dict) else to_json(result))
