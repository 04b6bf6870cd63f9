"""The recovery runner: a backend's table of steps, run with retries, journaled, published.

    DETECT -> <the backend's steps> -> VERIFY

A backend supplies a ``Plan``: a table of ``StepDef``s, each a ``select`` (which hosts or
jobs need it this round, or ``Skip`` with the reason) and a ``run`` over the backend's own
parts. The TPU VM plan is recreate -> wait_ready -> bootstrap -> head -> tunnel -> resubmit
-> workers (``backends/tpu_vm/recovery.py``). The runner never calls into the facade.

Every step is observable: its state, per-host results, attempts and elapsed time are
published as a ``RecoveryStatus`` while it runs, and its end is journaled with the actor as
one ``action`` row (``recovery.<step>``, dated at the step's start: the journal holds each step
once). A step is retried with backoff (``step_retries``; a per-host step re-runs only
the hosts that failed), then reported failed, which ends the recovery with
``outcome=FAILED`` and the step in ``failed_step``. A skipped step says why. VERIFY polls until the cluster is back
(every host READY, one live Ray node each, tunnel up, resubmitted jobs running, no new metric
stall); a new loss seen meanwhile starts another round, up to ``max_rounds``.

What the recovery owes (the jobs active on the lost head, with their sweep ids) is journaled
with its start and with every DETECT, before any step acts (``data.owed``): a process killed
at any instant leaves them to the next owner, which resumes the recovery owing them too. A
step that fails on a host the provider now says is gone ends the round (``NewLoss``): the
next round takes that loss in, so a loss during a recovery joins it instead of failing it.

MTTR runs from the loss (the provider's preemption time when it reports one, else the first
sighting) to a verified cluster.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from console.services.model import (
    ACTIVE_JOBS,
    ActionResult,
    Event,
    EventKind,
    HostResult,
    IncidentOutcome,
    JobInfo,
    JobStatus,
    RecoveryOutcome,
    RecoveryStatus,
    RecoveryStep,
    StepState,
    Update,
)
from console.services.observation import Observation
from console.services.record.sink import EventSink
from console.services.recovery import classify as cx
from console.services.recovery import diagnosis as dx
from console.services.recovery.detector import Detector
from console.services.recovery.notes import STEP_NOTE

log = logging.getLogger(__name__)

DETECT, VERIFY = "detect", "verify"
# What the poller saw when it asked for the recovery, and its diagnosis (None: not made yet).
Seen = tuple[Observation, "cx.Diagnosis | None"]


@dataclass(frozen=True)
class Skip:
    """A step not needed this round, and why (shown, never silent)."""

    reason: str


@dataclass
class Round:
    """What the steps of one round know: the observation they act on and what earlier steps
    of the round did."""

    observation: Observation
    diagnosis: cx.Diagnosis
    jobs_at_start: dict[str, JobInfo]
    # Owed jobs the live head does not list: lost with a head that an earlier round (or the
    # process before) already replaced, before it resubmitted them. They are owed still.
    owed_elsewhere: dict[str, JobInfo] = field(default_factory=dict)
    recreated: list[str] = field(default_factory=list)
    resubmitted: dict[str, str] = field(default_factory=dict)

    @property
    def all_hosts(self) -> list[str]:
        return [h.name for h in self.observation.hosts]

    @property
    def head(self) -> str:
        return self.observation.head

    @property
    def workers(self) -> list[str]:
        return [h for h in self.all_hosts if h != self.head]

    @property
    def head_lost(self) -> bool:
        return self.diagnosis.head_lost or self.head in self.recreated


@dataclass(frozen=True)
class StepDef:
    name: str
    select: Callable[[Round], Sequence[str] | Skip]
    run: Callable[[Sequence[str]], Awaitable[ActionResult]]
    per_host: bool = True  # a retry re-runs only the hosts that failed
    after: Callable[[Round, Sequence[str], ActionResult], None] | None = None
    # Runs alongside the steps after it; the round waits for it before the step named here
    # (or at the round's end), and its failure fails the round then.
    overlap_until: str = ""

    def __post_init__(self) -> None:
        if self.overlap_until and self.after is not None:
            raise ValueError(f"step {self.name}: an overlapping step cannot have `after`")


@dataclass(frozen=True)
class Plan:
    steps: tuple[StepDef, ...]

    @property
    def names(self) -> tuple[str, ...]:
        return (DETECT, *(s.name for s in self.steps), VERIFY)


class StepFailed(Exception):
    def __init__(self, step: str, message: str) -> None:
        self.step = step
        super().__init__(f"{step}: {message}")


class NewLoss(Exception):
    """A step failed on hosts the provider now says are gone: a loss that came during the
    recovery. The round ends and the next one takes the new loss in (it joins the recovery,
    it does not fail it)."""

    def __init__(self, step: str, observation: Observation, diagnosis: cx.Diagnosis) -> None:
        self.step = step
        self.observation = observation
        self.diagnosis = diagnosis
        super().__init__(f"{step}: new loss during recovery: {diagnosis.summary()}")


@dataclass
class Run:
    """Mutable bookkeeping of one recovery (the published view is ``RecoveryStatus``)."""

    actor: str
    trigger: str
    started_at: float
    detected_at: float
    detect_s: float | None
    steps: dict[str, RecoveryStep] = field(default_factory=dict)
    outcome: RecoveryOutcome | None = None
    failed_step: str = ""
    mttr_s: float | None = None
    did_something: bool = False
    loss_at: float | None = None  # the provider's time of the loss being recovered
    # What the recovery owes: the jobs to resubmit should the head be lost (job id -> its
    # sweep id, "" for a plain job). Journaled with the start and with every DETECT, before
    # any step acts, so a process killed at any instant leaves them to the next owner.
    owed: dict[str, str] = field(default_factory=dict)
    replaced: dict[str, str] = field(default_factory=dict)  # old job id -> its resubmission


@dataclass(frozen=True)
class RunnerSettings:
    step_retries: int = 3
    ready_timeout_s: float = 600.0
    verify_timeout_s: float = 600.0
    poll_interval_s: float = 5.0
    backoff_s: float = 1.0
    max_rounds: int = 3
    # Losses that may join one recovery (a host lost while a step works on it), beside the
    # rounds VERIFY starts.
    max_joined_losses: int = 10
    # VERIFY looks again this often, at most: the cluster is coming back right now, and
    # waiting out a long idle poll between checks would only add to the MTTR.
    verify_interval_s: float = 0.5

    @property
    def verify_every_s(self) -> float:
        return min(self.poll_interval_s, self.verify_interval_s)


class RecoveryRunner:
    def __init__(
        self,
        plan: Plan,
        *,
        observe: Callable[[], Awaitable[Observation]],
        detector: Detector,
        sink: EventSink,
        publish: Callable[[Update], None],
        settings: RunnerSettings,
        clock: Callable[[], float],
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.plan = plan
        self._observe = observe
        self._detector = detector
        self._sink = sink
        self._publish = publish
        self.settings = settings
        self._clock = clock
        self._sleep = sleep
        self.auto = True  # shown in the published status; the watchdog owns the switch
        self.status = RecoveryStatus(active=False, auto=True)
        self._run: Run | None = None
        # Set when the process stops with a recovery under way that the next owner must
        # finish (``Watchdog.close(resumable=True)``): a cancel then ends nothing.
        self.leave_resumable = False

    def new_run(
        self,
        actor: str,
        trigger: str,
        detected_at: float,
        detect_s: float | None,
        owed: Mapping[str, str] | None = None,
    ) -> Run:
        run = Run(
            actor=actor,
            trigger=trigger or "requested",
            started_at=self._clock(),
            detected_at=detected_at,
            detect_s=detect_s,
            steps={s: RecoveryStep(name=s) for s in self.plan.names},
            owed=dict(owed or {}),
        )
        self._run = run
        self.publish_status()
        return run

    async def run(self, run: Run, seen: Seen | None) -> bool:
        """Run the recovery to its end; True when verified. Cancellation propagates."""
        failed: StepFailed | None = None
        try:
            self._owe(run, self._detector.active_jobs)
            await self._event(
                EventKind.RECOVERY_STARTED,
                f"recovery started: {run.trigger}",
                actor=run.actor,
                # The trigger as a field: followers and the journal read it, never the message.
                # detected_at: where a takeover that finishes it counts its MTTR from.
                data={
                    "trigger": run.trigger,
                    "owed": dict(run.owed),
                    "detected_at": run.detected_at,
                }
                | ({"detect_s": run.detect_s} if run.detect_s is not None else {}),
            )
            rnd, joined, seen_now, fresh = 0, 0, seen, False
            while True:
                rnd += 1
                if rnd > 1 or fresh:
                    note = "a loss joined the recovery" if fresh else f"round {rnd}"
                    run.steps = {s: RecoveryStep(name=s, message=note) for s in self.plan.names}
                    self.publish_status()
                try:
                    again = await self._round(run, seen_now)
                except NewLoss as loss:
                    # A host lost while a step worked on it: the round ends and the next one
                    # takes the loss in. Such rounds have their own allowance, so a pod
                    # losing hosts faster than it gets them back still ends (failed).
                    joined += 1
                    if joined > self.settings.max_joined_losses:
                        raise StepFailed(loss.step, str(loss)) from None
                    # The next round looks again: the loss was seen when the step failed,
                    # and the steps after it (alongside) may have changed the cluster since.
                    seen_now, fresh = None, True
                    rnd -= 1  # a joined loss does not use up a round
                    continue
                seen_now, fresh = None, False
                if not again:
                    break
                if rnd >= self.settings.max_rounds:
                    raise StepFailed(
                        VERIFY, f"cluster not stable after {self.settings.max_rounds} rounds"
                    )
        except StepFailed as exc:
            failed = exc
        except asyncio.CancelledError:
            if self.leave_resumable:
                # The process stops (`phantom watch` on SIGTERM), the cluster still needs the
                # recovery: no end row, so the next owner resumes it in the same incident.
                run.outcome = RecoveryOutcome.INTERRUPTED
                self.publish_status()
                await self._event(
                    EventKind.WATCHDOG,
                    "recovery interrupted: this process stops; the next one to watch the pod "
                    "finishes it",
                    actor=run.actor,
                    data={"interrupted": True},
                )
                raise
            run.outcome, run.failed_step = RecoveryOutcome.FAILED, "cancelled"
            self.publish_status()
            await self._event(
                EventKind.RECOVERY_FAILED,
                "recovery cancelled",
                actor=run.actor,
                data={"outcome": IncidentOutcome.FAILED},
            )
            raise
        except Exception as exc:  # a bug in a step must surface as a failed recovery
            log.exception("recovery crashed")
            current = next(
                (s for s, st in run.steps.items() if st.state == StepState.RUNNING), DETECT
            )
            self._set(run, current, state=StepState.FAILED, message=f"crashed: {exc!r}")
            failed = StepFailed(current, repr(exc))
        if failed is not None:
            run.outcome, run.failed_step = RecoveryOutcome.FAILED, failed.step
            self.publish_status()
            await self._event(
                EventKind.RECOVERY_FAILED,
                f"recovery failed at {failed.step}: {failed}",
                actor=run.actor,
                data={"step": failed.step, "outcome": IncidentOutcome.FAILED},
            )
            return False
        run.outcome = RecoveryOutcome.OK
        # From the loss itself when the provider dated it, else from its first sighting.
        start = run.detected_at if run.loss_at is None else min(run.detected_at, run.loss_at)
        run.mttr_s = self._clock() - start if run.did_something else None
        self.publish_status()
        recovered = run.mttr_s is not None  # it did something to bring the cluster back
        msg = (
            f"cluster recovered in {run.mttr_s:.1f}s"
            if recovered
            else "cluster healthy: nothing to recover"
        )
        outcome = IncidentOutcome.RECOVERED if recovered else IncidentOutcome.NOTHING_TO_RECOVER
        await self._event(
            EventKind.RECOVERED,
            msg,
            actor=run.actor,
            data={"mttr_s": run.mttr_s, "detect_s": run.detect_s, "outcome": outcome},
        )
        return True

    # -- one round --------------------------------------------------------------------------------
    async def _round(self, run: Run, seen: Seen | None) -> bool:
        """One pass over the steps. True means VERIFY saw a new loss: run another round.
        ``seen``: the observation (and its diagnosis, when made) that started the recovery."""
        self._set(run, DETECT, state=StepState.RUNNING, started_at=self._clock(), attempts=1)
        observation, made = seen if seen is not None else (await self._retry_observe(run), None)
        # Whatever this observation shows is journaled (a preemption seen first here too).
        diag = (await self._detector.update(observation, made, recovering=True)).diagnosis
        if observation.ray_reachable and observation.jobs_read and not diag.head_lost:
            self._detector.active_jobs = {
                j.job_id: j for j in observation.jobs if j.status in ACTIVE_JOBS
            }
        loss = self._detector.loss_time(observation, diag)
        if loss is not None:
            run.loss_at = loss if run.loss_at is None else min(run.loss_at, loss)
        if diag.hard and run.detect_s is None:
            run.detect_s = self._detector.detect_delay(observation, diag)
        self._owe(run, self._detector.active_jobs)
        rnd = Round(observation, diag, self._jobs_owed(run))
        if observation.ray_reachable and observation.jobs_read and not diag.head_lost:
            listed = {j.job_id for j in observation.jobs}
            rnd.owed_elsewhere = {j: i for j, i in rnd.jobs_at_start.items() if j not in listed}
        await self._end_step(
            run,
            DETECT,
            ActionResult(
                action=DETECT,
                ok=True,
                elapsed_s=self._elapsed(run, DETECT),
                per_host={
                    h: HostResult(
                        host=h,
                        ok=c is cx.HostCondition.OK,
                        error="" if c is cx.HostCondition.OK else c,
                    )
                    for h, c in diag.conditions.items()
                },
                message=diag.summary(),
                data={"owed": dict(run.owed)},
            ),
        )
        stalled_at_start = set(diag.stalled_runs)
        if diag.needs_recovery:
            run.did_something = True
        overlapping: list[tuple[str, str, asyncio.Task[ActionResult]]] = []
        try:
            for step in self.plan.steps:
                for until, name, task in [o for o in overlapping if o[0] == step.name]:
                    overlapping.remove((until, name, task))
                    if not task.done():  # shown: the step waits for the one alongside
                        self._set(run, step.name, message=f"waiting for {name} to end")
                    await task
                chosen = step.select(rnd)
                if isinstance(chosen, Skip):
                    await self._skip(run, step.name, chosen.reason)
                    continue
                if step.overlap_until:
                    task = asyncio.create_task(self._attempts(run, step, list(chosen), rnd))
                    overlapping.append((step.overlap_until, step.name, task))
                    continue
                await self._step(run, rnd, step, chosen)
            while overlapping:
                await overlapping.pop(0)[2]
        finally:
            for _, _, task in overlapping:
                task.cancel()
        return await self._verify(run, len(rnd.all_hosts), rnd.resubmitted, stalled_at_start)

    def _owe(self, run: Run, jobs: Mapping[str, JobInfo]) -> None:
        """Add ``jobs`` (active on the head as last seen) to what the recovery owes."""
        for job_id, info in jobs.items():
            if job_id not in run.replaced and (job_id not in run.owed or info.sweep_id):
                run.owed[job_id] = info.sweep_id

    def _jobs_owed(self, run: Run) -> dict[str, JobInfo]:
        """The jobs a lost head takes with it: those seen active, and those the recovery
        owes from before (a round or a process ago), which the head may no longer list."""
        jobs = {j: i for j, i in self._detector.active_jobs.items() if j not in run.replaced}
        for job_id, sweep_id in run.owed.items():
            jobs.setdefault(
                job_id, JobInfo(job_id=job_id, status=JobStatus.LOST, sweep_id=sweep_id)
            )
        return jobs

    async def _step(self, run: Run, rnd: Round, step: StepDef, chosen: Sequence[str]) -> None:
        before = dict(rnd.resubmitted)
        res = await self._attempts(run, step, list(chosen), rnd)
        if step.after is not None:
            step.after(rnd, list(chosen), res)
        for old, new in rnd.resubmitted.items():
            if before.get(old) != new:
                # The replacement is owed from now on: a head lost again takes it along.
                if old in run.owed and old != new:
                    run.owed[new] = run.owed.pop(old)
                run.replaced[old] = new
                await self._event(
                    EventKind.JOB_RESUBMITTED,
                    dx.resubmitted_text(old, new),
                    actor=run.actor,
                    data={"old_job_id": old, "new_job_id": new},
                )

    async def _verify(
        self, run: Run, n_hosts: int, resubmitted: Mapping[str, str], stalled_before: set[str]
    ) -> bool:
        self._set(run, VERIFY, state=StepState.RUNNING, started_at=self._clock(), attempts=1)
        deadline = self._clock() + self.settings.verify_timeout_s
        while True:
            obs = await self._retry_observe(run, step=VERIFY)
            diag = dx.diagnose(obs)
            failed = [w for w in diag.to_resubmit if w not in resubmitted]
            if diag.hosts_in(cx.HostCondition.LOST) or failed:
                # Something new broke while we were recovering: report it and go again.
                self._set(
                    run,
                    VERIFY,
                    state=StepState.FAILED,
                    elapsed_s=self._elapsed(run, VERIFY),
                    message=f"new loss during recovery: {diag.summary()}",
                )
                await self._record_step_end(run, VERIFY, ok=False)
                await self._detector.update(obs, recovering=True)
                return True
            unmet = dx.unmet(obs, n_hosts, resubmitted, stalled_before)
            self._set(run, VERIFY, message="waiting: " + "; ".join(unmet) if unmet else "")
            if not unmet:
                break
            if self._clock() >= deadline:
                timeout = self.settings.verify_timeout_s
                self._set(
                    run,
                    VERIFY,
                    state=StepState.FAILED,
                    elapsed_s=self._elapsed(run, VERIFY),
                    message=f"not back after {timeout:.0f}s: " + "; ".join(unmet),
                )
                await self._record_step_end(run, VERIFY, ok=False)
                raise StepFailed(VERIFY, "; ".join(unmet))
            await self._sleep(self.settings.verify_every_s)
        if obs.ray_reachable and obs.jobs_read:
            self._detector.active_jobs = {j.job_id: j for j in obs.jobs if j.status in ACTIVE_JOBS}
        self._set(
            run,
            VERIFY,
            state=StepState.OK,
            elapsed_s=self._elapsed(run, VERIFY),
            message=dx.verified_text(obs, n_hosts, resubmitted, stalled_before),
        )
        await self._record_step_end(run, VERIFY, ok=True)
        self._detector.mark_healthy(obs)
        self._detector.arm()
        return False

    async def _retry_observe(self, run: Run, step: str = DETECT) -> Observation:
        attempts = self.settings.step_retries + 1
        last = ""
        for attempt in range(1, attempts + 1):
            try:
                return await self._observe()
            except Exception as exc:  # an unanswered poll is retried like any step
                last = f"observe failed: {exc}"
                self._set(run, step, attempts=attempt, message=last)
                if attempt < attempts:
                    await self._sleep(self.settings.backoff_s * 2 ** (attempt - 1))
        self._set(run, step, state=StepState.FAILED, elapsed_s=self._elapsed(run, step))
        await self._record_step_end(run, step, ok=False)
        raise StepFailed(step, last)

    async def _new_loss(self, step: str, rnd: Round) -> None:
        """After a failed attempt: when the provider now says a host is gone that this round
        did not know lost (or lost again once recreated), raise ``NewLoss``: the failure is
        that loss, which the next round recovers, not a reason to retry or fail."""
        try:
            obs = await self._observe()
        except Exception:  # no answer: the attempt's own retries go on
            return
        diag = dx.diagnose(obs)
        known = set(rnd.diagnosis.to_recreate) - set(rnd.recreated)
        new = [
            h
            for h in diag.hosts_in(cx.HostCondition.LOST, cx.HostCondition.NOTICE)
            if h not in known
        ]
        if new:
            raise NewLoss(step, obs, diag)

    async def _attempts(
        self, run: Run, step: StepDef, hosts: list[str], rnd: Round | None = None
    ) -> ActionResult:
        name = step.name
        host_states = {h: "running" for h in hosts}
        self._set(
            run,
            name,
            state=StepState.RUNNING,
            started_at=self._clock(),
            hosts=dict(host_states),
            message=f"{len(hosts)} host(s)" if hosts else "",
        )
        per_host: dict[str, HostResult] = {}
        pending = list(hosts)
        attempts = self.settings.step_retries + 1
        merged: dict[str, Any] = {}
        last_msg = ""
        for attempt in range(1, attempts + 1):
            self._set(run, name, attempts=attempt)
            token = STEP_NOTE.set(lambda text: self._set(run, name, message=text))
            try:
                res = await step.run(pending)
            except Exception as exc:  # an op that raises is a failed attempt, with its reason
                res = ActionResult(action=name, ok=False, elapsed_s=0.0, message=repr(exc))
            finally:
                STEP_NOTE.reset(token)
            last_msg = res.message
            _merge(merged, res.data)
            for h, hr in res.per_host.items():
                per_host[h] = hr
                host_states[h] = "ok" if hr.ok else "failed"
            failed_hosts = [h for h in pending if h in res.per_host and not res.per_host[h].ok]
            if step.per_host and failed_hosts:
                pending = failed_hosts  # the next attempt re-runs only these
            elif res.ok:
                for h in pending:
                    host_states[h] = "ok"
                result = ActionResult(
                    action=name,
                    ok=True,
                    elapsed_s=self._elapsed(run, name),
                    per_host=per_host,
                    message=res.message,
                    data=merged,
                )
                self._set(
                    run,
                    name,
                    state=StepState.OK,
                    hosts=dict(host_states),
                    elapsed_s=result.elapsed_s,
                    message=res.message or (f"ok on {', '.join(hosts)}" if hosts else "ok"),
                )
                await self._end_step(run, name, result, publish_state=False)
                return result
            reason = _failure_reason(res, pending)
            self._set(
                run,
                name,
                hosts=dict(host_states),
                message=f"attempt {attempt}/{attempts} failed: {reason}",
            )
            if rnd is not None:
                try:
                    await self._new_loss(name, rnd)
                except NewLoss as loss:
                    self._set(
                        run,
                        name,
                        state=StepState.FAILED,
                        elapsed_s=self._elapsed(run, name),
                        message=str(loss),
                    )
                    await self._end_step(
                        run,
                        name,
                        replace(
                            res,
                            ok=False,
                            elapsed_s=self._elapsed(run, name),
                            message=str(loss),
                            per_host=per_host,
                            data=merged,
                        ),
                        publish_state=False,
                    )
                    raise
            if attempt < attempts:
                await self._sleep(self.settings.backoff_s * 2 ** (attempt - 1))
        result = ActionResult(
            action=name,
            ok=False,
            elapsed_s=self._elapsed(run, name),
            per_host=per_host,
            message=last_msg,
            data=merged,
        )
        reason = _failure_reason(result, pending)
        self._set(
            run,
            name,
            state=StepState.FAILED,
            elapsed_s=result.elapsed_s,
            message=f"failed after {attempts} attempt(s): {reason}",
        )
        await self._end_step(run, name, result, publish_state=False)
        raise StepFailed(name, reason)

    # -- records ---------------------------------------------------------------------------------
    async def _skip(self, run: Run, step: str, reason: str) -> None:
        self._set(run, step, state=StepState.SKIPPED, message=reason)
        await self._sink.record(
            ActionResult(
                action=f"recovery.{step}",
                ok=True,
                elapsed_s=0.0,
                message=f"SKIPPED: {reason}",
                data={"state": "skipped"},
            ),
            run.actor,
        )

    async def _end_step(
        self, run: Run, step: str, result: ActionResult, publish_state: bool = True
    ) -> None:
        if publish_state:
            self._set(
                run,
                step,
                state=StepState.OK if result.ok else StepState.FAILED,
                elapsed_s=result.elapsed_s,
                message=result.message,
            )
        await self._sink.record(
            replace(
                result,
                action=f"recovery.{step}",
                data={**result.data, "state": run.steps[step].state},
            ),
            run.actor,
        )

    async def _record_step_end(self, run: Run, step: str, ok: bool) -> None:
        st = run.steps[step]
        await self._sink.record(
            ActionResult(
                action=f"recovery.{step}",
                ok=ok,
                elapsed_s=st.elapsed_s,
                message=st.message,
                data={"state": st.state},
            ),
            run.actor,
        )

    def _elapsed(self, run: Run, step: str) -> float:
        started = run.steps[step].started_at
        return 0.0 if started is None else max(0.0, self._clock() - started)

    def _set(self, run: Run, step: str, **changes: Any) -> None:
        run.steps[step] = replace(run.steps[step], **changes)
        self.publish_status()

    def publish_status(self) -> None:
        run = self._run
        if run is None:
            self.status = replace(self.status, auto=self.auto)
        else:
            self.status = RecoveryStatus(
                active=run.outcome is None,
                auto=self.auto,
                steps=tuple(run.steps[s] for s in self.plan.names),
                trigger=run.trigger,
                started_at=run.started_at,
                detected_at=run.detected_at,
                detect_s=run.detect_s,
                mttr_s=run.mttr_s,
                outcome=run.outcome,
                failed_step=run.failed_step,
            )
        self._publish(self.status)

    async def _event(
        self, kind: str, message: str, *, actor: str, data: Mapping[str, Any] | None = None
    ) -> None:
        await self._sink.emit(
            Event(
                at=self._clock(),
                kind=kind,
                message=message,
                actor=actor,
                data=dict(data or {}),
            )
        )


def union(a: Sequence[str], b: Sequence[str] | Any) -> list[str]:
    """``a`` then what ``b`` adds, in order, without repeats."""
    out = list(a)
    for x in b or ():
        if x not in out:
            out.append(x)
    return out


def _merge(merged: dict[str, Any], data: Mapping[str, Any]) -> None:
    for key, value in data.items():
        if isinstance(value, Mapping):
            merged.setdefault(key, {}).update(value)
        elif isinstance(value, list | tuple):
            merged[key] = union(merged.get(key, ()), value)
        else:
            merged[key] = value


def _failure_reason(res: ActionResult, pending: Sequence[str]) -> str:
    parts = []
    for h in pending:
        hr = res.per_host.get(h)
        if hr is not None and not hr.ok:
            why = hr.error or (hr.stderr_tail.strip().splitlines() or [""])[-1]
            if not why and hr.exit_status is not None:
                why = f"exit {hr.exit_status}"
            parts.append(f"{h}: {why or 'failed'}")
    if parts:
        return "; ".join(parts)
    return res.message or "failed"
