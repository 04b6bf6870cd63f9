"""The TPU node as the Cloud TPU v2 API reports it, and the providers that drive it.

``TpuProvider`` is what the TPU VM backend uses; ``GcpTpuProvider`` implements it with the
real ``google.cloud.tpu_v2.TpuAsyncClient``. The emulator adapter (``console.wiring``) points
the same class at the pod emulator's loopback gRPC endpoint (``local_client``: insecure
channel, no Google credentials) and adds what only an emulator can do: recreate or preempt
a single host.

Recreate on real GCP: a TPU VM pod slice is one resource. There is no API to recreate one
worker of a multi-host node, so ``GcpTpuProvider.recreate(hosts=[2])`` deletes and
re-creates the WHOLE node with the same spec (every host gets a new VM, a new host key and
possibly new internal IPs) and returns every worker index. Only the emulator can recreate
one host.

Errors: API calls raise ``TpuApiError`` with one line naming the node and the cause;
``wait_ready`` reports polling errors through ``on_progress`` and keeps polling until its
deadline, so a flaky API never crashes a recovery.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

from google.api_core import exceptions as gexc
from google.cloud import tpu_v2

from console.config import CapacityConfig, ClusterConfig, SshConfig
from console.config.checks import loopback_endpoint
from console.services.backends.tpu_vm.capacity import (
    Capacity,
    CapacityError,
    CapacityHooks,
    api_error_code,
    api_error_text,
)
from console.services.backends.tpu_vm.locate import Whereabouts, attach
from console.services.backends.tpu_vm.node import (
    NodeInfo,
    node_info_from_proto,
    parse_guest_hostkeys,
)
from console.services.errors import BackendError
from console.services.record.place import PlaceRecord

log = logging.getLogger(__name__)

DEFAULT_RUNTIME_VERSION = "tpu-ubuntu2204-base"
HOSTKEYS_QUERY = "hostkeys/"
ProgressCallback = Callable[[Any], Awaitable[None] | None]


class TpuApiError(BackendError):
    """A TPU API call failed; ``str()`` is one line: node, call and cause."""


class TpuProvider(Protocol):
    """What the watchdog/facade need from a TPU provider (local emulator or GCP)."""

    node_name: str

    async def get_node(self) -> NodeInfo | None:
        """The node now, or None if it does not exist. Raises TpuApiError."""

    async def host_keys(self) -> dict[str, str]:
        """``{ip: "ssh-ed25519 AAAA..."}`` from the node's guest attributes (one or more
        OpenSSH public key lines per IP). Raises TpuApiError."""

    async def recreate(self, hosts: Sequence[int] | None = None) -> list[int]:
        """Recreate the given workers (None = all); returns the worker indices recreated."""

    async def wait_ready(
        self, timeout_s: float, on_progress: ProgressCallback | None = None
    ) -> NodeInfo:
        """Poll until the node and all its hosts are READY; TimeoutError after timeout_s."""

    async def close(self) -> None: ...


def _api_error(node: str, call: str, exc: Exception) -> TpuApiError:
    code = api_error_code(exc)
    code_s = f"{code}: " if code else ""
    return TpuApiError(f"TPU API {call} for {node}: {code_s}{api_error_text(exc)}")


class GcpTpuProvider:
    """Cloud TPU v2 through ``TpuAsyncClient`` (injectable: tests pass one bound to the
    emulator; ``client_factory`` builds one lazily, inside the event loop its gRPC channel
    binds to). ``ssh_port`` is the port the workers' sshd listens on (22 on GCP).
    ``external_ssh``: the endpoints name each worker's external IP for SSH, and a node this
    provider creates gets external IPs (``networkConfig.enableExternalIps``)."""

    def __init__(
        self,
        project: str,
        zone: str,
        node: str,
        client: tpu_v2.TpuAsyncClient | None = None,
        *,
        ssh_port: int = 22,
        accelerator_type: str = "",
        runtime_version: str = DEFAULT_RUNTIME_VERSION,
        poll_interval_s: float = 5.0,
        call_timeout_s: float = 60.0,
        external_ssh: bool = False,
        client_factory: Callable[[], tpu_v2.TpuAsyncClient] | None = None,
    ) -> None:
        self.project = project
        # Where the node is recorded and looked for (None: the configured zone only).
        self.whereabouts: Whereabouts | None = None
        self.zone = zone
        self.node_name = node
        self.ssh_port = ssh_port
        self.accelerator_type = accelerator_type
        self.runtime_version = runtime_version
        self.poll_interval_s = poll_interval_s
        self.call_timeout_s = call_timeout_s
        self.external_ssh = external_ssh
        self._client = client
        self._client_factory = client_factory
        self._last_proto: tpu_v2.Node | None = None
        self.last: NodeInfo | None = None
        self._read: NodeInfo | None = None
        self._read_key: tuple[bytes, int, bool] | None = None
        self._warned_no_external = False
        # Stockouts, zone failover, queued resources (None: delete + create in place).
        self.capacity: Capacity | None = None

    @property
    def zone(self) -> str:
        return self._zone

    @zone.setter
    def zone(self, zone: str) -> None:
        """The node is in ``zone`` now (a failover moved it, or it was found there)."""
        self._zone = zone
        if self.whereabouts is not None:
            self.whereabouts.moved(zone)

    @property
    def parent(self) -> str:
        return f"projects/{self.project}/locations/{self.zone}"

    @property
    def node_path(self) -> str:
        return f"{self.parent}/nodes/{self.node_name}"

    @property
    def client(self) -> tpu_v2.TpuAsyncClient:
        if self._client is None:
            factory = self._client_factory or tpu_v2.TpuAsyncClient
            self._client = factory()
        return self._client

    async def get_node(self) -> NodeInfo | None:
        try:
            node = await self.client.get_node(name=self.node_path, timeout=self.call_timeout_s)
        except gexc.NotFound:
            found = await self.whereabouts.find(self) if self.whereabouts else None
            if found is None:
                self.last = None
                return None
            self.zone, node = found  # moved by a process that is gone: adopt it there
        except (gexc.GoogleAPIError, OSError) as exc:
            raise _api_error(self.node_name, "GetNode", exc) from None
        if self.whereabouts is not None:
            self.whereabouts.moved(self.zone)  # first sight, or a record another process moved
        self._last_proto = node
        # A node as it was at the last poll (most polls) is the NodeInfo read then: its wire
        # form costs ~30 us to compare, reading 1,024 endpoints again ~2.5 ms.
        key = (type(node).pb(node).SerializeToString(), self.ssh_port, self.external_ssh)
        if key != self._read_key or self._read is None:
            self._read = node_info_from_proto(
                node, ssh_port=self.ssh_port, external=self.external_ssh
            )
            self._read_key = key
        self.last = self._read
        self._check_external(self.last)
        return self.last

    def _check_external(self, node: NodeInfo) -> None:
        """SSH from outside the VPC needs external IPs: say so once when a node has none."""
        if not self.external_ssh or not node.ready or self._warned_no_external:
            return
        bare = [ep.name for ep in node.endpoints if not ep.ssh_ip]
        if bare:
            self._warned_no_external = True
            log.warning(
                "%s has no external IP on %s: SSH goes to the internal IP; set "
                "ssh.internal_ip = true when the console runs inside the VPC, or "
                "ssh.proxy_command (IAP or a bastion)",
                self.node_name,
                ", ".join(bare),
            )

    async def host_keys(self) -> dict[str, str]:
        node = self.last or await self.get_node()
        if node is None:
            return {}
        try:
            resp = await self.client.get_guest_attributes(
                request=tpu_v2.GetGuestAttributesRequest(
                    name=self.node_path, query_path=HOSTKEYS_QUERY
                ),
                timeout=self.call_timeout_s,
            )
        except (gexc.GoogleAPIError, OSError) as exc:
            raise _api_error(self.node_name, "GetGuestAttributes", exc) from None
        per_worker = parse_guest_hostkeys(resp.guest_attributes)
        if len(per_worker) != len(node.endpoints):
            # The answer does not line up with the workers: ask each worker on its own.
            per_worker = await asyncio.gather(
                *(self._worker_keys(ep.index) for ep in node.endpoints)
            )
        return {ep.ip: keys for ep, keys in zip(node.endpoints, per_worker, strict=True) if keys}

    async def _worker_keys(self, index: int) -> str:
        try:
            resp = await self.client.get_guest_attributes(
                request=tpu_v2.GetGuestAttributesRequest(
                    name=self.node_path, query_path=HOSTKEYS_QUERY, worker_ids=[str(index)]
                ),
                timeout=self.call_timeout_s,
            )
        except (gexc.GoogleAPIError, OSError) as exc:
            raise _api_error(self.node_name, f"GetGuestAttributes(worker {index})", exc) from None
        keys = parse_guest_hostkeys(resp.guest_attributes)
        return keys[0] if keys else ""

    async def recreate(self, hosts: Sequence[int] | None = None) -> list[int]:
        """Delete and re-create the whole node with its last known spec (see module doc)."""
        spec = self._spec_for_create()
        n = len(self._last_proto.network_endpoints) if self._last_proto is not None else 0
        if hosts is not None and n and sorted(set(hosts)) != list(range(n)):
            log.warning(
                "GCP cannot recreate single workers of %s; recreating the whole node",
                self.node_name,
            )
        if self.capacity is not None:
            try:
                await self.capacity.reacquire(spec)
            except CapacityError as exc:
                raise TpuApiError(str(exc)) from None
        else:
            await self._delete_node()
            await self._create_node(spec)
        return list(range(n)) if n else list(hosts or [])

    def _spec_for_create(self) -> tpu_v2.Node:
        spec = self._base_spec()
        if self.external_ssh:
            # The console reaches the workers on their external IPs: the new VMs need them.
            network = tpu_v2.NetworkConfig(spec.network_config)
            network.enable_external_ips = True
            spec.network_config = network
        return spec

    def _base_spec(self) -> tpu_v2.Node:
        if self._last_proto is not None:
            old = self._last_proto
            return tpu_v2.Node(
                accelerator_type=old.accelerator_type,
                runtime_version=old.runtime_version or self.runtime_version,
                network_config=old.network_config,
                scheduling_config=old.scheduling_config,
                metadata=dict(old.metadata),
                labels=dict(old.labels),
                tags=list(old.tags),
                description=old.description,
                service_account=old.service_account,
                data_disks=list(old.data_disks),
                shielded_instance_config=old.shielded_instance_config,
            )
        if not self.accelerator_type:
            raise TpuApiError(
                f"cannot create {self.node_name}: its spec is unknown (never seen) and no "
                "cluster.accelerator_type is configured"
            )
        return tpu_v2.Node(
            accelerator_type=self.accelerator_type,
            runtime_version=self.runtime_version,
            scheduling_config=tpu_v2.SchedulingConfig(spot=True),
        )

    async def _delete_node(self) -> None:
        try:
            op = await self.client.delete_node(name=self.node_path, timeout=self.call_timeout_s)
            await op.result(timeout=max(self.call_timeout_s, 600.0))
        except gexc.NotFound:
            return
        except (TimeoutError, gexc.GoogleAPIError, OSError) as exc:
            raise _api_error(self.node_name, "DeleteNode", exc) from None

    async def _create_node(self, spec: tpu_v2.Node) -> None:
        try:
            op = await self.client.create_node(
                parent=self.parent, node=spec, node_id=self.node_name, timeout=self.call_timeout_s
            )
            await op.result(timeout=max(self.call_timeout_s, 600.0))
        except (TimeoutError, gexc.GoogleAPIError, OSError) as exc:
            raise _api_error(self.node_name, "CreateNode", exc) from None

    async def wait_ready(
        self, timeout_s: float, on_progress: ProgressCallback | None = None
    ) -> NodeInfo:
        """Poll ``get_node`` until ``NodeInfo.ready``. ``on_progress`` gets every NodeInfo
        whose summary changed, and a ``TpuApiError`` for each failed poll (then polling
        goes on). Raises TimeoutError naming the last state seen."""
        deadline = time.monotonic() + timeout_s
        last_summary = ""
        last_seen = "no answer"
        while True:
            try:
                node = await self.get_node()
            except TpuApiError as exc:
                node = None
                last_seen = str(exc)
                await _notify(on_progress, exc)
            else:
                if node is None:
                    last_seen = f"{self.node_name} does not exist"
                else:
                    last_seen = node.summary()
                    if last_seen != last_summary:
                        last_summary = last_seen
                        await _notify(on_progress, node)
                    if node.ready:
                        return node
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(
                    f"{self.node_name} not READY after {timeout_s:g}s (last: {last_seen})"
                )
            await asyncio.sleep(min(self.poll_interval_s, remaining))

    async def close(self) -> None:
        if self._client is not None:
            with contextlib.suppress(Exception):
                await self._client.transport.close()


async def _notify(cb: ProgressCallback | None, value: Any) -> None:
    if cb is None:
        return
    try:
        res = cb(value)
        if asyncio.iscoroutine(res) or isinstance(res, Awaitable):
            await res
    except Exception:
        log.exception("progress callback failed")


def local_client(endpoint: str) -> tpu_v2.TpuAsyncClient:
    """A real ``TpuAsyncClient`` on an insecure loopback channel (the emulator's API).

    With an explicit channel the transport ignores credentials, so no Google login is
    looked up. Must be called with a running event loop (grpc.aio channels bind to it).
    """
    import grpc
    from google.auth.credentials import AnonymousCredentials
    from google.cloud.tpu_v2.services.tpu.transports import TpuGrpcAsyncIOTransport

    channel = grpc.aio.insecure_channel(loopback_endpoint(endpoint))
    transport = TpuGrpcAsyncIOTransport(channel=channel, credentials=AnonymousCredentials())
    return tpu_v2.TpuAsyncClient(transport=transport)


def gcp_provider(
    cl: ClusterConfig,
    ssh: SshConfig,
    capacity: CapacityConfig,
    *,
    poll_interval_s: float,
    hooks: CapacityHooks = CapacityHooks(),  # noqa: B008 (frozen: shared safely)
    place: PlaceRecord | None = None,
) -> GcpTpuProvider:
    """Google's TPU API for the pod ``cl`` names, credentials from the environment as gcloud
    finds them. ``cluster.api_endpoint`` overrides the endpoint: "host:port" (TLS, with those
    credentials), or "http://127.0.0.1:PORT" for a plain-text loopback endpoint with
    anonymous credentials (the GCP-faithful emulator; any other http:// host is refused).
    SSH goes to the workers' external IPs unless ``ssh.internal_ip`` or ``ssh.proxy_command``.
    Getting the slice back reports to ``hooks``; with ``place`` the provider finds its node
    by the pod's place record (a failover moves it) and writes every move there.
    """
    endpoint = cl.api_endpoint
    factory: Callable[[], tpu_v2.TpuAsyncClient] | None = None
    if endpoint.startswith("http://"):
        loopback_endpoint(endpoint)  # refuses a non-loopback host now, not at the first call
        factory = functools.partial(local_client, endpoint)
    elif endpoint:
        from google.api_core.client_options import ClientOptions

        options = ClientOptions(api_endpoint=endpoint)
        factory = functools.partial(tpu_v2.TpuAsyncClient, client_options=options)
    provider = GcpTpuProvider(
        cl.project,
        cl.zone,
        cl.node_name,
        ssh_port=ssh.port,
        accelerator_type=cl.accelerator_type,
        poll_interval_s=poll_interval_s,
        external_ssh=not (ssh.internal_ip or ssh.proxy_command),
        client_factory=factory,
    )
    provider.capacity = Capacity(provider, capacity, hooks=hooks)
    if place is not None:
        attach(provider, place)
    return provider
