"""Names, defaults and the run-directory layout of the emulated GKE cluster.

Stdlib only: imported by the thin client as well as by the daemon.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from emulators.kit.layout import ControlledLayout
from emulators.kit.layout import default_run_dir as _kit_run_dir
from emulators.tpu_pod import accelerators

# A GKE 1.33 build string as `kubectl version` shows it for a GKE control plane.
GIT_VERSION = "v1.33.4-gke.1245000"
KUBELET_VERSION = GIT_VERSION
PROJECT = "phantom-local"
LOCATION = "us-east5"
ZONE = "us-east5-a"
CLUSTER = "phantom-gke"
NAMESPACE = "default"

# v5p-64: topology 2x4x4 = 32 chips, 4 chips per VM -> 8 nodes per slice.
DEFAULT_TPU_TYPE = "v5p-64"
TPU_ACCELERATOR = "tpu-v5p-slice"
TPU_TOPOLOGY = "2x4x4"
TPU_MACHINE_TYPE = "ct5p-hightpu-4t"
CHIPS_PER_NODE = 4
NODES_PER_SLICE = 8
CPU_POOL = "cpu-np"
CPU_MACHINE_TYPE = "n2-standard-32"

DEFAULT_SLICES = 1
MAX_SLICES = 16
MAX_TPU_NODES = 128  # every slice's nodes together (16 v5p-64 slices): one address each

# GKE's view of each TPU generation (xpk's system_characteristics.py): the node label
# cloud.google.com/gke-tpu-accelerator, the machine type of a multi-host slice's VMs (4
# chips each) and its family label.
GKE_TPU = {
    "v4": ("tpu-v4-podslice", "ct4p-hightpu-4t", "ct4p"),
    "v5p": ("tpu-v5p-slice", "ct5p-hightpu-4t", "ct5p"),
    "v5litepod": ("tpu-v5-lite-podslice", "ct5lp-hightpu-4t", "ct5lp"),
    "v6e": ("tpu-v6e-slice", "ct6e-standard-4t", "ct6e"),
}
# A GKE cluster name: 1-40 characters, lower-case letters, digits and hyphens, starting
# with a letter and ending with a letter or digit (what `gcloud container clusters
# create` accepts).
_CLUSTER_NAME = re.compile(r"^[a-z]([-a-z0-9]{0,38}[a-z0-9])?$")


@dataclass(frozen=True)
class SliceShape:
    """One TPU slice as GKE runs it: ``v4-32`` = topology 2x2x4, 16 chips on 4 nodes."""

    tpu_type: str
    accelerator: str  # cloud.google.com/gke-tpu-accelerator
    topology: str  # cloud.google.com/gke-tpu-topology
    machine_type: str
    machine_family: str
    chips_per_node: int
    nodes: int


def slice_shape(tpu_type: str) -> SliceShape:
    """The slice ``tpu_type`` names, from the Cloud TPU table the pod emulator uses
    (``emulators.tpu_pod.accelerators``); ValueError naming the types offered."""
    offered = ", ".join(f"{g}-N" for g in GKE_TPU)
    try:
        shape = accelerators.parse(tpu_type)
    except ValueError:
        shape = None
    if shape is None or shape.generation.name not in GKE_TPU or shape.chips < 4:
        raise ValueError(
            f"{tpu_type[:40]!r} is not a TPU type of a GKE TPU node pool; use {offered} "
            "(e.g. v4-32, v5p-64, v5litepod-16, v6e-16)"
        )
    accel, machine, family = GKE_TPU[shape.generation.name]
    return SliceShape(
        tpu_type,
        accel,
        shape.topology,
        machine,
        family,
        CHIPS_PER_NODE,
        shape.chips // CHIPS_PER_NODE,
    )


def cluster_name_problem(name: str) -> str:
    """ "" for a valid GKE cluster name, else what is wrong with it."""
    if _CLUSTER_NAME.match(name):
        return ""
    return (
        f"{name[:60]!r} is not a GKE cluster name: 1-40 lower-case letters, digits and "
        "hyphens, starting with a letter and ending with a letter or digit"
    )


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


def slice_pool(index: int, cluster: str = CLUSTER) -> str:
    """Node pool name of TPU slice ``index`` (xpk names them ``<cluster>-np-<i>``)."""
    return f"{cluster}-np-{index}"


def context_name(cluster: str = CLUSTER) -> str:
    """The kubeconfig context `gcloud container clusters get-credentials` writes."""
    return f"gke_{PROJECT}_{LOCATION}_{cluster}"


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
