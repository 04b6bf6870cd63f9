"""The Kubernetes API the GKE backend needs, as a small typed protocol.

``KubeApi`` is what the backend calls: list / watch / get / create / delete of the few
resources it uses, and pod logs. ``client.AsyncioKubeApi`` implements it with
kubernetes-asyncio; tests run the real one against the GKE emulator. Objects travel as the
API's own JSON (plain dicts): the backend reads a handful of fields from thousands of
objects per minute, and building typed models for them would cost more than it reads.

Errors are ``KubeError``s built from the server's ``Status``: ``Expired`` (410, a watch's
resourceVersion is older than the server keeps), ``NotFound`` (404), ``Conflict`` (409) and
``Invalid`` (422, with the failing fields in ``causes``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol

from console.services.errors import BackendError

Obj = dict[str, Any]

JOBSET_GROUP, JOBSET_VERSION = "jobset.x-k8s.io", "v1alpha2"
JOBSET_API = f"{JOBSET_GROUP}/{JOBSET_VERSION}"


class Resource(StrEnum):
    """The resources the backend reads (nodes are cluster-wide, the rest namespaced)."""

    PODS = "pods"
    NODES = "nodes"
    EVENTS = "events"
    SECRETS = "secrets"
    JOBS = "jobs"
    JOBSETS = "jobsets"


@dataclass(frozen=True)
class ObjectList:
    items: list[Obj]
    resource_version: str


class WatchType(StrEnum):
    """The ``type`` of one watch line (the API server's words)."""

    ADDED = "ADDED"
    MODIFIED = "MODIFIED"
    DELETED = "DELETED"
    BOOKMARK = "BOOKMARK"
    ERROR = "ERROR"


@dataclass(frozen=True)
class WatchEvent:
    """One line of a watch: ADDED / MODIFIED / DELETED with the object, or a BOOKMARK that
    only carries a newer resourceVersion."""

    type: str
    obj: Obj

    @property
    def resource_version(self) -> str:
        return str((self.obj.get("metadata") or {}).get("resourceVersion") or "")


class KubeError(BackendError):
    """The API server refused a call; ``status`` is its HTTP code, ``reason`` the Status
    reason (NotFound, AlreadyExists, Invalid, Expired ...)."""

    def __init__(
        self,
        status: int,
        reason: str,
        message: str,
        causes: Sequence[tuple[str, str]] = (),
    ) -> None:
        self.status = status
        self.reason = reason
        self.causes = tuple(causes)
        super().__init__(message)


class Expired(KubeError):
    """410 Gone: the watch's resourceVersion is too old; relist."""


class NotFound(KubeError):
    pass


class Conflict(KubeError):
    pass


class Invalid(KubeError):
    """422: the object is invalid; ``causes`` are (field path, message) pairs."""


def error_from_status(status: int, body: Mapping[str, Any] | None, fallback: str) -> KubeError:
    """A ``KubeError`` of the right class from a ``Status`` object (or a bare HTTP code)."""
    body = body or {}
    reason = str(body.get("reason") or "")
    message = str(body.get("message") or fallback)
    details = body.get("details") or {}
    causes = [
        (str(c.get("field") or ""), str(c.get("message") or ""))
        for c in (details.get("causes") or [])
        if isinstance(c, Mapping)
    ]
    code = int(body.get("code") or status)
    cls: type[KubeError] = {
        410: Expired,
        404: NotFound,
        409: Conflict,
        422: Invalid,
    }.get(code, KubeError)
    return cls(code, reason, message, causes)


@dataclass(frozen=True)
class LogRequest:
    """``pods/{name}/log`` parameters (kubernetes-asyncio has no sinceTime: resume with
    ``since_seconds`` and drop what was already seen, see ``logs.LogCursor``)."""

    pod: str
    container: str = ""
    follow: bool = False
    timestamps: bool = False
    since_seconds: int | None = None
    tail_lines: int | None = None
    previous: bool = False
    extra: Mapping[str, Any] = field(default_factory=dict)


class KubeApi(Protocol):
    """The calls the GKE backend makes. Every method raises ``KubeError`` (or a subclass)
    when the server refuses, ``OSError``/``TimeoutError`` when it cannot be reached."""

    namespace: str

    async def list(
        self, resource: Resource, *, label_selector: str = "", field_selector: str = ""
    ) -> ObjectList:
        """Every object (namespaced resources: of ``namespace``) and the list's version."""

    def watch(
        self,
        resource: Resource,
        resource_version: str,
        *,
        label_selector: str = "",
        timeout_s: float | None = None,
    ) -> AsyncIterator[WatchEvent]:
        """Changes after ``resource_version``, with BOOKMARKs; ends when the server closes
        the stream. Raises ``Expired`` when the version is too old."""

    async def get(self, resource: Resource, name: str) -> Obj:
        """One object. Raises ``NotFound``."""

    async def create(self, resource: Resource, body: Obj, *, dry_run: bool = False) -> Obj:
        """Create (``dry_run``: validate only, store nothing). Raises ``Invalid`` naming the
        fields, ``Conflict`` if it exists."""

    async def replace(self, resource: Resource, name: str, body: Obj) -> Obj:
        """PUT a whole object (secrets)."""

    async def delete(self, resource: Resource, name: str) -> None:
        """Delete with background propagation (children are garbage-collected). Raises
        ``NotFound``."""

    async def drop_finalizers(self, resource: Resource, name: str) -> Obj:
        """Patch the object's ``metadata.finalizers`` away (a pod held Terminating). Raises
        ``NotFound``."""

    def log(self, request: LogRequest) -> AsyncIterator[str]:
        """The pod's log lines (without their newline) until the server ends the stream."""

    async def close(self) -> None: ...
