"""The one service interface both front ends drive: the Textual app and ``--script``.

``services.facade.Facade`` implements it over any backend (``console.wiring`` builds it);
tests of the TUI use a fake built on the same published data model. Every intent a key or a
script line can express is one method here, so the two front ends cannot drift. Job logs
arrive scrubbed of secrets, as everything else the services hand out.
Methods are coroutines on the services' event loop; long actions report progress by
publishing ``RecoveryStatus`` / ``Event`` updates on the bus while they run.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from console.config import RecoveryConfig, WandbConfig
from console.services.capabilities import Capability
from console.services.jobs.spec import SubmitSpec
from console.services.jobs.workload import WorkloadPreview, WorkloadSpec
from console.services.ledger.book import LedgerSettings
from console.services.model import (
    ActionResult,
    Event,
    JobInfo,
    LogLine,
    LogStreamClosed,
    PodSnapshot,
    RecoveryStatus,
    RunCadence,
    Update,
)
from console.services.settings import ClusterIdentity, Polling


@dataclass(frozen=True)
class ServiceSettings:
    """The services' slice of the config, built once by the wiring (``console.wiring.settings``);
    the facade reads it, and front ends read what they start a form or a link from."""

    cluster: ClusterIdentity
    polling: Polling
    recovery: RecoveryConfig
    ledger: LedgerSettings
    wandb: WandbConfig
    """Where runs log: a sweep's link on the W&B server."""
    runtime_env: Mapping[str, Any]
    """``[runtime_env]``: a submitted job's default."""
    workload: WorkloadSpec
    """``[gke]``'s workload defaults (unnamed): a workload's form starts from them."""
    dashboard_port: int
    """The local end of the tunnel to Ray's dashboard."""


@dataclass(frozen=True)
class UnbuiltServices:
    """The services a front end is handed before they exist, as the composition root decides
    them: a script is checked whole before anything runs, and builds them only at its first
    step that needs the cluster. What the front end reads before that (the settings, the
    cluster's capabilities, the words naming what the config drives) is known here."""

    settings: ServiceSettings
    capabilities: frozenset[Capability]
    drives: Callable[[], str]
    """E.g. "cluster 'pod-a' of phantom.toml is provider 'local'": a refusal ends with it (a
    fleet's names which of its clusters)."""
    build: Callable[[], ConsoleServices]
    """The services themselves (``ValueError``/``ConfigError`` naming the setting to fix)."""


class ConsoleServices(Protocol):
    @property
    def settings(self) -> ServiceSettings:
        """The services' slice of the config (never the whole ``Config``)."""

    #: What the cluster can do (its backend's declaration, plus an emulator's verbs): every
    #: surface offers a command by this (``Command.refusal``), never by the provider.
    capabilities: frozenset[Capability]

    # lifecycle -----------------------------------------------------------------------------
    async def start(self) -> None:
        """Start pollers (pod, Ray, jobs, cadence) and the watchdog; returns quickly."""

    async def stop(self) -> None:
        """Stop pollers and close connections (the cluster itself keeps running)."""

    def subscribe(self, callback: Callable[[Update], None]) -> Callable[[], None]:
        """Receive every published update; returns an unsubscribe function."""

    # state ---------------------------------------------------------------------------------
    def snapshot(self) -> PodSnapshot:
        """The latest pod snapshot (no I/O)."""

    async def refresh(self) -> PodSnapshot:
        """Poll every layer now and publish the result."""

    def recovery_status(self) -> RecoveryStatus: ...

    def cadence(self) -> list[RunCadence]:
        """The pollers' latest cadence per run (no I/O; empty before they run)."""

    async def cadence_now(self, deadline_s: float | None = None) -> list[RunCadence]:
        """Cadence as of now, for one-shot snapshots: read at call time when the pollers are
        not running; a source that does not answer within ``deadline_s`` (default
        ``recovery.cadence_deadline_s``) is marked stale, not waited for."""

    async def events(self, limit: int = 500, kinds: Sequence[str] | None = None) -> list[Event]:
        """Journal rows, newest last."""

    # actions (actor = "user", "script", "watchdog") ------------------------------------------
    async def journal_call(self, result: ActionResult, actor: str) -> ActionResult:
        """Journal a front end's record of a call (kind ``action``, by ``actor``)."""

    async def wait_ready(self, timeout_s: float, actor: str = "user") -> ActionResult: ...

    async def bootstrap(
        self, hosts: Sequence[str] | None = None, actor: str = "user"
    ) -> ActionResult: ...

    async def ray_up(self, actor: str = "user") -> ActionResult:
        """Start the head and join every worker (restart if already up)."""

    async def open_tunnel(self, actor: str = "user") -> ActionResult: ...

    async def submit(self, spec: SubmitSpec, actor: str = "user") -> JobInfo: ...

    async def list_jobs(self) -> list[JobInfo]: ...

    async def job_status(self, job_id: str) -> JobInfo:
        """One job. A job this console submitted that the cluster no longer knows (its head
        was replaced) is LOST, not an error. Raises UnknownJob for any other unknown id."""

    def successor(self, job_id: str) -> str:
        """The job that carries on ``job_id`` after resubmissions (itself if none), as
        recorded by whichever front end resubmitted it."""

    async def stop_job(self, job_id: str, actor: str = "user") -> ActionResult: ...

    async def checkpoint(
        self, job: str, actor: str = "user", timeout_s: float = 120.0
    ) -> ActionResult:
        """Ask every running trainer of ``job`` (``"all"``: of every job) for a checkpoint
        now, and wait for them (at most ``timeout_s``); they train on. ValueError naming why
        where the cluster's trainers cannot be asked."""

    def follow_logs(self, job_id: str) -> AsyncIterator[LogLine | LogStreamClosed]: ...

    async def job_logs(self, job_id: str) -> str: ...

    async def recover(self, actor: str = "user", timeout_s: float | None = None) -> RecoveryStatus:
        """Run the whole recovery loop now (or join the one running) and wait for it."""

    def set_auto_recovery(self, enabled: bool, actor: str = "user") -> None: ...

    async def relaunch_sweep(self, actor: str = "user") -> JobInfo: ...

    async def teardown(self, actor: str = "user") -> ActionResult:
        """`ray stop -f` everywhere and close the tunnel (the VMs are left alone)."""

    async def trust_host(self, host: str, actor: str = "user") -> ActionResult:
        """Accept a host's new SSH host key (after a deliberate VM recreate)."""

    # local emulator only: raise ValueError naming the provider on gcp --------------------------
    async def preempt(self, host: str, actor: str = "user") -> ActionResult: ...

    async def recreate(self, host: str, actor: str = "user") -> ActionResult: ...

    async def preempt_slice(
        self, slice_ref: str, grace_s: float | None = None, actor: str = "user"
    ) -> ActionResult:
        """GKE emulator only: preempt a TPU slice (index or node pool) with notice."""

    # GKE workloads: ValueError naming the provider elsewhere ------------------------------------
    def preview_workload(self, spec: WorkloadSpec) -> WorkloadPreview:
        """The manifest, the equivalent xpk command line and the Cloud Console links."""

    async def create_workload(self, spec: WorkloadSpec, actor: str = "user") -> JobInfo:
        """Create a workload; ``SpecError`` naming the field when nothing was created."""

    async def delete_workload(self, name: str, actor: str = "user") -> ActionResult: ...

    async def describe(self, ref: str) -> str:
        """A pod, workload or node as YAML with its events (UnknownJob if none)."""
