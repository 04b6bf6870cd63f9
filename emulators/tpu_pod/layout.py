"""Names, addresses and run-directory layout of the emulated pod.

Stdlib only: imported by the thin client (tests, console, scripts) as well as
by the daemon, so it must stay cheap to import.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from emulators.kit.layout import ControlledLayout
from emulators.kit.layout import default_run_dir as _kit_run_dir

DEFAULT_HOSTS = 4
MAX_HOSTS = 1024  # a v4-4096 slice has 1,024 hosts
DEFAULT_SSH_PORT = 2222
DEFAULT_READY_DELAY = 2.0
DEFAULT_PROJECT = "phantom-local"
DEFAULT_ZONE = "local-a"
DEFAULT_ZONES = ("local-a", "local-b", "local-c")
DEFAULT_CAPACITY = 1  # slices per zone
DEFAULT_PREEMPT_GRACE = 30.0  # seconds, as a Compute Engine spot VM's notice
DEFAULT_NODE_NAME = "phantom-pod"
DEFAULT_ACCELERATOR_TYPE = "v4-32"
SSH_USER = "phantom"

# Loopback address plan (all of 127.0.0.0/8 is local on Linux):
#   127.<Z>.<slot * BLOCKS_PER_SLOT + i // 200>.<10 + i % 200>        internal IP
#   127.<100 + Z>.<same>.<same>                                        external IP
# Z = the zone's position in the zone list, slot = which of the zone's slices the node
# holds, i = worker index. Zone 0, slot 0 is today's 127.0.0.(10+i) for up to 200 hosts.
FIRST_HOST_OCTET = 10
HOSTS_PER_BLOCK = 200
BLOCKS_PER_SLOT = -(-MAX_HOSTS // HOSTS_PER_BLOCK)
MAX_SLOTS = 256 // BLOCKS_PER_SLOT  # slices per zone the address plan can hold
EXTERNAL_OCTET = 100
MAX_ZONES = EXTERNAL_OCTET

# Environment variable every process of an emulated host inherits. Its value is
# "<run_id>:<host name>:<generation>"; preempt/down scan /proc/*/environ for it.
MARKER_ENV = "_PHANTOM_POD_MARKER"


def default_run_dir() -> Path:
    return _kit_run_dir("pod")


def host_ip(index: int, zone: int = 0, slot: int = 0, external: bool = False) -> str:
    """Worker ``index``'s address in zone number ``zone``, slice ``slot`` (see the plan above)."""
    block, offset = divmod(index, HOSTS_PER_BLOCK)
    second = zone + (EXTERNAL_OCTET if external else 0)
    return f"127.{second}.{slot * BLOCKS_PER_SLOT + block}.{FIRST_HOST_OCTET + offset}"


def host_name(node_name: str, index: int) -> str:
    return f"{node_name}-w{index}"


def node_path(project: str, zone: str, node_name: str) -> str:
    return f"projects/{project}/locations/{zone}/nodes/{node_name}"


@dataclass(frozen=True)
class RunLayout(ControlledLayout):
    """Where everything of one emulator instance lives (log, pid, run id, cgroup and
    control socket from the kit)."""

    CONTROL_PREFIX = "phantom-pod"

    @property
    def client_key(self) -> Path:
        return self.run_dir / "client_key"

    @property
    def known_hosts(self) -> Path:
        return self.run_dir / "known_hosts"

    @property
    def bucket(self) -> Path:
        return self.run_dir / "bucket"

    @property
    def hosts_dir(self) -> Path:
        return self.run_dir / "hosts"

    @property
    def shim_bin(self) -> Path:
        """Commands put first on every host's PATH (the host-scoped ``ray`` wrapper)."""
        return self.run_dir / "bin"

    def sandbox(self, name: str) -> Path:
        return self.hosts_dir / name / "home"


def resolve_host_ref(
    ref: str, node_name: str, n_hosts: int, ips: list[tuple[str, ...]] | None = None
) -> int:
    """Map an index ("2"), a name ("phantom-pod-w2") or an IP to a host index.

    ``ips[i]`` are worker i's addresses (default: zone 0, slot 0, internal).
    Raises ValueError with a message naming the allowed forms.
    """
    ref = ref.strip()
    addresses = ips if ips is not None else [(host_ip(i),) for i in range(n_hosts)]
    if ref.isdigit() and int(ref) < n_hosts:
        return int(ref)
    for i in range(n_hosts):
        if ref == host_name(node_name, i) or ref in addresses[i]:
            return i
    last = n_hosts - 1
    raise ValueError(
        f"unknown host {ref!r}: use an index 0..{last}, a name like "
        f"{host_name(node_name, 0)!r}..{host_name(node_name, last)!r}, "
        f"an IP {addresses[0][0]}..{addresses[last][0]}, or 'all'"
    )
