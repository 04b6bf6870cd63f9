"""What a cluster can do, declared once on its backend.

A backend declares its ``Capability`` set (``CAPABILITIES`` in its package, light to import);
an emulator's chaos adds its own. The services expose the union as
``ConsoleServices.capabilities``. Each command of ``console.commands`` names the
capability it needs; every front end (keys, palette, help, script, MCP) checks a command
against this set (``Command.refusal``), and never asks which provider it is on. A new backend
is one declaration.
"""

from __future__ import annotations

from enum import StrEnum


class Capability(StrEnum):
    """One thing a cluster can do. The words in ``WHERE`` say where it exists, for refusals."""

    HOSTS = "hosts"  # SSH to every host: bootstrap one, trust a new host key
    VMS = "vms"  # TPU VMs the console brings up (bootstrap, Ray, tunnel in one go)
    RAY = "ray"  # a Ray cluster the console starts and stops: ray-up, teardown
    TUNNEL = "tunnel"  # the SSH tunnel to the Ray dashboard and client ports
    RAY_JOBS = "ray-jobs"  # Ray jobs and sweeps: submit, relaunch the sweep
    WORKLOADS = "workloads"  # GKE JobSets: create, delete, describe
    RECOVER = "recover"  # the recovery loop and its watchdog
    CHECKPOINT = "checkpoint"  # ask a job's trainers for a checkpoint now (they train on)
    POD_EMULATOR = "pod-emulator"  # the local pod emulator: pod up/down, preempt/recreate a host
    GKE_EMULATOR = "gke-emulator"  # the local GKE emulator: gke up/down, preempt a slice


# Where each capability exists: the end of "only for ..." when a surface refuses an action.
WHERE: dict[Capability, str] = {
    Capability.HOSTS: "a TPU VM pod (cluster.provider = 'local' or 'gcp')",
    Capability.VMS: "a TPU VM pod (cluster.provider = 'local' or 'gcp')",
    Capability.RAY: "a TPU VM pod with Ray (cluster.provider = 'local' or 'gcp')",
    Capability.TUNNEL: "a TPU VM pod with Ray (cluster.provider = 'local' or 'gcp')",
    Capability.RAY_JOBS: "a TPU VM pod with Ray (cluster.provider = 'local' or 'gcp')",
    Capability.WORKLOADS: "cluster.provider = 'gke'",
    Capability.RECOVER: "a cluster the console recovers",
    Capability.CHECKPOINT: (
        "a cluster whose trainers the console can ask: a TPU VM pod (cluster.provider = "
        "'local' or 'gcp'), or the local GKE emulator; on a real GKE cluster a pod's trainer "
        "cannot be signalled from here (MaxText checkpoints on its own checkpoint_period)"
    ),
    Capability.POD_EMULATOR: "the local emulator",
    Capability.GKE_EMULATOR: "the local GKE emulator",
}


def refusal(action: str, need: Capability) -> str:
    """The words for an action a cluster cannot do."""
    return f"{action}: only for {WHERE[need]}"
