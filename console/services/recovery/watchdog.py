"""The watchdog: every observation goes to the detector; confirmed trouble starts a recovery.

One recovery runs at a time; a second request joins it. Auto recovery acts only on a
cluster that was formed (``armed``), never while a user action reshapes the cluster
(``suspended`` here, or another process holding the pod's ``actions`` lease), and backs off
after failed attempts (poll interval x 2^failures, at most 10 minutes) so a pod that cannot
come back is not hammered. A recovery holds the ``actions`` lease while it runs.

Only the process that holds the pod's ``watch`` lease journals what it detects and
recovers; another front end ``follow``s (same bookkeeping, nothing journaled), so taking
over when the owner dies repeats no event.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import replace

from console.services.model import Event, EventKind, JobInfo, RecoveryStatus, Update
from console.services.observation import Observation
from console.services.record.lease import FileLease
from console.services.record.sink import EventSink
from console.services.recovery.classify import Diagnosis
from console.services.recovery.detector import Detector
from console.services.recovery.diagnosis import diagnose
from console.services.recovery.runner import Plan, RecoveryRunner, Run, RunnerSettings, Seen


class Watchdog:
    def __init__(
        self,
        plan: Plan,
        *,
        observe: Callable[[], Awaitable[Observation]],
        sink: EventSink,
        publish: Callable[[Update], None],
        auto: bool = True,
        poll_interval_s: float = 5.0,
        step_retries: int = 3,
        ready_timeout_s: float = 600.0,
        verify_timeout_s: float | None = None,
        backoff_s: float = 1.0,
        confirm_polls: int = 2,
        max_rounds: int = 3,
        emit_stall_events: bool = True,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        action_lease: FileLease | None = None,
    ) -> None:
        self._sink = sink
        self._action_lease = action_lease
        self._clock = clock
        self.poll_interval_s = poll_interval_s
        self.detector = Detector(
            sink, clock=clock, confirm_polls=confirm_polls, emit_stall_events=emit_stall_events
        )
        self.runner = RecoveryRunner(
            plan,
            observe=observe,
            detector=self.detector,
            sink=sink,
            publish=publish,
            settings=RunnerSettings(
                step_retries=step_retries,
                ready_timeout_s=ready_timeout_s,
                verify_timeout_s=(
                    verify_timeout_s
                    if verify_timeout_s is not None
                    else max(120.0, ready_timeout_s)
                ),
                poll_interval_s=poll_interval_s,
                backoff_s=backoff_s,
                max_rounds=max(1, max_rounds),
            ),
            clock=clock,
            sleep=sleep,
        )
        self.runner.auto = auto
        self.runner.status = RecoveryStatus(active=False, auto=auto)
        self._task: asyncio.Task[RecoveryStatus] | None = None
        self._next_auto_at = 0.0
        self._auto_failures = 0

    # -- state ----------------------------------------------------------------------------------
    @property
    def sink(self) -> EventSink:
        return self._sink

    @property
    def status(self) -> RecoveryStatus:
        return self.runner.status

    @property
    def auto(self) -> bool:
        return self.runner.auto

    @property
    def step_names(self) -> tuple[str, ...]:
        return self.runner.plan.names

    @property
    def armed(self) -> bool:
        return self.detector.armed

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    @property
    def active_jobs(self) -> dict[str, JobInfo]:
        return dict(self.detector.active_jobs)

    @property
    def last_diagnosis(self) -> Diagnosis | None:
        return self.detector.last_diagnosis

    def set_auto(self, enabled: bool, actor: str = "user", *, journal: bool = True) -> None:
        """Switch auto recovery; published at once, journaled in the background (an owner
        applying another front end's switch from the journal does not journal it again)."""
        self.runner.auto = enabled
        self.runner.status = replace(self.runner.status, auto=enabled)
        self.runner.publish_status()
        if journal:
            self._sink.emit_soon(
                Event(
                    at=self._clock(),
                    kind=EventKind.WATCHDOG,
                    message=f"auto recovery {'on' if enabled else 'off'}",
                    actor=actor,
                    data={"auto": enabled},
                )
            )

    @contextlib.contextmanager
    def suspended(self) -> Iterator[None]:
        """No auto recovery starts inside (a user action is reshaping the cluster)."""
        self.detector.held += 1
        try:
            yield
        finally:
            self.detector.held -= 1
            self.detector.unhealthy_polls = 0

    def arm(self) -> None:
        """Guard the cluster from now on (it was formed)."""
        self.detector.arm()
        self._auto_failures = 0
        self._next_auto_at = 0.0

    def disarm(self) -> None:
        self.detector.disarm()

    # -- detection ------------------------------------------------------------------------------
    async def on_observation(self, obs: Observation, diag: Diagnosis | None = None) -> Diagnosis:
        """Feed one poll (and its diagnosis, when the caller made it): events for what
        changed; a recovery when auto and confirmed."""
        verdict = await self.detector.update(obs, diag, recovering=self.running)
        if not verdict.trouble or self.running:
            return verdict.diagnosis
        if not (self.auto and self.armed) or self.detector.held:
            return verdict.diagnosis
        if verdict.confirmed and self._clock() >= self._next_auto_at:
            if self._action_lease is not None and self._action_lease.busy_elsewhere():
                return verdict.diagnosis  # another process is reshaping the cluster
            self.start_recovery(
                actor="watchdog",
                trigger=verdict.diagnosis.summary(),
                observation=obs,
                diagnosis=verdict.diagnosis,
            )
        return verdict.diagnosis

    async def follow(self, obs: Observation, diag: Diagnosis | None = None) -> Diagnosis:
        """Another process watches this pod: keep the memory, journal and recover nothing."""
        return (await self.detector.update(obs, diag, silent=True)).diagnosis

    # -- recovery -------------------------------------------------------------------------------
    def start_recovery(
        self,
        actor: str = "user",
        trigger: str = "",
        observation: Observation | None = None,
        diagnosis: Diagnosis | None = None,
        owed: Mapping[str, str] | None = None,
        resumed_since: float | None = None,
    ) -> asyncio.Task[RecoveryStatus]:
        """Start the loop, or return the running one (one recovery at a time). ``owed``:
        the jobs an interrupted recovery owed (job id -> sweep id), read from the journal by
        the process that resumes it. ``resumed_since``: this finishes a recovery that a
        process which died mid-way started, its trouble first seen then: a real loss,
        recovered (with its MTTR from then) even when the cluster is back by the time this
        one looks (a takeover that found the nodes back closed it "nothing to recover")."""
        if self._task is not None and not self._task.done():
            return self._task
        det = self.detector
        detected_at, detect_s = self._clock(), None
        diag = diagnosis
        if det.unhealthy_since is not None:
            # The poller saw the problem first: MTTR counts from then, not from the request.
            detected_at, detect_s = det.unhealthy_since, det.detect_s
        elif observation is not None:
            detected_at = observation.at
            diag = diag if diag is not None else diagnose(observation)
            detect_s = det.detect_delay(observation, diag)
        if resumed_since is not None:
            detected_at = min(detected_at, resumed_since)
        run = self.runner.new_run(actor, trigger, detected_at, detect_s, owed)
        run.did_something = run.did_something or resumed_since is not None
        seen = (observation, diag) if observation is not None else None
        self._task = asyncio.create_task(self._recover(run, seen))
        return self._task

    async def _recover(self, run: Run, seen: Seen | None) -> RecoveryStatus:
        lease = self._action_lease
        if lease is None:
            ok = await self.runner.run(run, seen)
        else:
            async with lease.hold():
                ok = await self.runner.run(run, seen)
        if ok:
            self._auto_failures = 0
        else:
            self._auto_failures += 1
            self._next_auto_at = self._clock() + min(
                600.0, self.poll_interval_s * 2 ** min(self._auto_failures, 8)
            )
        return self.status

    async def recover(self, actor: str = "user", timeout_s: float | None = None) -> RecoveryStatus:
        """Run the loop now (or join the running one) and wait for it, up to ``timeout_s``."""
        task = self.start_recovery(actor=actor, trigger=f"requested by {actor}")
        try:  # asyncio.timeout, not wait_for: 3.11's wait_for can swallow a caller's cancel
            async with asyncio.timeout(timeout_s):
                return await asyncio.shield(task)
        except TimeoutError:
            return self.status

    async def wait_idle(self) -> None:
        """Return once no recovery runs (its outcome is in ``status``)."""
        task = self._task
        if task is not None and not task.done():
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await asyncio.shield(task)

    async def close(self, *, resumable: bool = False) -> None:
        """Stop a recovery under way: journaled as cancelled (it failed), or with
        ``resumable`` as interrupted, left open for the next owner to finish (the facade's
        takeover adopts it from the journal, in the same incident)."""
        if self._task is not None and not self._task.done():
            self.runner.leave_resumable = resumable
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
