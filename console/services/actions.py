"""What the facade does to the cluster on a front end's behalf: bring-up, Ray, the tunnel,
chaos on an emulator, and GKE workloads. One cluster-changing action at a time (a running
recovery finishes first, and no automatic recovery starts meanwhile); every result is
journaled through the sink, as the user's, the script's or the watchdog's.

``ClusterActions`` is the facade's base: it is handed the parts it acts through
(``__init__``); ``Facade`` composes them and adds polling, observing, jobs and recovery.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING

from console.config import RecoveryConfig
from console.services.backends.base import (
    AsksForCheckpoints,
    Backend,
    Chaos,
    PodActions,
    SliceChaos,
    Workloads,
)
from console.services.capabilities import Capability, refusal
from console.services.jobs.workload import WorkloadPreview, WorkloadSpec
from console.services.model import ActionResult, JobInfo
from console.services.model.bus import UpdateBus
from console.services.settings import ClusterIdentity

if TYPE_CHECKING:
    from console.services.record.journal import Journal
    from console.services.record.lease import PodLeases
    from console.services.record.sink import EventSink
    from console.services.recovery.watchdog import Watchdog


class ClusterActions:
    def __init__(
        self,
        *,
        cluster: ClusterIdentity,
        recovery: RecoveryConfig,
        backend: Backend,
        chaos: Chaos | None,
        bus: UpdateBus,
        sink: EventSink,
        journal: Journal,
        leases: PodLeases,
        watchdog: Watchdog,
    ) -> None:
        self.cluster = cluster
        self.recovery = recovery
        self.backend = backend
        self.chaos = chaos
        self.bus = bus
        self.sink = sink
        self.journal = journal
        self.leases = leases
        self.watchdog = watchdog
        self._action_lock = asyncio.Lock()

    # -- cluster actions ------------------------------------------------------------------------
    @contextlib.asynccontextmanager
    async def _user_action(self) -> AsyncIterator[PodActions]:
        """One cluster-changing action at a time; a running recovery finishes first, and
        no auto recovery starts while the user reshapes the cluster."""
        pod = self._pod_actions()
        async with self._action_lock:
            await self.watchdog.wait_idle()
            with self.watchdog.suspended():
                async with self.leases.actions.hold():
                    yield pod

    def _pod_actions(self) -> PodActions:
        if not isinstance(self.backend, PodActions):
            raise ValueError(
                f"{self.cluster.words} has no TPU VMs or Ray of its own to bring up or tear down"
            )
        return self.backend

    async def _record(self, result: ActionResult, actor: str) -> ActionResult:
        await self.sink.record(result, actor)
        return result

    async def journal_call(self, result: ActionResult, actor: str) -> ActionResult:
        """Journal a front end's own record of a call (an agent's tool call: who, the tool,
        its masked arguments, the outcome), also one refused before any service ran."""
        return await self._record(result, actor)

    async def wait_ready(self, timeout_s: float, actor: str = "user") -> ActionResult:
        async with self._user_action() as pod:
            return await self._record(await pod.wait_ready(timeout_s), actor)

    async def bootstrap(
        self, hosts: Sequence[str] | None = None, actor: str = "user"
    ) -> ActionResult:
        async with self._user_action() as pod:
            return await self._record(await pod.bootstrap(hosts), actor)

    async def ray_up(self, actor: str = "user") -> ActionResult:
        async with self._user_action() as pod:
            res = await pod.ray_up(self.recovery.step_retries)
            if res.ok:
                self.watchdog.arm()
            return await self._record(res, actor)

    async def open_tunnel(self, actor: str = "user") -> ActionResult:
        async with self._user_action() as pod:
            return await self._record(await pod.open_tunnel(), actor)

    async def teardown(self, actor: str = "user") -> ActionResult:
        async with self._user_action() as pod:
            self.watchdog.disarm()
            return await self._record(await pod.teardown(), actor)

    async def trust_host(self, host: str, actor: str = "user") -> ActionResult:
        return await self._record(await self._pod_actions().trust_host(host), actor)

    async def preempt(self, host: str, actor: str = "user") -> ActionResult:
        return await self._record(await self._chaos("preempt").preempt(host), actor)

    async def recreate(self, host: str, actor: str = "user") -> ActionResult:
        return await self._record(await self._chaos("recreate").recreate(host), actor)

    async def preempt_slice(
        self, slice_ref: str, grace_s: float | None = None, actor: str = "user"
    ) -> ActionResult:
        chaos = self.chaos
        if not isinstance(chaos, SliceChaos):
            raise ValueError(
                "preempt-slice is only available on the local GKE emulator (cluster.provider "
                f"= 'gke' with no gke.kubeconfig); {self.cluster.words} is not"
                + (": it has a gke.kubeconfig (a real cluster)" if self.cluster.gke else " one")
            )
        return await self._record(await chaos.preempt_slice(slice_ref, grace_s), actor)

    async def checkpoint(
        self, job: str, actor: str = "user", timeout_s: float = 120.0
    ) -> ActionResult:
        """Ask every running trainer of ``job`` (``"all"``: of every job) for a checkpoint
        now; they train on. Journaled with who asked and what each trainer wrote where."""
        asker: AsksForCheckpoints | None = None
        for part in (self.backend, self.chaos):
            if isinstance(part, AsksForCheckpoints):
                asker = part
                break
        if asker is None:
            raise ValueError(
                f"{refusal('checkpoint', Capability.CHECKPOINT)}; {self.cluster.words} is not one"
            )
        return await self._record(await asker.ask_checkpoint(job, timeout_s), actor)

    def _chaos(self, what: str) -> Chaos:
        if self.chaos is None or not isinstance(self.chaos, Chaos):
            raise ValueError(
                f"{what} is only available with cluster.provider = 'local' (the emulator); "
                f"{self.cluster.words} is not one"
            )
        return self.chaos

    # -- workloads (GKE) ------------------------------------------------------------------------
    def _workloads(self, what: str) -> Workloads:
        if not isinstance(self.backend, Workloads):
            raise ValueError(
                f"{what}: {self.cluster.words} has no workloads; they run on GKE (cluster.provider = 'gke'); submit Ray jobs with `submit`"
            )
        return self.backend

    def preview_workload(self, spec: WorkloadSpec) -> WorkloadPreview:
        return self._workloads("workload preview").preview(spec.checked())

    async def create_workload(self, spec: WorkloadSpec, actor: str = "user") -> JobInfo:
        """Create a workload (JobSet or conversion Job); journaled with its xpk command
        line and links. Raises ``SpecError`` naming the field: nothing is created then."""
        backend = self._workloads("workload create")
        t0 = time.monotonic()
        try:
            preview = backend.preview(spec.checked())
            info = await backend.create_workload(spec, actor)
        except Exception as exc:
            await self._record(
                ActionResult(
                    action="workload_create",
                    ok=False,
                    elapsed_s=time.monotonic() - t0,
                    message=f"workload {spec.name} not created: {exc}",
                    data={"workload": spec.name, "template": spec.template},
                ),
                actor,
            )
            raise
        await self._record(
            ActionResult(
                action="workload_create",
                ok=True,
                elapsed_s=time.monotonic() - t0,
                message=f"created {preview.kind} {spec.name} ({spec.template}, run "
                f"{spec.effective_run_name})",
                data={
                    "workload": spec.name,
                    "template": spec.template,
                    "run_name": spec.effective_run_name,
                    "command_line": preview.command_line,
                    "console_url": preview.console_url,
                    "logs_url": preview.logs_url,
                },
            ),
            actor,
        )
        self.bus.publish(info)
        return info

    async def delete_workload(self, name: str, actor: str = "user") -> ActionResult:
        backend = self._workloads("workload delete")
        t0 = time.monotonic()
        existed = await backend.delete_workload(name)
        return await self._record(
            ActionResult(
                action="workload_delete",
                ok=existed,
                elapsed_s=time.monotonic() - t0,
                message=f"deleted workload {name}" if existed else f"no workload {name!r}",
                data={"workload": name},
            ),
            actor,
        )

    async def describe(self, ref: str) -> str:
        return self.journal.scrub.text(await self._workloads("describe").describe(ref))
