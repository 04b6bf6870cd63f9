"""Slices of the config that several services share, built once by the wiring.

The services never hold the whole ``Config``: each one takes the small frozen slice it reads,
and ``console.wiring.settings`` builds every slice once from the config, deriving there what
used to be derived again in each service (a poll's budget, its retry waits). A slice only one
service reads lives beside that service (the TPU VM backend's, the ledger's, the facade's).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Polling:
    """How often the console looks at the cluster, and every wait derived from that interval
    (``recovery.poll_interval_s``); the wiring's ``polling`` computes them."""

    interval_s: float
    """Between polls of the pod, the jobs and metric cadence."""
    budget_s: float
    """What one poll may take before a hung layer is reported unknown (about two intervals)."""
    retry_s: float
    """A quick retry's first wait (a step, a drain, a capacity check): at most 1 s."""
    brief_s: float
    """A short wait for something about to change (a lease, a tunnel's first backoff)."""
    node_wait_s: float
    """Between checks that a Ray node registered (each one adds to an MTTR)."""
    wake_s: float
    """The longest a watch-driven poller sleeps before it looks anyway (GKE's node cache)."""
    alive_s: float
    """/healthz turns 503 when no poll has finished for this long."""
    client_s: float
    """A front end's wait between reads while it waits for a state (script, MCP)."""
    lost_grace_s: float
    """How long a front end lets a host or job look lost before it believes it."""


@dataclass(frozen=True)
class ClusterIdentity:
    """Which cluster the services drive, as surfaces name it."""

    provider: str
    """"local", "gcp" or "gke" (what messages name; behaviour asks a capability)."""
    node_name: str
    accelerator_type: str
    zone: str
    hosts: int
    """The hosts the config asks for (`cluster.hosts`)."""
    gke: bool = False
    emulated: bool = False
    """An emulator on this machine (the pod one, or GKE without a kubeconfig)."""
    name: str = ""
    """The cluster's name in its fleet (``config.fleet``): what every surface calls it."""
    location: str = ""
    """Where it runs: a pod's zone, a GKE cluster's location (region or zone)."""
    world: str = ""
    """What kind of cluster it is, in words: its backend's ``WORLD`` ("TPU VM pod + Ray",
    "GKE + JobSets"); the TUI's header names it beside the name."""

    @property
    def words(self) -> str:
        """How a message names it: ``cluster 'pod-b' (gke)`` (``named``)."""
        return named(self.name, self.provider)


def named(name: str, provider: str) -> str:
    """A cluster as every refusal and error names it: ``cluster 'pod-b' (gke)``, so a fleet's
    message says which of its clusters it means, and of what kind; ``provider 'gke'`` for
    one with no name yet."""
    return f"cluster {name!r} ({provider})" if name else f"provider {provider!r}"
