"""One TPU node (a slice of hosts in one zone) and how the TPU API shows it.

The state of a node follows from its hosts: all CREATING -> CREATING, one of them
re-creating -> REPAIRING (per-host recreate, emulator default mode only), any
PREEMPTED -> PREEMPTED, else READY. A host under a preemption notice still counts
as READY: the API says PREEMPTED only once the VM is gone, as on GCP.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass, field

import asyncssh
import grpc
from google.cloud.tpu_v2.types import cloud_tpu

from emulators.tpu_pod.accelerators import Shape
from emulators.tpu_pod.hosts import CREATING, PREEMPTED, PREEMPTING, READY, Host
from emulators.tpu_pod.layout import host_ip, host_name, node_path
from emulators.tpu_pod.operations import ApiError, timestamp
from emulators.tpu_pod.sshd import public_line
from emulators.tpu_pod.zones import Zone

DEFAULT_RUNTIME_VERSION = "tpu-ubuntu2204-base"
# What the API reports as every worker's port: the TPU runtime's gRPC port, not SSH's
# (the console reaches SSH on its own configured port, never reading this one).
ENDPOINT_PORT = 8470


def parse_ssh_keys(text: str) -> dict[str, frozenset[bytes]]:
    """GCE's ``ssh-keys`` metadata (``user:ssh-ed25519 AAAA... comment`` per line)."""
    out: dict[str, set[bytes]] = {}
    for line in text.splitlines():
        user, sep, key = line.strip().partition(":")
        if not sep or not user:
            continue
        try:
            blob = asyncssh.import_public_key(key.strip()).public_data
        except (asyncssh.KeyImportError, ValueError):
            continue
        out.setdefault(user, set()).add(blob)
    return {u: frozenset(b) for u, b in out.items()}


def merge_authorized(
    *maps: dict[str, frozenset[bytes]],
) -> dict[str, frozenset[bytes]]:
    out: dict[str, frozenset[bytes]] = {}
    for m in maps:
        for user, blobs in m.items():
            out[user] = out.get(user, frozenset()) | blobs
    return out


def host_key_for(node_name: str, zone: Zone, slot: int, index: int) -> tuple[str, str]:
    """(sandbox/marker key, short TMPDIR name) of worker ``index`` (see hosts.py)."""
    name = host_name(node_name, index)
    if zone.index == 0 and slot == 0:
        return name, f"w{index}"
    return f"{name}.{zone.name}.{slot}", f"{zone.index}.{slot}.w{index}"


def project_number(project: str) -> str:
    """The project's number (the emulator has none: derived from its id, the same in the
    metadata server and the service account's email)."""
    return str(int.from_bytes(project.encode()[:6].ljust(6, b"\0"), "big") % 10**12)


@dataclass
class Node:
    name: str  # the node id
    project: str
    zone: Zone
    slot: int
    hosts: list[Host]
    accelerator_type: str
    runtime_version: str = DEFAULT_RUNTIME_VERSION
    description: str = ""
    labels: dict[str, str] = field(default_factory=dict)
    metadata: dict[str, str] = field(default_factory=dict)
    spot: bool = True
    preemptible: bool = False
    shape: Shape | None = None  # None: a type outside the table (default mode only)
    faithful: bool = False  # no invented per-worker symptoms
    queued_resource: str = ""
    exists: bool = False
    deleting: bool = False
    booting: bool = False  # being created: CREATING until every host is up, never REPAIRING
    power: str = ""  # "", STOPPING, STOPPED, STARTING (StopNode/StartNode)
    node_id: int = field(default_factory=lambda: int.from_bytes(secrets.token_bytes(6), "big"))
    create_time: float = field(default_factory=time.time)
    # ``worker-network-endpoints``, built once: a node's hosts and their addresses never
    # change, and a notice re-reads every long-polling host's tree (1,024 x 1,024 otherwise).
    _endpoints: str = field(default="", init=False, repr=False, compare=False)
    # GetNode's network endpoints, built once per SSH port: a read of a 1,024-host node took
    # 12 ms, 1.4 ms now, and the console's API watch reads it every 30 ms after a drop.
    _endpoint_pbs: tuple[int, list[cloud_tpu.NetworkEndpoint]] | None = field(
        default=None, init=False, repr=False, compare=False
    )

    @classmethod
    def build(
        cls,
        name: str,
        project: str,
        zone: Zone,
        slot: int,
        n_hosts: int,
        external: bool,
        **fields: object,
    ) -> Node:
        hosts = []
        for i in range(n_hosts):
            key, tmp = host_key_for(name, zone, slot, i)
            ips: tuple[str, ...] = (host_ip(i, zone.index, slot),)
            if external:
                ips += (host_ip(i, zone.index, slot, external=True),)
            hosts.append(Host(i, host_name(name, i), ips, key, tmp))
        return cls(name, project, zone, slot, hosts, **fields)  # type: ignore[arg-type]

    @property
    def parent(self) -> str:
        return f"projects/{self.project}/locations/{self.zone.name}"

    @property
    def path(self) -> str:
        return node_path(self.project, self.zone.name, self.name)

    def state(self) -> str:
        if not self.exists:
            return "NOT_FOUND"
        if self.deleting:
            return "DELETING"
        if self.power:
            return self.power
        states = [h.state for h in self.hosts]
        if PREEMPTED in states:
            return "PREEMPTED"
        if all(s == CREATING for s in states) or (self.booting and CREATING in states):
            return "CREATING"
        if CREATING in states:
            return "REPAIRING"
        return "READY"

    def to_pb(self, ssh_port: int) -> cloud_tpu.Node:
        state = self.state()
        # Default mode marks which worker was taken (it preempts single hosts); the API
        # has no per-worker preemption symptom, so the faithful mode invents none.
        symptoms = [
            cloud_tpu.Symptom(
                create_time=timestamp(h.preempted_at or time.time()),
                symptom_type=cloud_tpu.Symptom.SymptomType.SYMPTOM_TYPE_UNSPECIFIED,
                details=f"worker {h.index} ({h.ip}) was preempted",
                worker_id=str(h.index),
            )
            for h in self.hosts
            if h.state == PREEMPTED and not self.faithful
        ]
        unhealthy = [h.name for h in self.hosts if h.state not in (READY, PREEMPTING)]
        return cloud_tpu.Node(
            name=self.path,
            description=self.description
            or ("" if self.faithful else "phantom local spot pod emulator"),
            accelerator_type=self.accelerator_type,
            accelerator_config=cloud_tpu.AcceleratorConfig(
                type_=getattr(cloud_tpu.AcceleratorConfig.Type, self.shape.generation.config_type),
                topology=self.shape.topology,
            )
            if self.shape is not None
            else None,
            state=getattr(cloud_tpu.Node.State, state),
            health=cloud_tpu.Node.Health.HEALTHY
            if state == "READY"
            else cloud_tpu.Node.Health.HEALTH_UNSPECIFIED,
            health_description=(f"hosts not ready: {', '.join(unhealthy)}" if unhealthy else ""),
            runtime_version=self.runtime_version,
            cidr_block=f"{self.hosts[0].ip.rsplit('.', 2)[0]}.0.0/16",
            create_time=timestamp(self.create_time),
            scheduling_config=cloud_tpu.SchedulingConfig(
                spot=self.spot, preemptible=self.preemptible
            ),
            network_config=self._network_config(),
            service_account=self._service_account(),
            shielded_instance_config=cloud_tpu.ShieldedInstanceConfig() if self.faithful else None,
            network_endpoints=self._network_endpoints(ssh_port),
            # Faithful: the labels as sent, none added (a real node carries only its own).
            labels=dict(self.labels) if self.faithful else {"emulator": "phantom", **self.labels},
            metadata=self.metadata,
            id=self.node_id,
            api_version=cloud_tpu.Node.ApiVersion.V2,
            symptoms=symptoms,
            queued_resource=self.queued_resource,
        )

    def _network_config(self) -> cloud_tpu.NetworkConfig:
        """Faithful: the full resource paths the real Node carries (``projects/P/global/
        networks/default``, ``projects/P/regions/R/subnetworks/default``), not the short
        names a create may send."""
        external = bool(self.hosts[0].external_ip)
        if not self.faithful:
            return cloud_tpu.NetworkConfig(
                network="default", subnetwork="default", enable_external_ips=external
            )
        region = self.zone.name.rsplit("-", 1)[0]
        return cloud_tpu.NetworkConfig(
            network=f"projects/{self.project}/global/networks/default",
            subnetwork=f"projects/{self.project}/regions/{region}/subnetworks/default",
            enable_external_ips=external,
        )

    def _service_account(self) -> cloud_tpu.ServiceAccount | None:
        """Faithful: the project's Compute Engine default service account, as a node created
        without ``--service-account`` runs as (``PROJECT_NUMBER-compute@...``, the number
        its metadata server gives)."""
        if not self.faithful:
            return None
        return cloud_tpu.ServiceAccount(
            email=f"{project_number(self.project)}-compute@developer.gserviceaccount.com",
            scope=["https://www.googleapis.com/auth/cloud-platform"],
        )

    def _network_endpoints(self, ssh_port: int) -> list[cloud_tpu.NetworkEndpoint]:
        """The hosts' endpoints (fixed for the node's life: its hosts keep their addresses);
        the message copies them, so the list is never shared with a caller."""
        if self._endpoint_pbs is None or self._endpoint_pbs[0] != ssh_port:
            eps = [
                cloud_tpu.NetworkEndpoint(
                    ip_address=h.ip,
                    # Default mode keeps its convenience: the port SSH answers on.
                    port=ENDPOINT_PORT if self.faithful else ssh_port,
                    access_config=cloud_tpu.AccessConfig(external_ip=h.external_ip)
                    if h.external_ip
                    else None,
                )
                for h in self.hosts
            ]
            self._endpoint_pbs = (ssh_port, eps)
        return self._endpoint_pbs[1]

    def guest_attributes(
        self, query_path: str, worker_ids: list[str]
    ) -> list[cloud_tpu.GuestAttributes]:
        ids = worker_ids or [str(h.index) for h in self.hosts]
        out = []
        for wid in ids:
            if not (wid.isdigit() and int(wid) < len(self.hosts)):
                raise ApiError(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"worker id {wid!r} out of range 0..{len(self.hosts) - 1}",
                )
            host = self.hosts[int(wid)]
            items = []
            if host.state in (READY, PREEMPTING) and host.host_key is not None:
                blob = public_line(host.host_key)
                # GCE publishes host keys as namespace "hostkeys", key = algorithm;
                # "ssh-host-key" carries the whole known_hosts-ready line.
                candidates = [
                    ("hostkeys", "ssh-ed25519", blob.split()[1]),
                    ("hostkeys", "ssh-host-key", blob),
                ]
                path = query_path.strip("/")
                for ns, key, value in candidates:
                    if path in ("", ns, f"{ns}/{key}"):
                        items.append(
                            cloud_tpu.GuestAttributesEntry(namespace=ns, key=key, value=value)
                        )
            out.append(
                cloud_tpu.GuestAttributes(
                    query_path=query_path,
                    query_value=cloud_tpu.GuestAttributesValue(items=items),
                )
            )
        return out

    def metadata_tree(self, host: Host, metadata_port: int) -> dict[str, object]:
        """What ``/computeMetadata/v1/`` shows on ``host``."""
        numeric = project_number(self.project)
        interface: dict[str, object] = {"ip": host.ip, "network": "default"}
        if host.external_ip:
            interface["access-configs"] = {"0": {"external-ip": host.external_ip}}
        if not self._endpoints:
            self._endpoints = ",".join(f"{h.index}:{h.ip}" for h in self.hosts)
        endpoints = self._endpoints
        return {
            "instance": {
                "id": str(self.node_id * 1000 + host.index),
                "name": host.name,
                "hostname": f"{host.name}.{self.zone.name}.c.{self.project}.internal",
                "zone": f"projects/{numeric}/zones/{self.zone.name}",
                "preempted": "TRUE" if host.notice_at is not None else "FALSE",
                "maintenance-event": host.maintenance_event,
                "scheduling": {"preemptible": "TRUE" if self.spot or self.preemptible else "FALSE"},
                "network-interfaces": {"0": interface},
                "attributes": {
                    **self.metadata,
                    "accelerator-type": self.accelerator_type,
                    "agent-worker-number": str(host.index),
                    "worker-network-endpoints": endpoints,
                    "instance-id": str(self.node_id),
                },
            },
            "project": {"project-id": self.project, "numeric-project-id": numeric},
        }
