"""The TPU v2 API's request handlers, and the gRPC server that exposes them.

Messages are the real ``google.cloud.tpu_v2`` proto-plus types, so the real
``TpuAsyncClient`` (grpc_asyncio transport) talks to it unchanged. Services:
``google.cloud.tpu.v2.Tpu`` (nodes, guest attributes, queued resources),
``google.longrunning.Operations`` and ``google.cloud.location.Locations``.
The REST front end (``rest_api``) calls the same ``TpuApi`` methods.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import grpc
from google.cloud.location import locations_pb2
from google.cloud.tpu_v2.types import cloud_tpu
from google.longrunning import operations_pb2
from google.protobuf import empty_pb2

from emulators.tpu_pod import accelerators
from emulators.tpu_pod.api_state import PodState
from emulators.tpu_pod.operations import ApiError, OperationStore
from emulators.tpu_pod.queued import QueuedResources

log = logging.getLogger("phantom.pod.api")

SERVICE = "google.cloud.tpu.v2.Tpu"
OPERATIONS_SERVICE = "google.longrunning.Operations"
LOCATIONS_SERVICE = "google.cloud.location.Locations"

__all__ = ["ApiError", "TpuApi", "serve"]


def _parent_of(name: str, collection: str) -> str:
    return name.rsplit(f"/{collection}/", 1)[0]


class TpuApi:
    """Handlers for the Tpu, Operations and Locations services (proto-plus or pb in/out)."""

    def __init__(self, pod: PodState, queued: QueuedResources, ops: OperationStore) -> None:
        self.pod = pod
        self.queued = queued
        self.ops = ops

    async def call(self, fn: Callable[[Any], Awaitable[Any]], request: Any) -> Any:
        """Every call of either front end: the slow-api fault first, then the handler."""
        await self.pod.gate()
        return await fn(request)

    # --- nodes ------------------------------------------------------------------------

    async def list_nodes(self, req: cloud_tpu.ListNodesRequest) -> cloud_tpu.ListNodesResponse:
        return cloud_tpu.ListNodesResponse(nodes=self.pod.list_nodes(req.parent))

    async def get_node(self, req: cloud_tpu.GetNodeRequest) -> cloud_tpu.Node:
        return self.pod.get_node(req.name)

    async def get_guest_attributes(
        self, req: cloud_tpu.GetGuestAttributesRequest
    ) -> cloud_tpu.GetGuestAttributesResponse:
        attrs = self.pod.guest_attributes(req.name, req.query_path, list(req.worker_ids))
        return cloud_tpu.GetGuestAttributesResponse(guest_attributes=attrs)

    async def create_node(self, req: cloud_tpu.CreateNodeRequest) -> operations_pb2.Operation:
        node_id = req.node_id or req.node.name.rsplit("/", 1)[-1]
        target, work = self.pod.create_node(req.parent, node_id, req.node)
        return self.ops.start(req.parent, "create", target, work, cloud_tpu.Node.pb)

    async def delete_node(self, req: cloud_tpu.DeleteNodeRequest) -> operations_pb2.Operation:
        work = self.pod.delete_node(req.name)
        return self.ops.start(
            _parent_of(req.name, "nodes"), "delete", req.name, work, lambda _: empty_pb2.Empty()
        )

    async def stop_node(self, req: cloud_tpu.StopNodeRequest) -> operations_pb2.Operation:
        work = self.pod.stop_node(req.name)
        parent = _parent_of(req.name, "nodes")
        return self.ops.start(parent, "stop", req.name, work, cloud_tpu.Node.pb)

    async def start_node(self, req: cloud_tpu.StartNodeRequest) -> operations_pb2.Operation:
        work = self.pod.start_node(req.name)
        parent = _parent_of(req.name, "nodes")
        return self.ops.start(parent, "start", req.name, work, cloud_tpu.Node.pb)

    # --- accelerator types and runtime versions (the zone's offer) ------------------------

    def _accelerator_type(
        self, parent: str, shape: accelerators.Shape
    ) -> cloud_tpu.AcceleratorType:
        config = cloud_tpu.AcceleratorConfig(
            type_=getattr(cloud_tpu.AcceleratorConfig.Type, shape.generation.config_type),
            topology=shape.topology,
        )
        return cloud_tpu.AcceleratorType(
            name=f"{parent}/acceleratorTypes/{shape.type}",
            type_=shape.type,
            accelerator_configs=[config],
        )

    async def list_accelerator_types(
        self, req: cloud_tpu.ListAcceleratorTypesRequest
    ) -> cloud_tpu.ListAcceleratorTypesResponse:
        self.pod.zone_of(req.parent, allow_all=False)
        types = [self._accelerator_type(req.parent, s) for s in accelerators.all_shapes()]
        return cloud_tpu.ListAcceleratorTypesResponse(accelerator_types=types)

    async def get_accelerator_type(
        self, req: cloud_tpu.GetAcceleratorTypeRequest
    ) -> cloud_tpu.AcceleratorType:
        parent, _, name = req.name.rpartition("/acceleratorTypes/")
        zone = self.pod.zone_of(parent, allow_all=False)
        try:
            return self._accelerator_type(parent, accelerators.parse(name))
        except ValueError:
            raise ApiError(
                grpc.StatusCode.NOT_FOUND,
                f"accelerator type {name!r} not found in zone {zone}",
            ) from None

    async def list_runtime_versions(
        self, req: cloud_tpu.ListRuntimeVersionsRequest
    ) -> cloud_tpu.ListRuntimeVersionsResponse:
        self.pod.zone_of(req.parent, allow_all=False)
        versions = [
            cloud_tpu.RuntimeVersion(name=f"{req.parent}/runtimeVersions/{v}", version=v)
            for v in accelerators.RUNTIME_VERSIONS
        ]
        return cloud_tpu.ListRuntimeVersionsResponse(runtime_versions=versions)

    async def get_runtime_version(
        self, req: cloud_tpu.GetRuntimeVersionRequest
    ) -> cloud_tpu.RuntimeVersion:
        parent, _, version = req.name.rpartition("/runtimeVersions/")
        zone = self.pod.zone_of(parent, allow_all=False)
        if version not in accelerators.RUNTIME_VERSIONS:
            raise ApiError(
                grpc.StatusCode.NOT_FOUND, f"runtime version {version!r} not found in zone {zone}"
            )
        return cloud_tpu.RuntimeVersion(name=req.name, version=version)

    async def unsupported(self, req: Any) -> Any:
        raise ApiError(
            grpc.StatusCode.UNIMPLEMENTED,
            f"the emulator does not implement {type(req).__name__.removesuffix('Request')}",
        )

    # --- queued resources --------------------------------------------------------------

    async def list_queued_resources(
        self, req: cloud_tpu.ListQueuedResourcesRequest
    ) -> cloud_tpu.ListQueuedResourcesResponse:
        return cloud_tpu.ListQueuedResourcesResponse(
            queued_resources=self.queued.list_pb(req.parent)
        )

    async def get_queued_resource(
        self, req: cloud_tpu.GetQueuedResourceRequest
    ) -> cloud_tpu.QueuedResource:
        return self.queued.to_pb(self.queued.get(req.name))

    async def create_queued_resource(
        self, req: cloud_tpu.CreateQueuedResourceRequest
    ) -> operations_pb2.Operation:
        name, work = self.queued.create(req.parent, req.queued_resource_id, req.queued_resource)
        return self.ops.start(req.parent, "create", name, work, cloud_tpu.QueuedResource.pb)

    async def delete_queued_resource(
        self, req: cloud_tpu.DeleteQueuedResourceRequest
    ) -> operations_pb2.Operation:
        work = self.queued.delete(req.name, req.force)
        return self.ops.start(
            _parent_of(req.name, "queuedResources"),
            "delete",
            req.name,
            work,
            lambda _: empty_pb2.Empty(),
        )

    async def reset_queued_resource(
        self, req: cloud_tpu.ResetQueuedResourceRequest
    ) -> operations_pb2.Operation:
        work = self.queued.reset(req.name)
        return self.ops.start(
            _parent_of(req.name, "queuedResources"),
            "reset",
            req.name,
            work,
            cloud_tpu.QueuedResource.pb,
        )

    # --- operations and locations ---------------------------------------------------------

    async def get_operation(self, req: operations_pb2.GetOperationRequest) -> Any:
        return self.ops.get(req.name)

    async def list_operations(self, req: operations_pb2.ListOperationsRequest) -> Any:
        self.pod.zone_of(req.name)
        return operations_pb2.ListOperationsResponse(operations=self.ops.list(req.name))

    async def delete_operation(self, req: operations_pb2.DeleteOperationRequest) -> Any:
        self.ops.delete(req.name)
        return empty_pb2.Empty()

    async def cancel_operation(self, req: operations_pb2.CancelOperationRequest) -> Any:
        raise ApiError(grpc.StatusCode.UNIMPLEMENTED, "the emulator cannot cancel operations")

    async def list_locations(self, req: locations_pb2.ListLocationsRequest) -> Any:
        return locations_pb2.ListLocationsResponse(locations=self.pod.locations(req.name))

    async def get_location(self, req: locations_pb2.GetLocationRequest) -> Any:
        return self.pod.location(req.name)

    # --- gRPC wiring ----------------------------------------------------------------------

    def handlers(self) -> list[grpc.GenericRpcHandler]:
        def wrap(fn: Callable[[Any], Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
            async def handler(request: Any, context: grpc.aio.ServicerContext) -> Any:
                try:
                    return await self.call(fn, request)
                except ApiError as exc:
                    await context.abort(exc.code, str(exc))

            return handler

        def method(fn: Callable[[Any], Awaitable[Any]], req: Any, resp: Any = None) -> Any:
            """``req``/``resp``: proto-plus classes, or raw pb classes (resp None = raw)."""
            plus = hasattr(req, "deserialize")
            return grpc.unary_unary_rpc_method_handler(
                wrap(fn),
                request_deserializer=req.deserialize if plus else req.FromString,
                response_serializer=resp.serialize
                if resp is not None
                else (lambda m: m.SerializeToString()),
            )

        t = cloud_tpu
        tpu = grpc.method_handlers_generic_handler(
            SERVICE,
            {
                "ListNodes": method(self.list_nodes, t.ListNodesRequest, t.ListNodesResponse),
                "GetNode": method(self.get_node, t.GetNodeRequest, t.Node),
                "GetGuestAttributes": method(
                    self.get_guest_attributes,
                    t.GetGuestAttributesRequest,
                    t.GetGuestAttributesResponse,
                ),
                "CreateNode": method(self.create_node, t.CreateNodeRequest),
                "DeleteNode": method(self.delete_node, t.DeleteNodeRequest),
                "StopNode": method(self.stop_node, t.StopNodeRequest),
                "StartNode": method(self.start_node, t.StartNodeRequest),
                "ListAcceleratorTypes": method(
                    self.list_accelerator_types,
                    t.ListAcceleratorTypesRequest,
                    t.ListAcceleratorTypesResponse,
                ),
                "GetAcceleratorType": method(
                    self.get_accelerator_type, t.GetAcceleratorTypeRequest, t.AcceleratorType
                ),
                "ListRuntimeVersions": method(
                    self.list_runtime_versions,
                    t.ListRuntimeVersionsRequest,
                    t.ListRuntimeVersionsResponse,
                ),
                "GetRuntimeVersion": method(
                    self.get_runtime_version, t.GetRuntimeVersionRequest, t.RuntimeVersion
                ),
                "UpdateNode": method(self.unsupported, t.UpdateNodeRequest),
                "ListQueuedResources": method(
                    self.list_queued_resources,
                    t.ListQueuedResourcesRequest,
                    t.ListQueuedResourcesResponse,
                ),
                "GetQueuedResource": method(
                    self.get_queued_resource, t.GetQueuedResourceRequest, t.QueuedResource
                ),
                "CreateQueuedResource": method(
                    self.create_queued_resource, t.CreateQueuedResourceRequest
                ),
                "DeleteQueuedResource": method(
                    self.delete_queued_resource, t.DeleteQueuedResourceRequest
                ),
                "ResetQueuedResource": method(
                    self.reset_queued_resource, t.ResetQueuedResourceRequest
                ),
            },
        )
        ops = grpc.method_handlers_generic_handler(
            OPERATIONS_SERVICE,
            {
                "GetOperation": method(self.get_operation, operations_pb2.GetOperationRequest),
                "ListOperations": method(
                    self.list_operations, operations_pb2.ListOperationsRequest
                ),
                "DeleteOperation": method(
                    self.delete_operation, operations_pb2.DeleteOperationRequest
                ),
                "CancelOperation": method(
                    self.cancel_operation, operations_pb2.CancelOperationRequest
                ),
            },
        )
        locations = grpc.method_handlers_generic_handler(
            LOCATIONS_SERVICE,
            {
                "ListLocations": method(self.list_locations, locations_pb2.ListLocationsRequest),
                "GetLocation": method(self.get_location, locations_pb2.GetLocationRequest),
            },
        )
        return [tpu, ops, locations]


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
