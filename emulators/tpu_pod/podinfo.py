"""What ``pod status --json`` says, parsed: ``PodInfo`` and its parts, and the errors
of pod operations (stdlib only, like the client).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from emulators.tpu_pod.layout import DEFAULT_PREEMPT_GRACE


class PodError(Exception):
    """A pod operation failed; ``exit_code`` is what the CLI returns."""

    exit_code = 1


class PodUsageError(PodError):
    """Bad input (unknown host, bad flag value): exit code 2."""

    exit_code = 2


class PodNotRunning(PodError):
    pass


class PodAlreadyRunning(PodError):
    def __init__(self, message: str, pid: int) -> None:
        super().__init__(message)
        self.pid = pid


class PortInUse(PodUsageError):
    pass


@dataclass(frozen=True)
class HostInfo:
    index: int
    name: str
    ip: str
    ssh_port: int
    state: str
    host_key_fingerprint: str
    host_key: str = ""  # "ssh-ed25519 AAAA..." while the host exists
    external_ip: str = ""  # GCP-faithful mode: accessConfig.externalIp (SSH listens there too)
    metadata: str = ""  # "IP:PORT" of the host's GCE metadata server (its GCE_METADATA_HOST)
    generation: int = 0  # bumped on every (re)create of the VM
    notice_at: float | None = None  # epoch seconds a preemption notice was given
    faults: tuple[str, ...] = ()  # active fault kinds, e.g. ("hang",)
    sandbox: str = ""  # the VM's disk on this machine (HOME; wiped when it is recreated)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> HostInfo:
        return cls(
            index=int(data["index"]),
            name=str(data["name"]),
            ip=str(data["ip"]),
            ssh_port=int(data["ssh_port"]),
            state=str(data["state"]),
            host_key_fingerprint=str(data.get("host_key_fingerprint", "")),
            host_key=str(data.get("host_key", "")),
            external_ip=str(data.get("external_ip", "")),
            metadata=str(data.get("metadata", "")),
            generation=int(data.get("generation", 0)),
            notice_at=data.get("notice_at"),
            faults=tuple(str(f["kind"]) for f in data.get("faults", ())),
            sandbox=str(data.get("sandbox", "")),
        )


@dataclass(frozen=True)
class ZoneInfo:
    """One emulated zone: slices it has, holds, and whether it is in a stockout now."""

    name: str
    capacity: int
    used: int
    free: int
    stockout: bool
    windows: tuple[dict[str, Any], ...] = ()  # current and future stockouts

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ZoneInfo:
        return cls(
            name=str(data["name"]),
            capacity=int(data["capacity"]),
            used=int(data["used"]),
            free=int(data["free"]),
            stockout=bool(data["stockout"]),
            windows=tuple(data.get("windows", ())),
        )


@dataclass(frozen=True)
class NodeSummary:
    """A node that exists, in any zone (the pod's, or one a client created)."""

    path: str
    name: str
    zone: str
    state: str
    hosts: int
    first_ip: str = ""
    queued_resource: str = ""

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> NodeSummary:
        return cls(
            path=str(data["path"]),
            name=str(data["name"]),
            zone=str(data["zone"]),
            state=str(data["state"]),
            hosts=int(data["hosts"]),
            first_ip=str(data.get("first_ip", "")),
            queued_resource=str(data.get("queued_resource", "")),
        )


@dataclass(frozen=True)
class PodInfo:
    """Parsed ``pod status --json``."""

    run_dir: Path
    pid: int
    tpu_api: str
    project: str
    zone: str
    node_name: str
    node_path: str
    accelerator_type: str
    state: str
    ssh_user: str
    client_key: Path
    known_hosts: Path
    bucket: Path
    hosts: tuple[HostInfo, ...]
    run_id: str = ""
    events: tuple[dict[str, Any], ...] = field(default=())
    rest_api: str = ""  # "127.0.0.1:PORT" of the REST (HTTP/JSON) TPU API
    faithful: bool = False
    metadata_port: int = 0
    preempt_grace: float = DEFAULT_PREEMPT_GRACE
    zones: tuple[ZoneInfo, ...] = ()
    nodes: tuple[NodeSummary, ...] = ()
    queued_resources: tuple[dict[str, Any], ...] = ()  # name, zone, state, initiator, node
    faults: tuple[dict[str, Any], ...] = ()  # API-wide: slow-api, stale-api (with node)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> PodInfo:
        return cls(
            run_dir=Path(data["run_dir"]),
            pid=int(data["pid"]),
            tpu_api=str(data["tpu_api"]),
            project=str(data["project"]),
            zone=str(data["zone"]),
            node_name=str(data["node_name"]),
            node_path=str(data["node_path"]),
            accelerator_type=str(data["accelerator_type"]),
            state=str(data["state"]),
            ssh_user=str(data["ssh_user"]),
            client_key=Path(data["client_key"]),
            known_hosts=Path(data["known_hosts"]),
            bucket=Path(data["bucket"]),
            hosts=tuple(HostInfo.from_json(h) for h in data["hosts"]),
            run_id=str(data.get("run_id", "")),
            events=tuple(data.get("events", ())),
            rest_api=str(data.get("rest_api", "")),
            faithful=bool(data.get("faithful", False)),
            metadata_port=int(data.get("metadata_port", 0)),
            preempt_grace=float(data.get("preempt_grace", DEFAULT_PREEMPT_GRACE)),
            zones=tuple(ZoneInfo.from_json(z) for z in data.get("zones", ())),
            nodes=tuple(NodeSummary.from_json(n) for n in data.get("nodes", ())),
            queued_resources=tuple(data.get("queued_resources", ())),
            faults=tuple(data.get("faults", ())),
        )

    @property
    def rest_endpoint(self) -> str:
        """What ``CLOUDSDK_API_ENDPOINT_OVERRIDES_TPU`` (or a REST client) points at."""
        return f"http://{self.rest_api}/"

    def zone_info(self, name: str) -> ZoneInfo:
        for z in self.zones:
            if z.name == name:
                return z
        raise PodUsageError(
            f"unknown zone {name!r}: the emulator has {[z.name for z in self.zones]}"
        )

    def gcloud_env(self, config_dir: Path | str) -> dict[str, str]:
        """Environment for the real ``gcloud`` against this emulator, loopback only.

        ``config_dir`` is a throwaway CLOUDSDK_CONFIG. gcloud's "am I on GCE?" probe
        resolves metadata.google.internal through DNS unless its cache says no: the
        cache is written here and GCE_METADATA_ROOT points at loopback as well.
        """
        cfg = Path(config_dir)
        cfg.mkdir(parents=True, exist_ok=True)
        (cfg / "gce").write_text("False")
        return {
            "CLOUDSDK_CONFIG": str(cfg),
            "CLOUDSDK_API_ENDPOINT_OVERRIDES_TPU": self.rest_endpoint,
            "CLOUDSDK_AUTH_DISABLE_CREDENTIALS": "true",
            "CLOUDSDK_CORE_PROJECT": self.project,
            "CLOUDSDK_COMPUTE_ZONE": self.zone,
            "CLOUDSDK_CORE_DISABLE_PROMPTS": "1",
            "CLOUDSDK_CORE_DISABLE_USAGE_REPORTING": "true",
            "CLOUDSDK_COMPONENT_MANAGER_DISABLE_UPDATE_CHECK": "true",
            "CLOUDSDK_SURVEY_DISABLE_PROMPTS": "true",
            "CLOUDSDK_CORE_CHECK_GCE_METADATA": "false",
            "GCE_METADATA_ROOT": self.rest_api,
            "GCE_METADATA_HOST": self.rest_api,
            "NO_GCE_CHECK": "True",
        }

    @property
    def parent(self) -> str:
        return f"projects/{self.project}/locations/{self.zone}"

    @property
    def bucket_uri(self) -> str:
        """fsspec URI of the bucket directory (the emulator's stand-in for gs://)."""
        return self.bucket.as_uri()

    @property
    def ssh_port(self) -> int:
        return self.hosts[0].ssh_port

    def host(self, ref: int | str) -> HostInfo:
        """A host by index, name, IP or external IP."""
        for h in self.hosts:
            if str(ref) in (str(h.index), h.name, h.ip) or (
                h.external_ip and str(ref) == h.external_ip
            ):
                return h
        raise PodUsageError(f"unknown host {ref!r}: the pod has {[h.name for h in self.hosts]}")

    def ssh_options(self) -> list[str]:
        """OpenSSH ``-o`` options for strict, non-interactive access to any host."""
        return [
            "-i",
            str(self.client_key),
            "-o",
            f"UserKnownHostsFile={self.known_hosts}",
            "-o",
            "StrictHostKeyChecking=yes",
            "-o",
            "BatchMode=yes",
            "-o",
            "IdentitiesOnly=yes",
            "-o",
            "GlobalKnownHostsFile=/dev/null",
            "-o",
            "ConnectTimeout=10",
            "-o",
            "LogLevel=ERROR",
            "-F",
            "/dev/null",
        ]

    def address(self, host: int | str, external: bool = False) -> str:
        """``host``'s internal IP, or its external one (GCP-faithful mode only)."""
        h = self.host(host)
        if not external:
            return h.ip
        if not h.external_ip:
            raise PodUsageError(
                f"{h.name} has no external IP: start the pod with --faithful "
                "(and create nodes with network_config.enable_external_ips)"
            )
        return h.external_ip

    def asyncssh_options(self, host: int | str, external: bool = False) -> dict[str, Any]:
        """Keyword arguments for ``asyncssh.connect`` to ``host`` (strict host keys)."""
        h = self.host(host)
        return {
            "host": self.address(host, external),
            "port": h.ssh_port,
            "username": self.ssh_user,
            "client_keys": [str(self.client_key)],
            "known_hosts": str(self.known_hosts),
            "config": [],
        }

    def ssh_argv(
        self,
        host: int | str,
        command: str,
        ssh: str = "/usr/bin/ssh",
        external: bool = False,
    ) -> list[str]:
        """argv running ``command`` on ``host`` with the OpenSSH client."""
        h = self.host(host)
        return [
            ssh,
            *self.ssh_options(),
            "-p",
            str(h.ssh_port),
            f"{self.ssh_user}@{self.address(host, external)}",
            command,
        ]
