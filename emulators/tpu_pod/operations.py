"""API errors and long-running operations, shared by the gRPC and REST front ends.

An operation started through one front end can be polled through the other, as
on GCP (gcloud polls REST what a Python client started over gRPC).
"""

from __future__ import annotations

import asyncio
import itertools
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import grpc
from google.cloud.tpu_v2.types import cloud_tpu
from google.longrunning import operations_pb2
from google.protobuf import any_pb2, timestamp_pb2
from google.rpc import status_pb2

MAX_OPERATIONS = 1000  # finished operations beyond this are forgotten, oldest first


class ApiError(Exception):
    """Raised by the backend; a gRPC status, or an HTTP error on the REST side."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code


def now_pb() -> timestamp_pb2.Timestamp:
    ts = timestamp_pb2.Timestamp()
    ts.FromNanoseconds(time.time_ns())
    return ts


def timestamp(seconds: float) -> timestamp_pb2.Timestamp:
    ts = timestamp_pb2.Timestamp()
    ts.FromNanoseconds(int(seconds * 1e9))
    return ts


@dataclass
class Operation:
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
                self.end_time = now_pb()
            meta.end_time.CopyFrom(self.end_time)
        op.metadata.Pack(meta)
        if not self.task.done():
            return op
        op.done = True
        exc = None if self.task.cancelled() else self.task.exception()
        if self.task.cancelled():
            op.error.CopyFrom(status_pb2.Status(code=grpc.StatusCode.CANCELLED.value[0]))
        elif exc is None:
            response = any_pb2.Any()
            response.Pack(self.result_pb(self.task.result()))
            op.response.CopyFrom(response)
        else:
            code = exc.code if isinstance(exc, ApiError) else grpc.StatusCode.INTERNAL
            op.error.CopyFrom(status_pb2.Status(code=code.value[0], message=str(exc)))
        return op


class OperationStore:
    def __init__(self) -> None:
        self._ops: dict[str, Operation] = {}
        self._ids = itertools.count(1)

    def start(
        self,
        parent: str,
        verb: str,
        target: str,
        work: Awaitable[Any],
        result_pb: Callable[[Any], Any],
    ) -> operations_pb2.Operation:
        """Run ``work`` as an operation of location ``parent``; its first snapshot."""
        stamp = f"{int(time.time() * 1000)}-{secrets.token_hex(6)}-{next(self._ids):04d}"
        name = f"{parent}/operations/operation-{stamp}"
        meta = cloud_tpu.OperationMetadata(
            create_time=now_pb(), target=target, verb=verb, api_version="v2"
        )
        task = asyncio.ensure_future(work)
        task.add_done_callback(lambda t: t.cancelled() or t.exception())  # mark retrieved
        op = Operation(name=name, metadata=meta, task=task, result_pb=result_pb)
        self._ops[name] = op
        self._forget_old()
        return op.to_pb()

    def _forget_old(self) -> None:
        if len(self._ops) <= MAX_OPERATIONS:
            return
        for name in [n for n, op in self._ops.items() if op.task.done()]:
            if len(self._ops) <= MAX_OPERATIONS:
                break
            del self._ops[name]

    def get(self, name: str) -> operations_pb2.Operation:
        return self._get(name).to_pb()

    def _get(self, name: str) -> Operation:
        op = self._ops.get(name)
        if op is None:
            raise ApiError(grpc.StatusCode.NOT_FOUND, f"operation {name!r} not found")
        return op

    def list(self, prefix: str) -> list[operations_pb2.Operation]:
        """Operations of a location (``projects/P/locations/Z``; ``-`` for every zone)."""
        head, _, zone = prefix.rstrip("/").rpartition("/")
        ops = []
        for name, op in self._ops.items():
            if name.startswith(prefix + "/") or (zone == "-" and name.startswith(head + "/")):
                ops.append(op.to_pb())
        return ops

    def delete(self, name: str) -> None:
        self._get(name)
        del self._ops[name]

    def cancel_all(self) -> None:
        for op in self._ops.values():
            if not op.task.done():
                op.task.cancel()
