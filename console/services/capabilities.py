"""What a cluster can do, declared once on its backend, and the one table of intents.

A backend declares its ``Capability`` set (``CAPABILITIES`` in its package, light to import);
an emulator's chaos adds its own. The services expose the union as
``ConsoleServices.capabilities``. Every surface that offers an action reads this table and
that set, and never asks which provider it is on: the TUI's key bindings (``check_action``),
the command palette, the host dialog, the workloads screen and the script language
(``ActionDef.needs``). A new action is a row here; a new backend is one declaration.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
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
    Capability.POD_EMULATOR: "the local emulator",
    Capability.GKE_EMULATOR: "the local GKE emulator",
}


@dataclass(frozen=True)
class Intent:
    """Something a user asks for, from a key, the palette or a dialog.

    ``id`` is the app's action name (a binding's ``app.<id>``); ``needs`` the capability
    without which no surface offers it; ``confirm`` whether it asks first (it stops or
    kills something); ``per_host`` whether the palette offers it once per host.
    """

    id: str
    label: str
    help: str
    needs: Capability | None = None
    confirm: bool = False
    per_host: bool = False


INTENTS: tuple[Intent, ...] = (
    Intent("recover", "Recover now", "Run the whole recovery loop (asks to confirm)",
           Capability.RECOVER, confirm=True),
    Intent("toggle_auto", "Toggle auto-recovery", "Watchdog recovers on its own / only on r",
           Capability.RECOVER),
    Intent("refresh_pod", "Refresh now", "Poll every layer of the cluster now"),
    Intent("submit_form", "Submit", "Open the form for new work on this cluster"),
    Intent("show_ledger", "Ledger: goodput and cost",
           "Where the pod's time and money went: goodput, badput by cause, spot vs on-demand"),
    Intent("bring_up", "Bring up",
           "Bootstrap every host, start the Ray head, join the workers, open the tunnel",
           Capability.VMS),
    Intent("ray_up", "Restart Ray",
           "Start the head and join every worker; restarts Ray (asks to confirm)",
           Capability.RAY, confirm=True),
    Intent("teardown", "Teardown: ray stop everywhere, close tunnel",
           "Stops Ray on every host and closes the tunnel; VMs stay (asks to confirm)",
           Capability.RAY, confirm=True),
    Intent("open_tunnel", "Re-open tunnel", "Re-open the SSH tunnel to the Ray dashboard",
           Capability.TUNNEL),
    Intent("open_dashboard", "Open dashboard URL",
           "Open the Ray dashboard in a browser (also shown as a notification)",
           Capability.TUNNEL),
    Intent("relaunch_sweep", "Relaunch sweep", "Relaunch sweep agents with the same sweep id",
           Capability.RAY_JOBS),
    Intent("bootstrap", "Re-bootstrap host", "Run the bootstrap command again on this host only",
           Capability.HOSTS, per_host=True),
    Intent("preempt", "Preempt host (emulator)",
           "Kill the emulated host like a spot reclaim (asks to confirm)",
           Capability.POD_EMULATOR, confirm=True, per_host=True),
    Intent("recreate", "Recreate host (emulator)",
           "Bring the emulated host back, bare (asks to confirm)",
           Capability.POD_EMULATOR, confirm=True, per_host=True),
    Intent("workload_logs", "Workload logs", "Follow the selected workload's or pod's log",
           Capability.WORKLOADS),
    Intent("delete_workload", "Delete workload",
           "Delete the selected workload and its Secret (asks to confirm)",
           Capability.WORKLOADS, confirm=True),
    Intent("preempt_slice", "Preempt slice (emulator)",
           "Reclaim the selected workload's TPU slice as GKE does (asks to confirm)",
           Capability.GKE_EMULATOR, confirm=True),
)  # fmt: skip

BY_ID: dict[str, Intent] = {i.id: i for i in INTENTS}


def can(intent_id: str, capabilities: Iterable[Capability]) -> bool:
    """Whether a cluster with ``capabilities`` offers the intent (unknown ids: yes, they are
    not the cluster's to refuse: quit, help, switching screens)."""
    intent = BY_ID.get(intent_id)
    return intent is None or intent.needs is None or intent.needs in set(capabilities)


def offered(capabilities: Iterable[Capability]) -> list[Intent]:
    """The intents a cluster with ``capabilities`` offers, in table order."""
    have = set(capabilities)
    return [i for i in INTENTS if i.needs is None or i.needs in have]


def refusal(action: str, need: Capability) -> str:
    """The words for an action a cluster cannot do."""
    return f"{action}: only for {WHERE[need]}"
