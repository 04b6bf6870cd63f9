"""``GkeAccess``: how the console reaches one GKE cluster, real or emulated.

Decided by the composition root (``console.wiring``, with ``console.wiring.gke`` for the
emulator) and never by a check of the provider inside the backend.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from console.services.backends.gke.manifests import ClusterRef


@dataclass(frozen=True)
class GkeAccess:
    kubeconfig: str  # the file kubernetes-asyncio loads
    ref: ClusterRef  # project / location / cluster / namespace (links, the xpk line)
    context: str = ""  # "" = the kubeconfig's current context
    gcs_root: Path | None = None  # emulator: gs://B/P is gcs_root/B/P on this machine
    accelerator: str = ""  # what the overview shows, e.g. "v5p-64 (2x4x4)"
    metrics_lag_s: float = 30.0  # TensorBoard writers' flush delay (stall threshold)
    capacity_wait_s: float = 120.0  # unschedulable longer than this: a capacity stall
    poll_budget_s: float = 10.0  # how long a first observation waits for the caches
