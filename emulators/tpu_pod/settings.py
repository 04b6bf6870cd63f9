"""The daemon's configuration (what ``pod up`` flags become) and its start-up error."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from emulators.tpu_pod.layout import (
    DEFAULT_PREEMPT_GRACE,
    DEFAULT_ZONES,
    SSH_USER,
)
from emulators.tpu_pod.zones import Window


class StartupError(Exception):
    """A problem that stops the daemon from starting; exit code 2 for config errors."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code


@dataclass(frozen=True)
class DaemonConfig:
    run_dir: Path
    hosts: int
    ssh_port: int
    api_port: int
    ready_delay: float
    project: str
    zone: str  # where the pod's node is created at start-up
    node_name: str
    accelerator_type: str
    chaos_seed: int | None = None
    chaos_interval: float | None = None
    # GCP-faithful: whole-slice preemption, whole-node Delete/Create only, external IPs.
    faithful: bool = False
    rest_port: int = 0  # the REST (HTTP/JSON) front end of the TPU API; 0 = a free port
    metadata_port: int = 0  # one port on every host address; 0 = one free on all
    zones: tuple[str, ...] = DEFAULT_ZONES
    capacity: dict[str, int] = field(default_factory=dict)  # slices per zone (default 1)
    stockouts: tuple[tuple[str, Window], ...] = ()
    stockout_seed: int | None = None
    stockout_mean: float = 180.0  # mean seeded stockout length, seconds
    preempt_grace: float = DEFAULT_PREEMPT_GRACE  # `preempt --notice` without a value
    chaos_notice: float = 0.0  # chaos preemptions: 0 = abrupt SIGKILL
    chaos_faults: tuple[str, ...] = ()  # fault kinds the chaos schedule may inject too
    ssh_user: str = SSH_USER
    ssh_key: Path | None = None  # a private key whose public half every host accepts
    # GCP-faithful quota per (zone or "" = every zone, family), in the type's units;
    # a family not named gets the zone's capacity in slices of the pod's own type.
    quota: dict[tuple[str, str], int] = field(default_factory=dict)
