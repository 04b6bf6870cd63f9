"""``Facade``: the one implementation of ``api.ConsoleServices``, over any backend.

    backend.observe ─> Observation ─> diagnosis ─> detector ─> EventSink (journal, bus)
                                  └─> PodSnapshot ──────────────────────> bus ─> screens
    TUI keys / script lines ─> Facade ─> recovery runner / Submitter ─> backend

Three pollers run every ``recovery.poll_interval_s``: the cluster (one observation, published
as a snapshot and fed to the watchdog), the jobs (status transitions, journaled) and metric
cadence (the backend's sources). User actions that reshape the cluster run one at a time,
after any running recovery, with auto recovery held off while they run (across processes
too: the pod's ``actions`` lease). Every action is journaled with its actor through the
``EventSink``.

Several front ends may drive one pod (``sharing``): the one holding the ``watch`` lease
journals what it detects and recovers; the others follow the journal, show the owner's
recovery, and ask it to recover (``recover`` journals a request and waits for the result).

The facade makes none of its parts: the composition root (``console.wiring.compose``) builds
each one and hands them over as ``Parts``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from console.services.actions import ClusterActions
from console.services.api import ServiceSettings
from console.services.backends.base import Backend, Chaos, HearsBetweenPolls
from console.services.cadence.snapshot import mark_stale, read_cadence, stale_entry
from console.services.cadence.tracker import CadenceTracker
from console.services.capabilities import Capability
from console.services.errors import JobsUnavailable
from console.services.jobs.budget import RetryBudget
from console.services.jobs.registry import JobRegistry, Submitter
from console.services.jobs.spec import SubmitSpec
from console.services.jobs.sweeplink import wandb_sweep_url
from console.services.jobs.watcher import JobWatcher, env_event
from console.services.model import (
    ACTIVE_JOBS,
    TRANSITIONAL_STATES,
    ActionResult,
    Event,
    HostState,
    JobInfo,
    LogLine,
    LogStreamClosed,
    PodSnapshot,
    Reachability,
    RecoveryStatus,
    RunCadence,
    Update,
)
from console.services.model.bus import UpdateBus
from console.services.observation import Observation
from console.services.record.journal import AsyncJournal, Journal
from console.services.record.lease import PodLeases
from console.services.record.outcomes import JobOutcomes
from console.services.record.sharing import Sharing
from console.services.record.sink import EventSink
from console.services.recovery.diagnosis import diagnose
from console.services.recovery.watchdog import Watchdog
from console.services.snapshot import pod_snapshot

log = logging.getLogger(__name__)

SETTLING_POLL_S = 1.0  # the pod poll's interval at most while VMs come up or go


async def cancel_and_wait(tasks: Sequence[asyncio.Task[Any]], repeat_s: float = 1.0) -> None:
    """Cancel ``tasks`` and wait until every one has ended, cancelling again each
    ``repeat_s`` one is still running: a cancel can be swallowed (3.11's ``wait_for`` drops one
    that arrives as its inner call completes), and a stop must not wait on it for ever."""
    pending = set(tasks)
    for t in pending:
        t.cancel()
    while pending:
        done, pending = await asyncio.wait(pending, timeout=repeat_s)
        for t in done:
            if not t.cancelled() and t.exception() is not None:
                log.debug("%s ended with %r", t.get_name(), t.exception())
        for t in pending:
            t.cancel()


class BusConsumer(Protocol):
    """Something fed from the bus on its own task (the alerts): offered every update, never
    on the recovery's path; started and stopped with the services."""

    def offer(self, update: Update) -> None: ...

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


class Observer:
    """The backend's observation plus what only the console knows: which jobs are its own,
    and which of its runs' metrics have stalled (the latest cadence, as the facade polled it).
    The watchdog and the facade's pod poll observe through it; the newest observation is kept
    for the news the backend hears between polls."""

    def __init__(self, backend: Backend, registry: JobRegistry) -> None:
        self._backend = backend
        self._registry = registry
        self.cadence: list[RunCadence] = []  # the cadence poll's latest
        self.last: Observation | None = None  # the newest poll, as observe() made it

    async def observe(self) -> Observation:
        obs = await self._backend.observe()
        jobs = obs.jobs
        if jobs and not obs.jobs_owned:
            mine = self._registry.ids()
            jobs = tuple(j for j in obs.jobs if j.job_id in mine)
        jobs = tuple(self._with_sweep_id(j) for j in jobs)
        self.last = obs = replace(
            obs,
            jobs=jobs,
            stalled_runs=tuple(c.run_id for c in self.cadence if c.stalled),
            run_names={c.run_id: c.name or c.run_id for c in self.cadence},
        )
        return obs

    def _with_sweep_id(self, job: JobInfo) -> JobInfo:
        """A sweep's job with its sweep id (its spec's, or the one learned from the job since):
        what a recovery owes names the sweep to relaunch, in the journal too. A W&B sweep's
        id is not in its Ray metadata: the engine created the sweep after the submission."""
        if job.sweep_id:
            return job
        sub = self._registry.get(job.job_id)
        sweep_id = sub.known_sweep_id if sub is not None else ""
        return replace(job, sweep_id=sweep_id) if sweep_id else job


@dataclass(frozen=True)
class Parts:
    """What the facade runs on, each part built by the composition root
    (``console.wiring.compose``) and handed over: the facade makes none of them."""

    bus: UpdateBus
    sink: EventSink
    journal: Journal
    backend: Backend
    chaos: Chaos | None
    registry: JobRegistry
    leases: PodLeases
    outcomes: JobOutcomes
    submitter: Submitter
    retry_budget: RetryBudget
    job_watcher: JobWatcher
    cadence_tracker: CadenceTracker
    observer: Observer
    watchdog: Watchdog
    sharing: Sharing
    consumers: Sequence[BusConsumer] = ()


class Facade(ClusterActions):
    """``api.ConsoleServices`` over the ``parts`` it is handed (``chaos`` only on an emulated
    cluster)."""

    def __init__(
        self,
        settings: ServiceSettings,
        parts: Parts,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        self.polling = settings.polling
        self._clock = clock
        self._reads = AsyncJournal(parts.journal)
        backend, emulated = parts.backend, parts.chaos
        self.capabilities: frozenset[Capability] = backend.capabilities | (
            emulated.capabilities if emulated is not None else frozenset()
        )
        self.poll_budget_s = settings.polling.budget_s
        self.registry = parts.registry
        self.outcomes = parts.outcomes  # final states outlive their head
        self.submitter = parts.submitter
        self.retry_budget = parts.retry_budget
        self.job_watcher = parts.job_watcher
        self.cadence_tracker = parts.cadence_tracker
        self._observer = parts.observer
        self._cadence_at = clock()  # when the last cadence poll finished
        self._cadence_polled = asyncio.Event()  # set by the first one
        super().__init__(
            cluster=settings.cluster,
            recovery=settings.recovery,
            backend=backend,
            chaos=emulated,
            bus=parts.bus,
            sink=parts.sink,
            journal=parts.journal,
            leases=parts.leases,
            watchdog=parts.watchdog,
        )
        self.sharing = parts.sharing
        self._was_owner = False
        self._snapshot = PodSnapshot(
            at=clock(),
            provider=self.cluster.provider,
            node_name=self.cluster.node_name,
            accelerator_type=self.cluster.accelerator_type,
        )
        self._env_flags_loaded = False
        # What else lives off the bus with tasks of its own (alerts): started and stopped here.
        self.consumers: list[BusConsumer] = list(parts.consumers)
        for consumer in self.consumers:
            self.bus.subscribe(consumer.offer)
        self._tasks: list[asyncio.Task[None]] = []
        self._started = False
        # The backend hears of some changes between polls (a preemption notice, the tunnel
        # dropping): it wakes the pod poller so detection does not wait for the interval,
        # and what it heard for certain is journaled at once, not after the poll in flight.
        self._wake = asyncio.Event()
        self._news = self.backend if isinstance(self.backend, HearsBetweenPolls) else None
        self._news_fed = 0  # the backend's news_count when an observation was last fed
        self._news_task: asyncio.Task[None] | None = None
        self._feed = asyncio.Lock()  # one observation at a time into the snapshot and watchdog
        self.backend.set_wakeup(self._woken)

    # -- lifecycle ----------------------------------------------------------------------------
    async def start(self) -> None:
        if self._started:
            return
        self._started = True
        try:
            await self.refresh()
        except Exception as exc:  # a cluster that is down at start is shown, not fatal
            log.warning("first poll failed: %s", exc)
        await self.backend.start()
        for consumer in self.consumers:
            await consumer.start()
        self._tasks = [
            asyncio.create_task(
                self._loop(self.refresh, "pod", self._wake, self._pod_interval),
                name="phantom-poll-pod",
            ),
            asyncio.create_task(self._loop(self._poll_jobs, "jobs"), name="phantom-poll-jobs"),
            asyncio.create_task(
                self._loop(self._poll_cadence, "cadence"), name="phantom-poll-cadence"
            ),
        ]

    async def stop(self, *, resumable: bool = False) -> None:
        """Stop pollers and close connections. ``resumable``: a recovery under way is left
        for the next process that watches the pod (`phantom watch` stopping on SIGTERM),
        not ended as cancelled."""
        tasks, self._tasks = self._tasks, []
        if self._news_task is not None:
            tasks.append(self._news_task)
        await cancel_and_wait(tasks)
        await self.watchdog.close(resumable=resumable)
        await self.sink.flush()
        for consumer in self.consumers:
            with contextlib.suppress(Exception):
                await consumer.stop()
        with contextlib.suppress(Exception):
            await self.backend.close()
        self.leases.release()
        self._started = False

    def close_journal(self) -> None:
        self.sink.close()
        self.journal.close()

    def subscribe(self, callback: Callable[[Update], None]) -> Callable[[], None]:
        return self.bus.subscribe(callback)

    def _pod_interval(self) -> float:
        """A pod on the move is polled every second at most; a settled one at
        ``recovery.poll_interval_s``. On the move: VMs coming up or going, or a host the
        API calls READY that SSH cannot reach (a VM being reclaimed drops its connections
        before the API says so: the poll that would show it must not wait an interval)."""
        moving = any(
            h.tpu_state in TRANSITIONAL_STATES
            or (h.tpu_state == HostState.READY and h.ssh == Reachability.DOWN)
            for h in self._snapshot.hosts
        )
        every = self.polling.interval_s
        return min(every, SETTLING_POLL_S) if moving else every

    def _woken(self) -> None:
        """The backend heard something between polls: poll now; and when it heard news for
        certain (a notice, the API calling a VM lost), feed the last observation with that
        news to the watchdog now, not when the poll in flight ends."""
        self._wake.set()
        if self._news is None or not self._tasks or self._news.news_count == self._news_fed:
            return
        if self._news_task is None or self._news_task.done():
            self._news_task = asyncio.create_task(self._feed_news(), name="phantom-news")

    async def _feed_news(self) -> None:
        """The last observation with the news laid over it, taken now: journaled (a hard
        condition needs no confirming poll) and shown. The poll in flight gets the same news
        laid over when it ends (``refresh``), so it takes back nothing and journals it again
        never (the detector journals edges)."""
        news = self._news
        assert news is not None
        while news.news_count != self._news_fed:
            async with self._feed:
                count, last = news.news_count, self._observer.last
                if last is None or count == self._news_fed:
                    return
                self._news_fed = count
                obs = news.with_news(last, at=self._clock())
                if obs is not last:
                    await self._take(obs)

    async def _loop(
        self,
        poll: Callable[[], Awaitable[Any]],
        name: str,
        wake: asyncio.Event | None = None,
        interval: Callable[[], float] | None = None,
    ) -> None:
        while True:
            t0 = time.monotonic()
            if wake is not None:
                wake.clear()
            try:
                await poll()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("%s poller failed", name)
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise asyncio.CancelledError  # a cancel a poll swallowed: stop all the same
            every = interval() if interval is not None else self.polling.interval_s
            pause = max(0.05, every - (time.monotonic() - t0))
            if wake is None:
                await asyncio.sleep(pause)
                continue
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(pause):
                    await wake.wait()

    async def _poll_jobs(self) -> None:
        try:
            async with asyncio.timeout(self.poll_budget_s):
                transitions = await self.job_watcher.poll()
        except (JobsUnavailable, TimeoutError):
            return
        except Exception as exc:  # the jobs API answered badly: the next poll tries again
            log.warning("jobs poll: %s", exc)
            return
        owner = self.sharing.owner  # one journal row per transition, by the pod's watcher
        await self._journal_env_flags(owner)
        for tr in transitions:
            self.bus.publish(self.annotate_job(tr.job))
            if not owner:
                continue  # the watcher's row reaches this front end through the journal
            ev = tr.to_event(self._clock())
            if tr.job.job_id in self.registry:
                ev = replace(ev, actor="jobs")
            await self.sink.emit(ev)
        self.outcomes.note(self.job_watcher.known.values())
        for job in self.job_watcher.known.values():
            await self.submitter.learn_sweep_id(job)

    async def _journal_env_flags(self, owner: bool) -> None:
        """A job started without the expected env is journaled once, by the pod's watcher
        (the flags every process has seen are remembered, so a takeover repeats none)."""
        if not self._env_flags_loaded:
            seen = await self._reads.query(limit=10_000, kinds=["job_env"])
            self.job_watcher.already_flagged(str(e.data.get("job_id", "")) for e in seen)
            self._env_flags_loaded = True
        for job in self.job_watcher.new_env_flags():
            if owner:
                await self.sink.emit(env_event(job, self._clock()))

    async def _poll_cadence(self) -> None:
        cadence = self._observer.cadence = await self.cadence_tracker.apoll()
        self._cadence_at = self._clock()
        self._cadence_polled.set()
        for cad in cadence:
            self.bus.publish(cad)
        for metrics in self.cadence_tracker.metrics():
            self.bus.publish(metrics)
        transitions = self.cadence_tracker.take_transitions()
        if self.sharing.owner:  # one journal row per stall, by the pod's watcher
            for tr in transitions:
                await self.sink.emit(replace(tr.to_event(), actor="cadence"))

    # -- observing ------------------------------------------------------------------------------
    async def observe(self) -> Observation:
        """The backend's observation plus what only the console knows (``Observer``)."""
        return await self._observer.observe()

    def snapshot(self) -> PodSnapshot:
        return self._snapshot

    async def refresh(self) -> PodSnapshot:
        await self.sharing.follow_journal()  # first: what the other front ends did
        obs = await self.observe()
        async with self._feed:
            if self._news is not None:  # what was heard since the poll read the API
                self._news_fed = self._news.news_count
                obs = self._news.with_news(obs)
            await self._take(obs)
        return self._snapshot

    async def _take(self, obs: Observation) -> None:
        """One observation into the snapshot (published) and the watchdog."""
        diag = diagnose(obs)  # once per observation: the snapshot and the watchdog share it
        self._snapshot = pod_snapshot(
            obs,
            diag,
            provider=self.cluster.provider,
            node_name=self.cluster.node_name,
            ray_expected=self.watchdog.armed,
        )
        self.bus.publish(self._snapshot)
        if self.sharing.owner:
            self._took_over()
            await self.watchdog.on_observation(obs, diag)
        else:
            self._was_owner = False
            await self.watchdog.follow(obs, diag)

    def _took_over(self) -> None:
        """Became the pod's watcher: finish a recovery whose process died mid-way (each step
        is idempotent, and resubmissions are recorded before they are sent)."""
        if self._was_owner:
            return
        self._was_owner = True
        left = self.sharing.interrupted()
        if left is not None and not self.watchdog.running:
            self.watchdog.start_recovery(
                actor="watchdog",
                trigger=f"resuming an interrupted recovery ({left.trigger})",
                owed=self.sharing.owed(left),  # the jobs it owed: in the journal, not in memory
                resumed_since=left.detected_at or left.started_at,
            )

    def recovery_status(self) -> RecoveryStatus:
        return self.sharing.status()

    def cadence(self) -> list[RunCadence]:
        return list(self._observer.cadence)

    async def cadence_now(self, deadline_s: float | None = None) -> list[RunCadence]:
        """Cadence as of now, within ``deadline_s`` (``recovery.cadence_deadline_s``). With
        the pollers running: their latest values, stale for a failing source or when no
        poll has finished lately. Without (a one-shot ``status``): the sources read once,
        each under the deadline (``cadence.snapshot``)."""
        deadline = self.recovery.cadence_deadline_s if deadline_s is None else deadline_s
        if self._tasks:
            if not self._cadence_polled.is_set():  # just started: the first poll is due
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(deadline):
                        await self._cadence_polled.wait()
            if not self._cadence_polled.is_set():
                why = f"the first cadence poll has not finished within {deadline:g}s"
                kinds = dict.fromkeys(s.kind for s in self.cadence_tracker.sources)
                return [stale_entry(kind, "", why) for kind in kinds]
            reasons = dict(self.cadence_tracker.errors)
            late = self._clock() - self._cadence_at
            if late > self.polling.interval_s + deadline:
                reasons[""] = f"the last cadence poll finished {late:.0f}s ago"
            return mark_stale(self._observer.cadence, reasons)
        return await asyncio.to_thread(
            read_cadence,
            self.cadence_tracker.sources,
            stall_factor=self.recovery.stall_factor,
            deadline_s=deadline,
            clock=self._clock,
        )

    async def events(self, limit: int = 500, kinds: Sequence[str] | None = None) -> list[Event]:
        return await self._reads.query(limit=limit, kinds=kinds)

    # -- jobs -----------------------------------------------------------------------------------
    async def submit(self, spec: SubmitSpec, actor: str = "user") -> JobInfo:
        return self.with_sweep(await self.submitter.submit(spec.checked(), actor))

    async def list_jobs(self) -> list[JobInfo]:
        listed = await self.backend.list_jobs()
        jobs = self.outcomes.with_ended(listed, [j.job_id for j in self.registry.current()])
        return [self.annotate_job(j) for j in jobs]

    def annotate_job(self, job: JobInfo) -> JobInfo:
        """``job`` with what only this console knows: its chain's retry counts and, for a
        sweep it submitted, the sweep id and its W&B page."""
        return self.with_sweep(self.retry_budget.annotate(job))

    def with_sweep(self, job: JobInfo) -> JobInfo:
        """``job`` with its sweep id and W&B page, when it is a sweep this console submitted."""
        sub = self.registry.get(job.job_id)
        if sub is None or sub.spec.mode != "sweep":
            return job
        sweep_id = sub.known_sweep_id
        url = wandb_sweep_url(self.settings.wandb, sub.spec, sweep_id) if sweep_id else ""
        return replace(job, sweep_id=sweep_id, sweep_url=url)

    async def job_status(self, job_id: str) -> JobInfo:
        info = await self.outcomes.status(
            job_id, self.backend.job_status, ours=self.registry.__contains__
        )
        return self.with_sweep(info)

    def successor(self, job_id: str) -> str:
        seen = {job_id}
        job = self.registry.get(job_id)
        while job is not None and job.superseded_by and job.superseded_by not in seen:
            seen.add(job.superseded_by)
            job_id = job.superseded_by
            job = self.registry.get(job_id)
        return job_id

    async def stop_job(self, job_id: str, actor: str = "user") -> ActionResult:
        t0 = time.monotonic()
        try:
            was_running = await self.backend.stop_job(job_id)
        except Exception as exc:
            await self._record(
                ActionResult(
                    action="stop_job",
                    ok=False,
                    elapsed_s=time.monotonic() - t0,
                    message=str(exc),
                    data={"job_id": job_id},
                ),
                actor,
            )
            raise
        msg = f"stop requested for job {job_id}" if was_running else f"job {job_id} was not running"
        return await self._record(
            ActionResult(
                action="stop_job",
                ok=True,
                elapsed_s=time.monotonic() - t0,
                message=msg,
                data={"job_id": job_id, "was_running": was_running},
            ),
            actor,
        )

    async def follow_logs(self, job_id: str) -> AsyncIterator[LogLine | LogStreamClosed]:
        scrub = self.journal.scrub.text
        async for item in self.backend.follow_logs(job_id):
            yield replace(item, text=scrub(item.text)) if isinstance(item, LogLine) else item

    async def job_logs(self, job_id: str) -> str:
        return self.journal.scrub.text(await self.backend.job_logs(job_id))

    async def relaunch_sweep(self, actor: str = "user") -> JobInfo:
        """Stop the newest sweep job if it still runs, submit it again with the same sweep id."""
        sweeps = [j for j in self.registry.current() if j.spec.mode == "sweep"]
        if not sweeps:
            raise ValueError("no sweep was submitted from this console; submit one first")
        last = sweeps[-1]
        with contextlib.suppress(Exception):
            if (await self.backend.job_status(last.job_id)).status in ACTIVE_JOBS:
                await self.stop_job(last.job_id, actor)
        return self.with_sweep(
            await self.submitter.submit(last.relaunch_spec(), actor, resubmitted_from=last.job_id)
        )

    # -- recovery -------------------------------------------------------------------------------
    async def recover(self, actor: str = "user", timeout_s: float | None = None) -> RecoveryStatus:
        """Run the recovery (this process watches the pod), or ask the process that does
        and wait for its result; if that process dies meanwhile, take over and run it."""
        if self.sharing.owner:
            return await self.watchdog.recover(actor=actor, timeout_s=timeout_s)
        request = await self.sink.emit(self.sharing.request(actor, self._clock()))
        assert request.id is not None
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            await self.sharing.follow_journal()
            if self.sharing.ended_after(request.id) is not None:
                return self.sharing.status()
            if self.sharing.owner:
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                return await self.watchdog.recover(actor=actor, timeout_s=left)
            if deadline is not None and time.monotonic() >= deadline:
                return self.sharing.status()
            await asyncio.sleep(self.polling.brief_s)

    def set_auto_recovery(self, enabled: bool, actor: str = "user") -> None:
        self.watchdog.set_auto(enabled, actor=actor)
