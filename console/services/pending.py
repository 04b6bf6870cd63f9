"""Services that come up behind the first frame: paint first, then reach the cluster.

Building the real services can take seconds (on a fresh machine the local pod emulator is
started; grpc, asyncssh and Ray's job client are imported). ``PendingServices`` stands in
for them from the first frame on: ``start()`` builds the real ones with ``build`` in a
thread, says what it is doing on the bus meanwhile (a snapshot whose warning reads
"starting …", and the build's progress lines), then starts them and hands every subscriber
over. Reads answer from what is known (nothing, at first); actions wait for the build and
then run, so a key pressed in the first second is not lost. A build that fails is shown
as the pod's warning and re-raised by every action, with its message.

Every coroutine of ``ConsoleServices`` is forwarded by construction (``_forwarding``): it
waits for the build and calls the real services' method of the same name. What answers
before the build (a snapshot, the recovery status, cadence, a job's successor, a preview)
is written here; a member that is neither is a ``TypeError`` at import, so a method added
to the interface is forwarded, or answered here, or the console does not start.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any, TypeVar

from console.services.api import ConsoleServices, ServiceSettings
from console.services.capabilities import Capability
from console.services.jobs.workload import WorkloadPreview, WorkloadSpec
from console.services.model import (
    LogLine,
    LogStreamClosed,
    PodSnapshot,
    Progress,
    RecoveryStatus,
    RunCadence,
    Update,
)
from console.services.model.bus import UpdateBus

Report = Callable[[str], None]
Build = Callable[[Report], ConsoleServices]
C = TypeVar("C", bound=type)


def _interface() -> dict[str, Any]:
    """The members ``ConsoleServices`` declares: its methods and properties."""
    return {
        name: member
        for name, member in vars(ConsoleServices).items()
        if not name.startswith("_") and (callable(member) or isinstance(member, property))
    }


def _forwarder(name: str) -> Callable[..., Any]:
    async def forward(self: PendingServices, *args: Any, **kwargs: Any) -> Any:
        return await getattr(await self._services(), name)(*args, **kwargs)

    forward.__name__ = forward.__qualname__ = name
    return forward


def _forwarding(cls: C) -> C:
    """Every coroutine of the interface that ``cls`` does not answer itself: wait for the
    build, then the real services' own. Anything else ``cls`` must answer (``TypeError``)."""
    for name, member in _interface().items():
        if name in vars(cls):
            continue
        if inspect.iscoroutinefunction(member):
            setattr(cls, name, _forwarder(name))
            continue
        raise TypeError(
            f"{cls.__name__} neither forwards nor answers ConsoleServices.{name}: a coroutine "
            "is forwarded once the services are built; anything else answers before that"
        )
    return cls


@_forwarding
class PendingServices:
    """``ConsoleServices`` that are still being built; then the real ones, by delegation."""

    if TYPE_CHECKING:  # what ``_forwarding`` adds: every coroutine of the interface

        def __getattr__(self, name: str) -> Any: ...

    def __init__(
        self,
        settings: ServiceSettings,
        build: Build,
        *,
        what: str = "connecting to the cluster",
        capabilities: frozenset[Capability] = frozenset(),
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._settings = settings
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
    def settings(self) -> ServiceSettings:
        return self._settings

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

    def recovery_status(self) -> RecoveryStatus:
        if self._real is not None:
            return self._real.recovery_status()
        auto = self._auto if self._auto is not None else self.settings.recovery.auto
        return RecoveryStatus(active=False, auto=auto)

    def cadence(self) -> list[RunCadence]:
        return self._real.cadence() if self._real is not None else []

    # actions -------------------------------------------------------------------------------
    def successor(self, job_id: str) -> str:
        return self._real.successor(job_id) if self._real is not None else job_id

    async def follow_logs(self, job_id: str) -> AsyncIterator[LogLine | LogStreamClosed]:
        async for item in (await self._services()).follow_logs(job_id):
            yield item

    def set_auto_recovery(self, enabled: bool, actor: str = "user") -> None:
        if self._real is not None:
            self._real.set_auto_recovery(enabled, actor)
        else:
            self._auto = enabled  # applied when the real services exist

    # GKE workloads -------------------------------------------------------------------------
    def preview_workload(self, spec: WorkloadSpec) -> WorkloadPreview:
        # No I/O, so it cannot wait for the build: the cluster's names come with it.
        if self._real is None:
            why = f"cannot reach the cluster: {self._error}" if self._error else f"{self._what}…"
            raise ValueError(f"workload preview: {why}; try again once the console is up")
        return self._real.preview_workload(spec)
