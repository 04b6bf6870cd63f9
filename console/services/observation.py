"""What one poll of a cluster saw, through every layer: the data a backend hands to recovery.

Backends produce it (``Backend.observe``); ``recovery.diagnosis`` reads it; the snapshot both
front ends show is laid out from it. Plain frozen data, no behaviour.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from console.services.model import HostState, JobInfo, PodStatus, WorkloadStatus


@dataclass(frozen=True)
class HostObservation:
    """One host (a TPU VM worker, or a node), seen through every layer in one poll."""

    name: str
    ip: str
    tpu_state: HostState = HostState.UNKNOWN
    health: str = ""
    symptoms: tuple[str, ...] = ()
    ssh_ok: bool | None = None  # None: not probed
    ssh_error: str = ""  # what the probe saw when it failed ("connect timed out after 2s")
    ray_alive: int = 0  # live Ray nodes with this IP
    ray_known: bool = False  # Ray has a record (alive or dead) of a node on this IP
    preempted_at: float | None = None  # the provider's event time, when it reports one
    notice_at: float | None = None  # when the VM's preemption notice was heard
    # what the notice was, when not metadata `preempted`: "maintenance-event
    # TERMINATE_ON_HOST_MAINTENANCE" (a host maintenance that terminates the VM)
    notice_reason: str = ""
    index: int = 0
    last_seen: float | None = None  # last time SSH or Ray saw it alive
    resources: Mapping[str, float] = field(default_factory=dict)
    pool: str = ""  # GKE: the node pool (TPU slice) of a node; "" for a TPU VM host


@dataclass(frozen=True)
class Observation:
    """The cluster as one poll saw it. ``head`` names the host that should run the Ray head
    ("" for a backend without one)."""

    at: float
    hosts: tuple[HostObservation, ...]
    head: str
    ray_reachable: bool = False  # the Ray state API (GCS) answered
    tunnel_up: bool | None = None  # None: no tunnel was ever asked for
    jobs: tuple[JobInfo, ...] = ()  # jobs this console submitted, as the cluster reports them
    stalled_runs: tuple[str, ...] = ()  # metric cadence stalls (run ids)
    run_names: Mapping[str, str] = field(default_factory=dict)  # run id -> display name
    error: str = ""  # a layer that failed to answer, for the message
    node_state: HostState = HostState.UNKNOWN  # the node (slice) as a whole
    health: str = ""
    accelerator_type: str = ""
    zone: str = ""  # where the provider found the node ("" when it has no zones, or none)
    dashboard_url: str = ""
    tunnel_error: str = ""  # why the tunnel is down, when it is
    # The backend reports only the jobs this console submitted (its own registry), so the
    # facade need not filter them through the Ray job registry.
    jobs_owned: bool = False
    # False when the job list could not be read this poll (the tunnel to the head down, the
    # jobs API silent): ``jobs`` is then empty for want of an answer, not because no job
    # runs, and must not replace what is known of the active jobs (a head lost a moment
    # later would leave nothing to resubmit).
    jobs_read: bool = True
    workloads: tuple[WorkloadStatus, ...] = ()  # GKE: JobSets / Jobs
    pods: tuple[PodStatus, ...] = ()  # GKE: the namespace's pods
    # GKE: pods seen failed (by their cause) since the watch began, also those already gone:
    # a JobSet restart deletes a crashed pod within a poll.
    pod_failures: tuple[PodStatus, ...] = ()
    # GKE: how long pods may stay unschedulable before it is a capacity stall, not a wait.
    capacity_wait_s: float = 120.0
    # Hosts whose connection dropped from the far end a moment ago while the provider still
    # calls them READY: a VM being reclaimed, most likely, that the provider calls lost once
    # its processes are gone. Their soft conditions are not confirmed while this lasts (a
    # recovery recreating such a host first would leave no PREEMPTED for a poll to see).
    settling: tuple[str, ...] = ()

    def host(self, name: str) -> HostObservation | None:
        return next((h for h in self.hosts if h.name == name), None)


def layer_silent_text(layer: str, budget_s: float) -> str:
    """What an observation says of a layer that did not answer within the poll's budget (a
    slow or hung API): the backend writes it into the observation's ``error``."""
    return f"{layer} did not answer within {budget_s:g}s"
