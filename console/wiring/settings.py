"""Every service's slice of the config, built here once: the one place that reads the whole
``Config`` for the services, and the one place that derives values from it.

A service takes the small frozen slice it reads (``services.settings.Polling``, the
facade's ``ServiceSettings``, a backend's own) and never the whole config, so following one
setting from ``make_services`` ends here or in the slice that carries it. Derived values (a
poll's budget and waits, the ledger's prices, the workload defaults, the jobs' env) are
computed once, below, and read from the slice everywhere else.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from console.config import Config

if TYPE_CHECKING:
    from console.services.api import ServiceSettings
    from console.services.backends.gke.settings import GkeSettings
    from console.services.backends.tpu_vm.settings import TpuVmSettings
    from console.services.jobs.workload import WorkloadSpec
    from console.services.ledger.book import LedgerSettings
    from console.services.settings import ClusterIdentity, Polling


def polling(config: Config) -> Polling:
    """Every wait derived from ``recovery.poll_interval_s``."""
    from console.services.settings import Polling

    i = config.recovery.poll_interval_s
    return Polling(
        interval_s=i,
        budget_s=max(2.0, 2 * i),  # a poll must finish in about one interval
        retry_s=min(1.0, i),
        brief_s=min(0.5, i),
        node_wait_s=min(0.25, i),
        wake_s=min(5.0, max(0.2, i)),
        alive_s=max(30.0, 6 * i),  # six polls missed (and 30 s): /healthz says 503
        client_s=max(0.2, min(2.0, i)),
        lost_grace_s=max(2.0, 3 * i),
    )


def cluster_identity(config: Config) -> ClusterIdentity:
    from console.config.fleet import default_name
    from console.services.backends import gke, tpu_vm
    from console.services.settings import ClusterIdentity

    cl = config.cluster
    return ClusterIdentity(
        provider=cl.provider,
        node_name=cl.node_name,
        accelerator_type=cl.accelerator_type,
        zone=cl.zone,
        hosts=cl.hosts,
        gke=config.is_gke,
        emulated=config.is_emulated,
        name=config.name or default_name(config),
        location=config.gke.location if config.is_gke else cl.zone,
        world=gke.WORLD if config.is_gke else tpu_vm.WORLD,
    )


def ledger_settings(config: Config) -> LedgerSettings:
    """``[prices]`` over the shipped table for the pod's accelerator and where it runs (a
    GKE cluster's TPU type and location), and its hosts."""
    from console.services.ledger.book import LedgerSettings
    from console.services.ledger.prices import pricing_for

    gke, cl = config.gke, config.cluster
    if config.is_gke:
        accelerator, where = gke.tpu_type, gke.location
    else:
        accelerator, where = cl.accelerator_type, cl.zone
    return LedgerSettings(
        pricing=pricing_for(config.prices, accelerator, where, config.source),
        hosts=max(1, cl.hosts),
    )


def workload_defaults(config: Config) -> WorkloadSpec:
    """``[gke]``'s workload defaults as an unnamed spec (``spec.but(name, ...)`` names one);
    on the GKE emulator, output goes to its bucket unless the config says where."""
    from console.services.jobs.workload import EMULATOR_OUTPUT, WorkloadSpec

    g = config.gke
    return WorkloadSpec(
        name="",
        image=g.image,
        command=g.command,
        tpu_type=g.tpu_type,
        slices=g.slices,
        max_restarts=g.max_restarts,
        spot=g.spot,
        hf_token_env=g.hf_token_env,
        base_output_directory=g.base_output_directory
        or (EMULATOR_OUTPUT if config.is_emulated else ""),
        maxtext_ckpt_path=g.maxtext_ckpt_path,
        termination_grace_s=g.termination_grace_s,
    )


def service_settings(config: Config) -> ServiceSettings:
    """The facade's slice (and what front ends read of the services)."""
    from console.services.api import ServiceSettings

    return ServiceSettings(
        cluster=cluster_identity(config),
        polling=polling(config),
        recovery=config.recovery,
        ledger=ledger_settings(config),
        wandb=config.wandb,
        runtime_env=config.runtime_env,
        workload=workload_defaults(config),
        dashboard_port=config.ray.local_dashboard_port,
    )


def tpu_vm_settings(config: Config, poll: Polling | None = None) -> TpuVmSettings:
    from console.services.backends.tpu_vm.ray import default_bootstrap_command
    from console.services.backends.tpu_vm.settings import TpuVmSettings
    from console.services.jobs.env import console_job_env

    poll = poll or polling(config)
    rec, ssh = config.recovery, config.ssh
    return TpuVmSettings(
        provider=config.cluster.provider,
        accelerator_type=config.cluster.accelerator_type,
        polling=poll,
        ssh=ssh,
        ray=config.ray,
        wandb=config.wandb,
        bootstrap_command=default_bootstrap_command(
            config.bootstrap_command, local=config.is_local
        ),
        # Reachability probes: a short connect timeout, so a poll of a half-dead host costs
        # one interval, not the action fan-out's patient retries.
        probe_connect_s=min(ssh.connect_timeout_s, max(1.0, poll.interval_s)),
        job_env=console_job_env(config.wandb, config.ray.jax_platform),
        watch_notices=rec.watch_notices,
        notice_grace_s=rec.notice_grace_s,
        ready_timeout_s=rec.ready_timeout_s,
    )


def gke_settings(config: Config, poll: Polling | None = None) -> GkeSettings:
    from console.services.backends.gke.settings import GkeSettings

    return GkeSettings(
        provider=config.cluster.provider,
        polling=poll or polling(config),
        ready_timeout_s=config.recovery.ready_timeout_s,
        name=cluster_identity(config).name,
    )
