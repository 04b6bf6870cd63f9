"""gRPC server for the subset of ``google.cloud.tpu.v2.Tpu`` the console uses.

Messages are the real ``google.cloud.tpu_v2`` proto-plus types, so the real
``TpuAsyncClient`` (grpc_asyncio transport) talks to it unchanged. Create and
Delete return ``google.longrunning.Operation``s served by
``google.longrunning.Operations``.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import grpc
from google.cloud.tpu_v2.types import cloud_tpu
from google.longrunning import operations_pb2
from google.protobuf import any_pb2, empty_pb2, timestamp_pb2
from google.rpc import status_pb2

log = logging.getLogger("phantom.pod.api")

SERVICE = "google.cloud.tpu.v2.Tpu"
OPERATIONS_SERVICE = "google.longrunning.Operations"


class ApiError(Exception):
    """Raised by the backend; becomes a gRPC status."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code


class TpuBackend(Protocol):
    """What the daemon's pod model provides to the API."""

    project: str
    zone: str

    def node(self, name: str) -> cloud_tpu.Node: ...

    def nodes(self) -> list[cloud_tpu.Node]: ...

    def guest_attributes(
        self, name: str, query_path: str, worker_ids: list[str]
    ) -> list[cloud_tpu.GuestAttributes]: ...

    def create_node(self, node_id: str, node: cloud_tpu.Node) -> Awaitable[cloud_tpu.Node]: ...

    def delete_node(self, name: str) -> Awaitable[None]: ...


def _now() -> timestamp_pb2.Timestamp:
    ts = timestamp_pb2.Timestamp()
    ts.FromNanoseconds(time.time_ns())
    return ts


@dataclass
class _Op:
    name: str
    metadata: cloud_tpu.OperationMetadata
    task: asyncio.Future[Any]
    result_pb: Callable[[Any], Any]
    end_time: timestamp_pb2.Timestamp | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_pb(self) -> operations_pb2.Operation:
        op = operations_pb2.Operation(name=self.name)
        meta = cloud_tpu.OperationMetadata.pb(self.metadata)
        if self.task.done():
            if self.end_time is None:
                self.end_time = _now()
            meta.end_time.CopyFrom(self.end_time)
        op.metadata.Pack(meta)
        if not self.task.done():
            return op
        op.done = True
        exc = self.task.exception()
        if exc is None:
            response = any_pb2.Any()
            response.Pack(self.result_pb(self.task.result()))
            op.response.CopyFrom(response)
        else:
            code = exc.code if isinstance(exc, ApiError) else grpc.StatusCode.INTERNAL
            op.error.CopyFrom(status_pb2.Status(code=code.value[0], message=str(exc)))
        return op


class TpuApi:
    """Handlers for the Tpu and Operations services."""

    def __init__(self, backend: TpuBackend) -> None:
        self.backend = backend
        self._ops: dict[str, _Op] = {}
        self._ids = itertools.count(1)

    @property
    def parent(self) -> str:
        return f"projects/{self.backend.project}/locations/{self.backend.zone}"

    def _check_parent(self, parent: str) -> None:
        wildcard = f"projects/{self.backend.project}/locations/-"
        if parent not in (self.parent, wildcard):
            raise ApiError(
                grpc.StatusCode.NOT_FOUND,
                f"location {parent!r} not found; the emulator serves {self.parent!r}",
            )

    def _start_op(
        self, verb: str, target: str, work: Awaitable[Any], result_pb: Callable[[Any], Any]
    ) -> operations_pb2.Operation:
        name = f"{self.parent}/operations/operation-{int(time.time())}-{next(self._ids):04d}"
        meta = cloud_tpu.OperationMetadata(
            create_time=_now(), target=target, verb=verb, api_version="v2"
        )
        task = asyncio.ensure_future(work)
        task.add_done_callback(lambda t: t.cancelled() or t.exception())  # mark retrieved
        op = _Op(name=name, metadata=meta, task=task, result_pb=result_pb)
        self._ops[name] = op
        return op.to_pb()

    # --- Tpu -----------------------------------------------------------------

    async def list_nodes(self, req: cloud_tpu.ListNodesRequest) -> cloud_tpu.ListNodesResponse:
        self._check_parent(req.parent)
        return cloud_tpu.ListNodesResponse(nodes=self.backend.nodes())

    async def get_node(self, req: cloud_tpu.GetNodeRequest) -> cloud_tpu.Node:
        return self.backend.node(req.name)

    async def get_guest_attributes(
        self, req: cloud_tpu.GetGuestAttributesRequest
    ) -> cloud_tpu.GetGuestAttributesResponse:
        attrs = self.backend.guest_attributes(req.name, req.query_path, list(req.worker_ids))
        return cloud_tpu.GetGuestAttributesResponse(guest_attributes=attrs)

    async def create_node(self, req: cloud_tpu.CreateNodeRequest) -> operations_pb2.Operation:
        self._check_parent(req.parent)
        node_id = req.node_id or req.node.name.rsplit("/", 1)[-1]
        work = self.backend.create_node(node_id, req.node)
        target = f"{self.parent}/nodes/{node_id}"
        return self._start_op("create", target, work, cloud_tpu.Node.pb)

    async def delete_node(self, req: cloud_tpu.DeleteNodeRequest) -> operations_pb2.Operation:
        work = self.backend.delete_node(req.name)
        return self._start_op("delete", req.name, work, lambda _: empty_pb2.Empty())

    # --- Operations ----------------------------------------------------------

    def _op(self, name: str) -> _Op:
        op = self._ops.get(name)
        if op is None:
            raise ApiError(grpc.StatusCode.NOT_FOUND, f"operation {name!r} not found")
        return op

    async def get_operation(self, req: operations_pb2.GetOperationRequest) -> Any:
        return self._op(req.name).to_pb()

    async def list_operations(self, req: operations_pb2.ListOperationsRequest) -> Any:
        ops = [op.to_pb() for name, op in self._ops.items() if name.startswith(req.name)]
        return operations_pb2.ListOperationsResponse(operations=ops)

    async def delete_operation(self, req: operations_pb2.DeleteOperationRequest) -> Any:
        self._op(req.name)
        del self._ops[req.name]
        return empty_pb2.Empty()

    async def cancel_operation(self, req: operations_pb2.CancelOperationRequest) -> Any:
        raise ApiError(grpc.StatusCode.UNIMPLEMENTED, "the emulator cannot cancel operations")

    # --- wiring --------------------------------------------------------------

    def handlers(self) -> list[grpc.GenericRpcHandler]:
        def wrap(fn: Callable[[Any], Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
            async def handler(request: Any, context: grpc.aio.ServicerContext) -> Any:
                try:
                    return await fn(request)
                except ApiError as exc:
                    await context.abort(exc.code, str(exc))

            return handler

        def proto_plus(fn: Callable[[Any], Awaitable[Any]], req: Any, resp: Any) -> Any:
            return grpc.unary_unary_rpc_method_handler(
                wrap(fn), request_deserializer=req.deserialize, response_serializer=resp.serialize
            )

        def raw(fn: Callable[[Any], Awaitable[Any]], req: Any) -> Any:
            return grpc.unary_unary_rpc_method_handler(
                wrap(fn),
                request_deserializer=req.FromString,
                response_serializer=lambda m: m.SerializeToString(),
            )

        def proto_plus_to_raw(fn: Callable[[Any], Awaitable[Any]], req: Any) -> Any:
            return grpc.unary_unary_rpc_method_handler(
                wrap(fn),
                request_deserializer=req.deserialize,
                response_serializer=lambda m: m.SerializeToString(),
            )

        tpu = grpc.method_handlers_generic_handler(
            SERVICE,
            {
                "ListNodes": proto_plus(
                    self.list_nodes, cloud_tpu.ListNodesRequest, cloud_tpu.ListNodesResponse
                ),
                "GetNode": proto_plus(self.get_node, cloud_tpu.GetNodeRequest, cloud_tpu.Node),
                "GetGuestAttributes": proto_plus(
                    self.get_guest_attributes,
                    cloud_tpu.GetGuestAttributesRequest,
                    cloud_tpu.GetGuestAttributesResponse,
                ),
                "CreateNode": proto_plus_to_raw(self.create_node, cloud_tpu.CreateNodeRequest),
                "DeleteNode": proto_plus_to_raw(self.delete_node, cloud_tpu.DeleteNodeRequest),
            },
        )
        ops = grpc.method_handlers_generic_handler(
            OPERATIONS_SERVICE,
            {
                "GetOperation": raw(self.get_operation, operations_pb2.GetOperationRequest),
                "ListOperations": raw(self.list_operations, operations_pb2.ListOperationsRequest),
                "DeleteOperation": raw(
                    self.delete_operation, operations_pb2.DeleteOperationRequest
                ),
                "CancelOperation": raw(
                    self.cancel_operation, operations_pb2.CancelOperationRequest
                ),
            },
        )
        return [tpu, ops]


async def serve(api: TpuApi, port: int) -> tuple[grpc.aio.Server, int]:
    """Start the gRPC server on 127.0.0.1:port (0 = a free port)."""
    server = grpc.aio.server()
    server.add_generic_rpc_handlers(api.handlers())
    try:
        bound = server.add_insecure_port(f"127.0.0.1:{port}")
    except RuntimeError:
        bound = 0
    if bound == 0:
        raise OSError(f"port {port} on 127.0.0.1 is in use; pass --api-port")
    await server.start()
    return server, bound
