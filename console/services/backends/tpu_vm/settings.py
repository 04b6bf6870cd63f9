"""The TPU VM backend's slice of the config, built once by the wiring (its derived values
computed there): the backend and its parts read this, never the whole ``Config``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from console.config import RayConfig, SshConfig, WandbConfig
from console.services.settings import Polling


@dataclass(frozen=True)
class TpuVmSettings:
    provider: str
    """"local" or "gcp" (what the backend's messages and observations name)."""
    accelerator_type: str
    """The slice's type until the TPU API says."""
    polling: Polling
    ssh: SshConfig
    ray: RayConfig
    wandb: WandbConfig
    """Where runs log: cadence reads them there (the access may name the offline dir)."""
    bootstrap_command: str
    """What runs on every worker before Ray starts (the default filled in)."""
    probe_connect_s: float
    """A reachability probe's connect timeout: short, so a half-dead host costs one poll."""
    job_env: Mapping[str, str]
    """The env every submitted job gets by default (before the access's own)."""
    watch_notices: bool
    """Hear each VM's preemption notice (``recovery.watch_notices``)."""
    notice_grace_s: float
    ready_timeout_s: float
    """How long a recreated VM may take to be READY (a recovery's wait)."""
