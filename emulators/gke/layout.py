"""Names, defaults and the run-directory layout of the emulated GKE cluster.

Stdlib only: imported by the thin client as well as by the daemon.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from emulators.kit.layout import ControlledLayout
from emulators.kit.layout import default_run_dir as _kit_run_dir

# A GKE 1.33 build string as `kubectl version` shows it for a GKE control plane.
GIT_VERSION = "v1.33.4-gke.1245000"
KUBELET_VERSION = GIT_VERSION
PROJECT = "phantom-local"
LOCATION = "us-east5"
ZONE = "us-east5-a"
CLUSTER = "phantom-gke"
NAMESPACE = "default"

# v5p-64: topology 2x4x4 = 32 chips, 4 chips per VM -> 8 nodes per slice.
TPU_ACCELERATOR = "tpu-v5p-slice"
TPU_TOPOLOGY = "2x4x4"
TPU_MACHINE_TYPE = "ct5p-hightpu-4t"
CHIPS_PER_NODE = 4
NODES_PER_SLICE = 8
CPU_POOL = "cpu-np"
CPU_MACHINE_TYPE = "n2-standard-32"

DEFAULT_SLICES = 1
MAX_SLICES = 16
DEFAULT_RECREATE_DELAY = 10.0
DEFAULT_SHUTDOWN_GRACE = 30.0  # GKE gives spot nodes' pods up to 30 s on preemption
DEFAULT_LOG_IDLE_TIMEOUT = 4 * 3600.0  # the kubelet's streamingConnectionIdleTimeout
DEFAULT_WATCH_HISTORY = 10_000
DEFAULT_BOOKMARK_INTERVAL = 60.0

# Every container process inherits MARKER_ENV=<run_id>:<node>/<pod uid>/<container>:<instance>
# so `down` and a node shutdown find it in /proc (see emulators.tpu_pod.procs).
MARKER_ENV = "_PHANTOM_POD_MARKER"


def default_run_dir() -> Path:
    return _kit_run_dir("gke")


def slice_pool(index: int) -> str:
    """Node pool name of TPU slice ``index`` (xpk names them ``<cluster>-np-<i>``)."""
    return f"{CLUSTER}-np-{index}"


def context_name() -> str:
    """The kubeconfig context `gcloud container clusters get-credentials` writes."""
    return f"gke_{PROJECT}_{LOCATION}_{CLUSTER}"


@dataclass(frozen=True)
class RunLayout(ControlledLayout):
    """Where everything of one emulated cluster lives (log, pid, run id, cgroup and
    control socket from the kit)."""

    CONTROL_PREFIX = "phantom-gke"

    @property
    def kubeconfig(self) -> Path:
        return self.run_dir / "kubeconfig"

    @property
    def pods_dir(self) -> Path:
        """Per-pod working directories (the container's filesystem stand-in)."""
        return self.run_dir / "pods"

    @property
    def logs_dir(self) -> Path:
        """Container logs, one file per container instance, like /var/log/pods."""
        return self.run_dir / "logs"

    @property
    def bucket(self) -> Path:
        """Stand-in for the gs:// bucket of BASE_OUTPUT_DIRECTORY."""
        return self.run_dir / "bucket"

    @property
    def bin_dir(self) -> Path:
        """Put on every container's PATH: the image's scripts (run_gptoss_20b_rl.sh, ...)."""
        return self.run_dir / "bin"

    @property
    def hosts_file(self) -> Path:
        """Pod DNS records (``dns.py``), read by Python in containers."""
        return self.run_dir / "hosts"
