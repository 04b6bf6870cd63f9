"""Names, addresses and run-directory layout of the emulated pod.

Stdlib only: imported by the thin client (tests, console, scripts) as well as
by the daemon, so it must stay cheap to import.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

DEFAULT_HOSTS = 4
MAX_HOSTS = 200  # 127.0.0.10 .. 127.0.0.209 stay inside one /24
DEFAULT_SSH_PORT = 2222
DEFAULT_READY_DELAY = 2.0
DEFAULT_PROJECT = "phantom-local"
DEFAULT_ZONE = "local-a"
DEFAULT_NODE_NAME = "phantom-pod"
DEFAULT_ACCELERATOR_TYPE = "v4-32"
SSH_USER = "phantom"
FIRST_HOST_OCTET = 10

# Environment variable every process of an emulated host inherits. Its value is
# "<run_id>:<host name>:<generation>"; preempt/down scan /proc/*/environ for it.
MARKER_ENV = "_PHANTOM_POD_MARKER"


def default_run_dir() -> Path:
    state_home = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state_home) / "phantom" / "pod"


def host_ip(index: int) -> str:
    return f"127.0.0.{FIRST_HOST_OCTET + index}"


def host_name(node_name: str, index: int) -> str:
    return f"{node_name}-w{index}"


def node_path(project: str, zone: str, node_name: str) -> str:
    return f"projects/{project}/locations/{zone}/nodes/{node_name}"


@dataclass(frozen=True)
class RunLayout:
    """Where everything of one emulator instance lives."""

    run_dir: Path

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
    def log_file(self) -> Path:
        return self.run_dir / "daemon.log"

    @property
    def pid_file(self) -> Path:
        return self.run_dir / "daemon.pid"

    @property
    def run_id_file(self) -> Path:
        return self.run_dir / "run_id"

    @property
    def cgroup_file(self) -> Path:
        """Holds the run's cgroup directory while the daemon uses one."""
        return self.run_dir / "cgroup"

    @property
    def shim_bin(self) -> Path:
        """Commands put first on every host's PATH (the host-scoped ``ray`` wrapper)."""
        return self.run_dir / "bin"

    def sandbox(self, name: str) -> Path:
        return self.hosts_dir / name / "home"

    @property
    def control_address(self) -> str:
        """Abstract unix socket name for the control channel.

        Abstract (leading NUL) so deep pytest tmp dirs never hit the 108-byte
        sun_path limit; derived from the resolved run dir so exactly one daemon
        can own a run dir.
        """
        digest = hashlib.sha256(str(self.run_dir.resolve()).encode()).hexdigest()[:24]
        return f"\0phantom-pod-{digest}"


def resolve_host_ref(ref: str, node_name: str, n_hosts: int) -> int:
    """Map an index ("2"), a name ("phantom-pod-w2") or an IP to a host index.

    Raises ValueError with a message naming the allowed forms.
    """
    ref = ref.strip()
    if ref.isdigit() and int(ref) < n_hosts:
        return int(ref)
    for i in range(n_hosts):
        if ref in (host_name(node_name, i), host_ip(i)):
            return i
    last = n_hosts - 1
    raise ValueError(
        f"unknown host {ref!r}: use an index 0..{last}, a name like "
        f"{host_name(node_name, 0)!r}..{host_name(node_name, last)!r}, "
        f"an IP {host_ip(0)}..{host_ip(last)}, or 'all'"
    )
