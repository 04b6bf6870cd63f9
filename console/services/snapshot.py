"""Observation + Diagnosis -> the ``PodSnapshot`` both front ends show (pure).

The words come from ``recovery.diagnosis`` (the one place they are made); this only lays
the observation out as rows.
"""

from __future__ import annotations

from console.services.model import HostState, HostStatus, PodSnapshot, RayState, Reachability
from console.services.observation import HostObservation, Observation
from console.services.recovery.classify import Diagnosis
from console.services.recovery.diagnosis import warnings


def pod_snapshot(
    obs: Observation,
    diag: Diagnosis,
    *,
    provider: str,
    node_name: str,
    ray_expected: bool,
) -> PodSnapshot:
    return PodSnapshot(
        at=obs.at,
        provider=provider,
        node_name=node_name,
        accelerator_type=obs.accelerator_type,
        tpu_state=obs.node_state,
        health=obs.health,
        hosts=tuple(_row(h, obs.ray_reachable) for h in obs.hosts),
        tunnel_up=bool(obs.tunnel_up),
        dashboard_url=obs.dashboard_url,
        warnings=warnings(obs, diag, ray_expected=ray_expected),
        pods=obs.pods,
        workloads=obs.workloads,
        zone=obs.zone,
    )


def _row(h: HostObservation, ray_reachable: bool) -> HostStatus:
    ray_state = RayState.NONE
    if ray_reachable and h.ray_alive:
        ray_state = RayState.ALIVE
    elif ray_reachable and h.ray_known:
        ray_state = RayState.DEAD
    ssh = (
        Reachability.OK
        if h.ssh_ok
        else Reachability.DOWN
        if h.ssh_ok is False
        else Reachability.UNKNOWN
    )
    state = h.tpu_state
    if h.notice_at is not None and state == HostState.READY:
        state = HostState.PREEMPTING  # the API still says READY for the grace period
    return HostStatus(
        index=h.index,
        name=h.name,
        ip=h.ip,
        tpu_state=state,
        health=h.health,
        ray_state=ray_state,
        ray_nodes=h.ray_alive,
        ssh=ssh,
        resources=dict(h.resources),
        last_seen=h.last_seen,
        pool=h.pool,
    )
