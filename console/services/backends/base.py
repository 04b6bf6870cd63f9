"""The backend seam: what a kind of cluster provides to the rest of the console.

A backend (``tpu_vm``: TPU API + SSH + Ray; ``gke``: Kubernetes JobSets) answers one typed
``Observation`` per poll, runs its jobs (submit, stop, list, follow logs), names its metric
sources and supplies the recovery steps it supports (``recovery.runner.Plan``). The facade,
the recovery runner, the journal and both front ends depend on this module and on
``services.model``, never on a backend's parts. One composition root (``console.wiring``)
builds the backend, real or emulated, from the config.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from console.services.capabilities import Capability
from console.services.jobs.spec import SubmitSpec
from console.services.jobs.workload import WorkloadPreview, WorkloadSpec
from console.services.model import ActionResult, JobInfo, LogLine, LogStreamClosed, Resubmit
from console.services.observation import Observation

if TYPE_CHECKING:
    from console.services.cadence.sources import CadenceSource
    from console.services.recovery.runner import Plan


class Backend(Protocol):
    """What a kind of cluster provides. Every method documents what it raises; anything
    else is a bug."""

    #: What this kind of cluster can do (its package's ``CAPABILITIES``): every surface
    #: offers an action by this, never by the provider's name.
    capabilities: frozenset[Capability]

    @property
    def provider(self) -> str:
        """The config's ``cluster.provider`` ("local", "gcp", "gke")."""

    async def start(self) -> None:
        """Reconnect to what already runs (e.g. re-open the tunnel to a live head)."""

    async def close(self) -> None:
        """Close connections; the cluster itself keeps running."""

    def set_wakeup(self, wake: Callable[[], None]) -> None:
        """``wake()`` asks for an observation now: the backend calls it when it hears of a
        change between polls (a preemption notice, a dropped connection), so detection does
        not wait for the next poll."""

    async def observe(self) -> Observation:
        """Every layer now, each bounded by the poll budget (a silent layer is reported in
        ``error`` / as unknown, never raised)."""

    def recovery_plan(self, resubmit: Resubmit) -> Plan:
        """The recovery steps this backend supports, bound to its parts. ``resubmit``
        submits jobs lost with the cluster again (the console's job registry)."""

    def cadence_sources(self) -> list[CadenceSource]:
        """Where this backend's runs log their metrics (W&B files, the W&B API, ...)."""

    async def submit(self, spec: SubmitSpec) -> JobInfo:
        """Submit a job. Raises ``JobsUnavailable`` (no way to reach the jobs API) or the
        backend's job error naming what and how to fix it."""

    async def list_jobs(self) -> list[JobInfo]:
        """Every job the cluster knows. Raises ``JobsUnavailable``."""

    async def job_status(self, job_id: str) -> JobInfo:
        """One job. Raises ``JobsUnavailable`` or the backend's unknown-job error."""

    async def stop_job(self, job_id: str) -> bool:
        """Ask the job to stop; False when it was not running. Raises like ``job_status``."""

    def follow_logs(self, job_id: str) -> AsyncIterator[LogLine | LogStreamClosed]:
        """The job's log from its start, live, ending with a ``LogStreamClosed``."""

    async def job_logs(self, job_id: str) -> str:
        """The job's whole log so far. Raises like ``job_status``."""


@runtime_checkable
class HearsBetweenPolls(Protocol):
    """A backend that hears hard news between polls (a preemption notice, the provider
    calling a VM lost) and lays it over an observation without a round trip, so that the
    facade journals it at once rather than after the poll in flight (seconds on a pod of a
    thousand hosts)."""

    @property
    def news_count(self) -> int:
        """Grows with every piece of news heard: the facade feeds each once."""

    def with_news(self, obs: Observation, at: float | None = None) -> Observation:
        """``obs`` with the news it does not hold yet (no I/O), ``obs`` itself when none
        applies; the copy is taken at ``at`` when given (made now, not by a poll)."""


@runtime_checkable
class PodActions(Protocol):
    """Bring-up and teardown of a cluster the console forms itself (TPU VMs + Ray)."""

    async def wait_ready(self, timeout_s: float) -> ActionResult: ...

    async def bootstrap(self, hosts: Sequence[str] | None) -> ActionResult: ...

    async def ray_up(self, retries: int) -> ActionResult: ...

    async def open_tunnel(self) -> ActionResult: ...

    async def teardown(self) -> ActionResult: ...

    async def trust_host(self, host: str) -> ActionResult: ...

    def resolve_host(self, host: str) -> str:
        """A host reference (name, short name, index, IP) -> its name; ValueError if unknown."""


@runtime_checkable
class AsksForCheckpoints(Protocol):
    """A cluster whose trainers can be asked for a checkpoint now (they train on): the
    engine's ``CheckpointAsk`` on a TPU VM pod, a workload that takes the ask on the GKE
    emulator."""

    async def ask_checkpoint(self, job: str, timeout_s: float) -> ActionResult:
        """Ask every running trainer of ``job`` (``"all"``: of every job) and wait, at most
        ``timeout_s``, for each one's checkpoint. The result names each trainer's host, run,
        step and checkpoint URI (``data["checkpoints"]``); not ok when no trainer took the
        ask or one did not answer in time. Raises ValueError naming why it cannot ask."""
        ...


@runtime_checkable
class Chaos(Protocol):
    """Preempt and recreate on command: only an emulated cluster offers it."""

    capabilities: frozenset[Capability]  # what the emulator adds (its backend's ``EMULATED``)

    async def preempt(self, host: str) -> ActionResult: ...

    async def recreate(self, host: str) -> ActionResult: ...


@runtime_checkable
class Workloads(Protocol):
    """Workloads a cluster runs from a ``WorkloadSpec``: GKE JobSets (xpk's standard and
    Pathways templates) and the conversion Job. Their status, logs and stop go through the
    ``Backend`` job methods (a workload's job id is its name)."""

    def preview(self, spec: WorkloadSpec) -> WorkloadPreview:
        """The manifest, the equivalent xpk command line and the Cloud Console links (no I/O).
        Raises ``SpecError`` for an invalid spec."""

    async def create_workload(self, spec: WorkloadSpec, actor: str) -> JobInfo:
        """Create it (its Secret first, if it has ``$NAME`` values). Raises ``SpecError``
        naming the field (invalid spec, missing checkpoint, unset secret variable, a manifest
        the API server refuses, a name in use): nothing is created then."""

    async def delete_workload(self, name: str) -> bool:
        """Delete it and its Secret (`xpk workload delete`); False if it did not exist."""

    async def describe(self, ref: str) -> str:
        """A pod, workload or node as YAML, with its recent events (`kubectl describe`).
        Raises ``UnknownJob`` if there is no such object."""


@runtime_checkable
class SliceChaos(Protocol):
    """Preempt a whole TPU slice, as GKE reclaims spot capacity: only the emulator."""

    capabilities: frozenset[Capability]  # what the emulator adds (its backend's ``EMULATED``)

    async def preempt_slice(self, slice_ref: str, grace_s: float | None) -> ActionResult: ...
