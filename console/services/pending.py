"""Services that come up behind the first frame: paint first, then reach the cluster.

Building the real services can take seconds (on a fresh machine the local pod emulator is
started; grpc, asyncssh and Ray's job client are imported). ``PendingServices`` stands in
for them from the first frame on: ``start()`` builds the real ones with ``build`` in a
thread, says what it is doing on the bus meanwhile (a snapshot whose warning reads
"starting …", and the build's progress lines), then starts them and hands every subscriber
over. Reads answer from what is known (nothing, at first); actions wait for the build and
then run, so a key pressed in the first second is not lost. A build that fails is shown
as the pod's warning and re-raised by every action, with its message.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Sequence

from console.services.api import ConsoleServices, ServiceSettings
from console.services.capabilities import Capability
from console.services.jobs.spec import SubmitSpec
from console.services.jobs.workload import WorkloadPreview, WorkloadSpec
from console.services.model import (
    ActionResult,
    Event,
    JobInfo,
    LogLine,
    LogStreamClosed,
    PodSnapshot,
    Progress,
    RecoveryStatus,
    RunCadence,
    Update,
    UpdateBus,
)

Report = Callable[[str], None]
Build = Callable[[Report], ConsoleServices]


class PendingServices:
    """``ConsoleServices`` that are still being built; then the real ones, by delegation."""

    def __init__(
        self,
        settings: ServiceSettings,
        build: Build,
        *,
        what: str = "connecting to the cluster",
        capabilities: frozenset[Capability] = frozenset(),
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        # Declared by the backend the build will make (the wiring knows which): the first
        # frame's keys and palette are the cluster's own before the services are up.
        self.capabilities = capabilities
        self._build = build
        self._what = what
        self._clock = clock
        self._bus = UpdateBus()
        self._subs: list[tuple[Callable[[Update], None], list[Callable[[], None]]]] = []
        self._real: ConsoleServices | None = None
        self._error: BaseException | None = None
        self._ready = asyncio.Event()
        self._building: asyncio.Task[None] | None = None
        self._auto: bool | None = None
        self._snapshot = self._note(f"{what}…")

    @property
    def real(self) -> ConsoleServices | None:
        return self._real

    def _note(self, line: str) -> PodSnapshot:
        cl = self.settings.cluster
        return PodSnapshot(
            at=self._clock(),
            provider=cl.provider,
            node_name=cl.node_name,
            accelerator_type=cl.accelerator_type,
            warnings=(line,),
        )

    # lifecycle -----------------------------------------------------------------------------
    async def start(self) -> None:
        if self._building is None:
            self._building = asyncio.create_task(self._build_and_start())
        await asyncio.shield(self._building)

    async def _build_and_start(self) -> None:
        loop = asyncio.get_running_loop()

        def progress(line: str) -> None:  # from the build's thread
            loop.call_soon_threadsafe(self._progress, line)

        try:
            real = await asyncio.to_thread(self._build, progress)
        except Exception as exc:
            self._error = exc
            self._snapshot = self._note(f"cannot reach the cluster: {exc}")
            self._bus.publish(self._snapshot)
            self._ready.set()
            return
        self._real = real
        if self._auto is not None:
            real.set_auto_recovery(self._auto, actor="user")
        for callback, unsubs in self._subs:
            unsubs.append(real.subscribe(callback))
        try:
            await real.start()
        finally:
            self._ready.set()  # actions run on started services (or fail as they would)

    def _progress(self, line: str) -> None:
        self._snapshot = self._note(f"{self._what}: {line}")
        self._bus.publish(self._snapshot)
        self._bus.publish(Progress(at=self._clock(), message=line))

    async def stop(self) -> None:
        if self._building is not None and not self._building.done():
            # The build thread cannot be interrupted; let it finish so nothing it started
            # is left half-made, then stop what it made.
            await asyncio.wait({self._building})
        if self._real is not None:
            await self._real.stop()

    def subscribe(self, callback: Callable[[Update], None]) -> Callable[[], None]:
        unsubs = [self._bus.subscribe(callback)]
        if self._real is not None:
            unsubs.append(self._real.subscribe(callback))
        entry = (callback, unsubs)
        self._subs.append(entry)

        def unsubscribe() -> None:
            for u in unsubs:
                u()
            if entry in self._subs:
                self._subs.remove(entry)

        return unsubscribe

    async def _services(self) -> ConsoleServices:
        await self._ready.wait()
        if self._real is None:
            raise RuntimeError(f"cannot reach the cluster: {self._error}")
        return self._real

    # state ---------------------------------------------------------------------------------
    def snapshot(self) -> PodSnapshot:
        return self._real.snapshot() if self._real is not None else self._snapshot

    async def refresh(self) -> PodSnapshot:
        return await (await self._services()).refresh()

    def recovery_status(self) -> RecoveryStatus:
        if self._real is not None:
            return self._real.recovery_status()
        auto = self._auto if self._auto is not None else self.settings.recovery.auto
        return RecoveryStatus(active=False, auto=auto)

    def cadence(self) -> list[RunCadence]:
        return self._real.cadence() if self._real is not None else []

    async def cadence_now(self, deadline_s: float | None = None) -> list[RunCadence]:
        return await (await self._services()).cadence_now(deadline_s)

    async def events(self, limit: int = 500, kinds: Sequence[str] | None = None) -> list[Event]:
        return await (await self._services()).events(limit, kinds)

    # actions -------------------------------------------------------------------------------
    async def journal_call(self, result: ActionResult, actor: str) -> ActionResult:
        return await (await self._services()).journal_call(result, actor)

    async def wait_ready(self, timeout_s: float, actor: str = "user") -> ActionResult:
        return await (await self._services()).wait_ready(timeout_s, actor)

    async def bootstrap(
        self, hosts: Sequence[str] | None = None, actor: str = "user"
    ) -> ActionResult:
        return await (await self._services()).bootstrap(hosts, actor)

    async def ray_up(self, actor: str = "user") -> ActionResult:
        return await (await self._services()).ray_up(actor)

    async def open_tunnel(self, actor: str = "user") -> ActionResult:
        return await (await self._services()).open_tunnel(actor)

    async def submit(self, spec: SubmitSpec, actor: str = "user") -> JobInfo:
        return await (await self._services()).submit(spec, actor)

    async def list_jobs(self) -> list[JobInfo]:
        return await (await self._services()).list_jobs()

    async def job_status(self, job_id: str) -> JobInfo:
        return await (await self._services()).job_status(job_id)

    def successor(self, job_id: str) -> str:
        return self._real.successor(job_id) if self._real is not None else job_id

    async def stop_job(self, job_id: str, actor: str = "user") -> ActionResult:
        return await (await self._services()).stop_job(job_id, actor)

    async def follow_logs(self, job_id: str) -> AsyncIterator[LogLine | LogStreamClosed]:
        async for item in (await self._services()).follow_logs(job_id):
            yield item

    async def job_logs(self, job_id: str) -> str:
        return await (await self._services()).job_logs(job_id)

    async def recover(self, actor: str = "user", timeout_s: float | None = None) -> RecoveryStatus:
        return await (await self._services()).recover(actor, timeout_s)

    def set_auto_recovery(self, enabled: bool, actor: str = "user") -> None:
        if self._real is not None:
            self._real.set_auto_recovery(enabled, actor)
        else:
            self._auto = enabled  # applied when the real services exist

    async def relaunch_sweep(self, actor: str = "user") -> JobInfo:
        return await (await self._services()).relaunch_sweep(actor)

    async def teardown(self, actor: str = "user") -> ActionResult:
        return await (await self._services()).teardown(actor)

    async def trust_host(self, host: str, actor: str = "user") -> ActionResult:
        return await (await self._services()).trust_host(host, actor)

    async def preempt(self, host: str, actor: str = "user") -> ActionResult:
        return await (await self._services()).preempt(host, actor)

    async def recreate(self, host: str, actor: str = "user") -> ActionResult:
        return await (await self._services()).recreate(host, actor)

    async def preempt_slice(
        self, slice_ref: str, grace_s: float | None = None, actor: str = "user"
    ) -> ActionResult:
        return await (await self._services()).preempt_slice(slice_ref, grace_s, actor)

    # GKE workloads -------------------------------------------------------------------------
    def preview_workload(self, spec: WorkloadSpec) -> WorkloadPreview:
        # No I/O, so it cannot wait for the build: the cluster's names come with it.
        if self._real is None:
            why = f"cannot reach the cluster: {self._error}" if self._error else f"{self._what}…"
            raise ValueError(f"workload preview: {why}; try again once the console is up")
        return self._real.preview_workload(spec)

    async def create_workload(self, spec: WorkloadSpec, actor: str = "user") -> JobInfo:
        return await (await self._services()).create_workload(spec, actor)

    async def delete_workload(self, name: str, actor: str = "user") -> ActionResult:
        return await (await self._services()).delete_workload(name, actor)

    async def describe(self, ref: str) -> str:
        return await (await self._services()).describe(ref)
