"""The recovery watchdog: seed 000's "when a spot VM gets reclaimed" loop as a state machine.

    DETECT -> RECREATE -> WAIT_READY -> BOOTSTRAP -> HEAD -> WORKERS -> TUNNEL -> RESUBMIT -> VERIFY

The machine is pure decision logic over two injected things:

* ``RecoveryOps`` — what the *cluster* can do (observe every layer; recreate hosts; wait for
  READY; bootstrap; start the Ray head; join workers; open the tunnel; resubmit jobs).
  ``ClusterServices`` implements it with the real TPU/SSH/Ray/job services; unit tests use a
  small fake cluster.
* a journal + a publish callback, so every step start/end (per-host results, duration, actor)
  is recorded and every status change reaches the front ends.

Decisions are made from an ``Observation`` by ``diagnose`` (a pure function):

* a host whose TPU state is PREEMPTED/TERMINATED/DELETED, or READY but unreachable over SSH
  with no live Ray node, is *lost*: recreate it, wait READY, bootstrap it, rejoin it;
* a host whose VM is fine but whose Ray node is gone (or doubled on one IP) only rejoins —
  RECREATE/WAIT_READY/BOOTSTRAP are SKIPPED with the reason, never silently;
* when the head is lost (its host lost, or the GCS unreachable) everything is rebuilt: all
  hosts bootstrapped, a new head, all workers rejoin, the tunnel re-opened and the jobs that
  were active on the old head resubmitted with the same spec (sweeps keep their sweep id).

One recovery runs at a time; a second request joins it. Each step is retried with backoff
(``step_retries``; host-wide steps retry only the hosts that failed) and then reported as
failed, which ends the recovery with ``result="failed: <step>"``. VERIFY polls until the
cluster is back (N hosts READY, one live Ray node per host, tunnel up, resubmitted jobs
RUNNING, no new metric stall); if it sees a new loss meanwhile it runs another round.

Time to detect is measured from the provider's preemption time when known (the emulator and
the TPU API report it), otherwise from the last healthy poll (an upper bound). MTTR runs from
detection to a verified cluster.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any, Protocol

from console.services.model import (
    ActionResult,
    Event,
    HostResult,
    HostState,
    JobInfo,
    RecoveryStatus,
    RecoveryStep,
    StepState,
    Update,
)

log = logging.getLogger(__name__)


class Step(StrEnum):
    DETECT = "detect"
    RECREATE = "recreate"
    WAIT_READY = "wait_ready"
    BOOTSTRAP = "bootstrap"
    HEAD = "head"
    WORKERS = "workers"
    TUNNEL = "tunnel"
    RESUBMIT = "resubmit"
    VERIFY = "verify"


STEPS: tuple[Step, ...] = tuple(Step)

# TPU v2 node states (google.cloud.tpu_v2.Node.State names), grouped by what they mean here.
LOST_STATES = frozenset({"PREEMPTED", "TERMINATED", "DELETED", "DELETING"})
TRANSITIONAL_STATES = frozenset({"CREATING", "REPAIRING", "RESTARTING", "STARTING"})
ACTIVE_JOB_STATES = frozenset({"PENDING", "RUNNING"})


class HostCondition(StrEnum):
    OK = "ok"
    LOST = "lost"  # the VM is gone (preempted/terminated) or unusable: recreate it
    NOT_READY = "not_ready"  # the API says it is coming up: wait for READY
    UNREACHABLE = "unreachable"  # READY, but SSH fails and no Ray node is alive on it
    RAY_DOWN = "ray_down"  # VM fine, no live Ray node on its IP: rejoin only
    DUPLICATE = "duplicate"  # two or more live Ray nodes on one IP: restart Ray there
    UNKNOWN = "unknown"  # the API did not answer for it: report, do nothing yet


# Conditions confirmed by the provider itself act at once; the others could be a blip (one
# slow SSH handshake, a Ray state query racing a node registration), so auto recovery waits
# for them to persist over ``confirm_polls`` observations.
HARD_CONDITIONS = frozenset({HostCondition.LOST})
SOFT_CONDITIONS = frozenset(
    {HostCondition.UNREACHABLE, HostCondition.RAY_DOWN, HostCondition.DUPLICATE}
)


@dataclass(frozen=True)
class HostObservation:
    """One host, seen through every layer in one poll."""

    name: str
    ip: str
    tpu_state: str = HostState.UNKNOWN
    health: str = ""
    symptoms: tuple[str, ...] = ()
    ssh_ok: bool | None = None  # None: not probed
    ray_alive: int = 0  # live Ray nodes with this IP
    preempted_at: float | None = None  # provider's event time, when it reports one


@dataclass(frozen=True)
class Observation:
    """The cluster as one poll saw it. ``head`` names the host that should run the Ray head."""

    at: float
    hosts: tuple[HostObservation, ...]
    head: str
    ray_reachable: bool = False  # the Ray state API (GCS) answered
    tunnel_up: bool | None = None  # None: no tunnel was ever asked for
    jobs: tuple[JobInfo, ...] = ()  # jobs this console submitted, as the live head reports them
    stalled_runs: tuple[str, ...] = ()  # metric cadence stalls (run ids)
    error: str = ""  # a layer that failed to answer, for the message

    def host(self, name: str) -> HostObservation | None:
        return next((h for h in self.hosts if h.name == name), None)


@dataclass(frozen=True)
class Diagnosis:
    conditions: Mapping[str, HostCondition]
    head: str
    head_lost: bool
    head_reason: str
    tunnel_down: bool
    stalled_runs: tuple[str, ...] = ()
    symptoms: tuple[str, ...] = ()

    def hosts_in(self, *conds: HostCondition) -> tuple[str, ...]:
        return tuple(h for h, c in self.conditions.items() if c in conds)

    @property
    def to_recreate(self) -> tuple[str, ...]:
        return self.hosts_in(HostCondition.LOST, HostCondition.UNREACHABLE)

    @property
    def needs_recovery(self) -> bool:
        """Something a recovery step can fix (a stall alone is reported, not "fixed")."""
        bad = {HostCondition.LOST, HostCondition.NOT_READY} | SOFT_CONDITIONS
        return self.head_lost or self.tunnel_down or any(c in bad for c in self.conditions.values())

    @property
    def hard(self) -> bool:
        return any(c in HARD_CONDITIONS for c in self.conditions.values())

    @property
    def healthy(self) -> bool:
        return not self.needs_recovery and not self.stalled_runs

    def summary(self) -> str:
        return "; ".join(self.symptoms) if self.symptoms else "healthy"


def classify_host(h: HostObservation, ray_reachable: bool) -> HostCondition:
    state = str(h.tpu_state)
    if state in LOST_STATES:
        return HostCondition.LOST
    if state in TRANSITIONAL_STATES:
        return HostCondition.NOT_READY
    if state != HostState.READY:
        return HostCondition.UNKNOWN
    if h.ssh_ok is False and h.ray_alive == 0:
        return HostCondition.UNREACHABLE
    if ray_reachable and h.ray_alive == 0:
        return HostCondition.RAY_DOWN
    if h.ray_alive > 1:
        return HostCondition.DUPLICATE
    return HostCondition.OK


def diagnose(obs: Observation) -> Diagnosis:
    """Every layer of one observation -> what is wrong and where (pure)."""
    conditions = {h.name: classify_host(h, obs.ray_reachable) for h in obs.hosts}
    symptoms: list[str] = []
    for h in obs.hosts:
        cond = conditions[h.name]
        if cond is HostCondition.OK:
            continue
        detail = {
            HostCondition.LOST: f"TPU state {h.tpu_state}",
            HostCondition.NOT_READY: f"TPU state {h.tpu_state}",
            HostCondition.UNREACHABLE: "SSH unreachable, no live Ray node",
            HostCondition.RAY_DOWN: "no live Ray node (VM fine)",
            HostCondition.DUPLICATE: f"{h.ray_alive} live Ray nodes on {h.ip}",
            HostCondition.UNKNOWN: f"TPU state {h.tpu_state}",
        }[cond]
        extra = f" [{', '.join(h.symptoms)}]" if h.symptoms else ""
        symptoms.append(f"{h.name}: {detail}{extra}")
    head_cond = conditions.get(obs.head, HostCondition.UNKNOWN)
    head_lost, head_reason = False, ""
    if head_cond in (HostCondition.LOST, HostCondition.NOT_READY, HostCondition.UNREACHABLE):
        head_lost, head_reason = True, f"head host {obs.head} is {head_cond}"
    elif not obs.ray_reachable and head_cond is not HostCondition.UNKNOWN:
        head_lost, head_reason = True, "Ray GCS on the head does not answer"
    elif head_cond is HostCondition.RAY_DOWN:
        head_lost, head_reason = True, f"no live Ray node on head host {obs.head}"
    if head_lost:
        symptoms.append(f"head lost: {head_reason}")
    tunnel_down = obs.tunnel_up is False and not head_lost
    if tunnel_down:
        symptoms.append("dashboard tunnel down")
    if obs.stalled_runs:
        symptoms.append(f"metrics stalled: {', '.join(obs.stalled_runs)}")
    return Diagnosis(
        conditions=conditions,
        head=obs.head,
        head_lost=head_lost,
        head_reason=head_reason,
        tunnel_down=tunnel_down,
        stalled_runs=tuple(obs.stalled_runs),
        symptoms=tuple(symptoms),
    )


class RecoveryOps(Protocol):
    """What the cluster can do. Every method is idempotent and returns per-host results.

    ``recreate`` reports the hosts it really recreated in ``data["hosts"]`` (a provider that
    can only recreate whole nodes returns all of them); ``resubmit`` reports
    ``data["resubmitted"] = {old_job_id: new_job_id}``.
    """

    async def observe(self) -> Observation: ...

    async def recreate(self, hosts: Sequence[str]) -> ActionResult: ...

    async def wait_ready(self, hosts: Sequence[str], timeout_s: float) -> ActionResult: ...

    async def bootstrap(self, hosts: Sequence[str]) -> ActionResult: ...

    async def start_head(self) -> ActionResult: ...

    async def join_workers(self, hosts: Sequence[str]) -> ActionResult: ...

    async def open_tunnel(self) -> ActionResult: ...

    async def resubmit(self, job_ids: Sequence[str]) -> ActionResult: ...


class WatchdogJournal(Protocol):
    async def record_event(self, event: Event) -> None: ...

    async def record_action(self, result: ActionResult, actor: str) -> None: ...


class StepFailed(Exception):
    def __init__(self, step: Step, message: str) -> None:
        self.step = step
        super().__init__(f"{step}: {message}")


@dataclass
class _Run:
    """Mutable bookkeeping of one recovery (the published view is ``RecoveryStatus``)."""

    actor: str
    trigger: str
    started_at: float
    detected_at: float
    detect_s: float | None
    steps: dict[Step, RecoveryStep] = field(default_factory=dict)
    result: str = ""
    mttr_s: float | None = None
    did_something: bool = False


class Watchdog:
    """Detection bookkeeping on every observation, and the recovery state machine."""

    def __init__(
        self,
        ops: RecoveryOps,
        *,
        publish: Callable[[Update], None],
        journal: WatchdogJournal | None = None,
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
    ) -> None:
        self._ops = ops
        self._publish = publish
        self._journal = journal
        self._auto = auto
        self.poll_interval_s = poll_interval_s
        self.step_retries = step_retries
        self.ready_timeout_s = ready_timeout_s
        self.verify_timeout_s = (
            verify_timeout_s if verify_timeout_s is not None else max(120.0, ready_timeout_s)
        )
        self.backoff_s = backoff_s
        self.confirm_polls = max(1, confirm_polls)
        self.max_rounds = max(1, max_rounds)
        # The facade's cadence tracker journals stalls itself (with silence and threshold);
        # then the watchdog only uses them, so each stall is one journal row.
        self.emit_stall_events = emit_stall_events
        self._held = 0
        self._background: set[asyncio.Task[None]] = set()
        self._clock = clock
        self._sleep = sleep
        self._task: asyncio.Task[RecoveryStatus] | None = None
        self._run: _Run | None = None
        self._status = RecoveryStatus(active=False, auto=auto)
        # detection state
        self._armed = False
        self._disarmed_at = float("-inf")
        self._last_healthy_at: float | None = None
        self._unhealthy_since: float | None = None
        self._detect_s: float | None = None
        self._unhealthy_polls = 0
        self._conditions: dict[str, HostCondition] = {}
        self._tpu_states: dict[str, str] = {}
        self._head_lost = False
        self._tunnel_down = False
        self._stalled: set[str] = set()
        self._active_jobs: dict[str, JobInfo] = {}
        self._next_auto_at = 0.0
        self._auto_failures = 0
        self.last_diagnosis: Diagnosis | None = None

    # -- public state ---------------------------------------------------------------------------
    @property
    def status(self) -> RecoveryStatus:
        return self._status

    @property
    def auto(self) -> bool:
        return self._auto

    @property
    def armed(self) -> bool:
        return self._armed

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    @property
    def active_jobs(self) -> dict[str, JobInfo]:
        return dict(self._active_jobs)

    def set_auto(self, enabled: bool, actor: str = "user") -> None:
        """Switch auto recovery; published at once, journaled in the background."""
        self._auto = enabled
        self._status = replace(self._status, auto=enabled)
        self._publish(self._status)
        coro = self._event("watchdog", f"auto recovery {'on' if enabled else 'off'}", actor=actor)
        try:
            task = asyncio.get_running_loop().create_task(coro)
        except RuntimeError:  # no loop (a synchronous caller): publish only
            coro.close()
            return
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def flush(self) -> None:
        """Wait for background journal writes (tests, shutdown)."""
        while self._background:
            await asyncio.gather(*list(self._background), return_exceptions=True)

    @contextlib.contextmanager
    def suspended(self) -> Iterator[None]:
        """No auto recovery starts inside (a user action is reshaping the cluster)."""
        self._held += 1
        try:
            yield
        finally:
            self._held -= 1
            self._unhealthy_polls = 0

    def arm(self) -> None:
        """Start treating deviations as failures (after the cluster was formed once)."""
        self._armed = True
        self._auto_failures = 0
        self._next_auto_at = 0.0

    def disarm(self) -> None:
        """Teardown or a user action reshaping the cluster: don't "recover" what is intended."""
        self._armed = False
        self._disarmed_at = self._clock()
        self._unhealthy_since = None
        self._unhealthy_polls = 0
        self._active_jobs = {}  # their cluster is gone on purpose: nothing to resubmit

    # -- detection ------------------------------------------------------------------------------
    async def on_observation(self, obs: Observation) -> Diagnosis:
        """Feed one poll. Publishes edge-triggered events; starts a recovery when auto."""
        diag = diagnose(obs)
        self.last_diagnosis = diag
        await self._emit_transitions(obs, diag)
        if self.running:
            # The recovery owns the bookkeeping until it is verified; a poll racing a new head
            # (which knows no jobs yet) must not erase the list of jobs to resubmit.
            return diag
        if obs.ray_reachable and not diag.head_lost:
            self._active_jobs = {j.job_id: j for j in obs.jobs if j.status in ACTIVE_JOB_STATES}
        if not diag.needs_recovery:
            self._last_healthy_at = obs.at
            self._unhealthy_since = None
            self._detect_s = None
            self._unhealthy_polls = 0
            if self._fully_formed(obs) and not self._held and obs.at > self._disarmed_at:
                # Ray is fully up (a console restarted over a running cluster): guard it. Not
                # while a user action runs (a teardown's first polls still see Ray up), nor
                # from a poll that began before the last disarm.
                self._armed = True
            return diag
        if self._unhealthy_since is None:
            self._unhealthy_since = obs.at
            self._detect_s = self.detect_delay(obs, diag)
        elif diag.hard and self._detect_s is None:
            self._detect_s = self.detect_delay(obs, diag)
        self._unhealthy_polls += 1
        if not (self._auto and self._armed) or self._held:
            return diag
        # A head whose VM is gone (hard) acts at once; a head that only looks lost (GCS
        # silent, no Ray node, SSH failing on a READY VM) may be a slow poll on a loaded
        # box, and restarting the whole cluster kills every job: confirm it first.
        confirmed = diag.hard or self._unhealthy_polls >= self.confirm_polls
        if confirmed and self._clock() >= self._next_auto_at:
            self.start_recovery(actor="watchdog", trigger=diag.summary(), observation=obs)
        return diag

    def _fully_formed(self, obs: Observation) -> bool:
        return bool(obs.hosts) and obs.ray_reachable and all(h.ray_alive == 1 for h in obs.hosts)

    def detect_delay(self, obs: Observation, diag: Diagnosis) -> float | None:
        """Time to detect: from the provider's event time if known, else the last healthy poll."""
        times = [
            h.preempted_at
            for h in obs.hosts
            if h.preempted_at is not None and diag.conditions.get(h.name) is HostCondition.LOST
        ]
        if times:
            return max(0.0, obs.at - min(times))
        if self._last_healthy_at is not None:
            return max(0.0, obs.at - self._last_healthy_at)
        return None

    async def _emit_transitions(self, obs: Observation, diag: Diagnosis) -> None:
        for h in obs.hosts:
            before_state = self._tpu_states.get(h.name)
            if before_state is not None and before_state != h.tpu_state:
                await self._event(
                    "state_change",
                    f"{h.name}: TPU state {before_state} -> {h.tpu_state}",
                    host=h.name,
                    data={"from": before_state, "to": str(h.tpu_state)},
                )
            self._tpu_states[h.name] = str(h.tpu_state)
            cond = diag.conditions[h.name]
            before = self._conditions.get(h.name, HostCondition.OK)
            self._conditions[h.name] = cond
            if cond == before or cond in (HostCondition.OK, HostCondition.NOT_READY):
                continue
            if cond in SOFT_CONDITIONS and not self._armed:
                continue  # a cluster never formed (or torn down) has no Ray to lose
            kind = {
                HostCondition.LOST: "preempted"
                if str(h.tpu_state) == HostState.PREEMPTED
                else "host_lost",
                HostCondition.UNREACHABLE: "host_unreachable",
                HostCondition.RAY_DOWN: "ray_node_down",
                HostCondition.DUPLICATE: "duplicate_ray_node",
                HostCondition.UNKNOWN: "host_unknown",
            }[cond]
            data: dict[str, Any] = {"tpu_state": str(h.tpu_state), "ip": h.ip}
            if h.symptoms:
                data["symptoms"] = list(h.symptoms)
            if cond is HostCondition.LOST:
                delay = self.detect_delay(obs, diag)
                if delay is not None:
                    data["detect_s"] = round(delay, 3)
                if h.preempted_at is not None:
                    data["preempted_at"] = h.preempted_at
            if cond is HostCondition.DUPLICATE:
                data["ray_nodes"] = h.ray_alive
            await self._event(kind, f"{h.name}: {_cond_text(cond, h)}", host=h.name, data=data)
        if diag.head_lost and not self._head_lost and self._armed:
            await self._event("head_lost", diag.head_reason, host=diag.head)
        self._head_lost = diag.head_lost
        if diag.tunnel_down and not self._tunnel_down and self._armed:
            await self._event("tunnel_down", "dashboard tunnel is down")
        self._tunnel_down = diag.tunnel_down
        if not self.emit_stall_events:
            self._stalled = set(diag.stalled_runs)
            return
        for run in sorted(set(diag.stalled_runs) - self._stalled):
            await self._event("stalled", f"run {run}: metrics stalled", data={"run_id": run})
        for run in sorted(self._stalled - set(diag.stalled_runs)):
            await self._event(
                "cadence_resumed", f"run {run}: metrics resumed", data={"run_id": run}
            )
        self._stalled = set(diag.stalled_runs)

    # -- recovery -------------------------------------------------------------------------------
    def start_recovery(
        self, actor: str = "user", trigger: str = "", observation: Observation | None = None
    ) -> asyncio.Task[RecoveryStatus]:
        """Start the loop, or return the running one (one recovery at a time)."""
        if self._task is not None and not self._task.done():
            return self._task
        now = self._clock()
        detect_s = None
        detected_at = now
        if self._unhealthy_since is not None:
            # The poller saw the problem first: MTTR counts from then, not from the request.
            detected_at, detect_s = self._unhealthy_since, self._detect_s
        elif observation is not None:
            detected_at = observation.at
            detect_s = self.detect_delay(observation, diagnose(observation))
        self._run = _Run(
            actor=actor,
            trigger=trigger or "requested",
            started_at=now,
            detected_at=detected_at,
            detect_s=detect_s,
            steps={s: RecoveryStep(name=str(s)) for s in STEPS},
        )
        self._publish_status()
        self._task = asyncio.create_task(self._recover(self._run, observation))
        return self._task

    async def recover(self, actor: str = "user", timeout_s: float | None = None) -> RecoveryStatus:
        """Run the loop now (or join the running one) and wait for it, up to ``timeout_s``."""
        task = self.start_recovery(actor=actor, trigger=f"requested by {actor}")
        try:
            return await asyncio.wait_for(asyncio.shield(task), timeout_s)
        except TimeoutError:
            return self._status

    async def wait_idle(self) -> None:
        """Return once no recovery runs (its outcome is in ``status``)."""
        task = self._task
        if task is not None and not task.done():
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await asyncio.shield(task)

    async def close(self) -> None:
        if self._task is not None and not self._task.done():
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _recover(self, run: _Run, observation: Observation | None) -> RecoveryStatus:
        await self._event(
            "recovery_started",
            f"recovery started: {run.trigger}",
            actor=run.actor,
            data={"detect_s": run.detect_s} if run.detect_s is not None else None,
        )
        failed: StepFailed | None = None
        try:
            for rnd in range(1, self.max_rounds + 1):
                if rnd > 1:
                    run.steps = {
                        s: RecoveryStep(name=str(s), message=f"round {rnd}") for s in STEPS
                    }
                    self._publish_status()
                again = await self._round(run, observation if rnd == 1 else None, rnd)
                if not again:
                    break
            else:
                raise StepFailed(Step.VERIFY, f"cluster not stable after {self.max_rounds} rounds")
        except StepFailed as exc:
            failed = exc
        except asyncio.CancelledError:
            run.result = "failed: cancelled"
            self._finish(run)
            await self._event("recovery_failed", "recovery cancelled", actor=run.actor)
            raise
        except Exception as exc:  # a bug in an op must surface as a failed recovery, not vanish
            log.exception("recovery crashed")
            current = next(
                (s for s, st in run.steps.items() if st.state == StepState.RUNNING), Step.DETECT
            )
            self._set(run, current, state=StepState.FAILED, message=f"crashed: {exc!r}")
            failed = StepFailed(current, repr(exc))
        now = self._clock()
        if failed is not None:
            run.result = f"failed: {failed.step}"
            self._finish(run)
            self._auto_failures += 1
            self._next_auto_at = now + min(
                600.0, self.poll_interval_s * 2 ** min(self._auto_failures, 8)
            )
            await self._event(
                "recovery_failed",
                f"recovery failed at {failed.step}: {failed}",
                actor=run.actor,
                data={"step": str(failed.step)},
            )
        else:
            run.result = "ok"
            run.mttr_s = now - run.detected_at if run.did_something else None
            self._auto_failures = 0
            self._finish(run)
            data: dict[str, Any] = {"mttr_s": run.mttr_s, "detect_s": run.detect_s}
            msg = (
                f"cluster recovered in {run.mttr_s:.1f}s"
                if run.mttr_s is not None
                else "cluster healthy: nothing to recover"
            )
            await self._event("recovered", msg, actor=run.actor, data=data)
        return self._status

    async def _round(self, run: _Run, observation: Observation | None, rnd: int) -> bool:
        """One pass over the steps. True means VERIFY saw a new loss: run another round."""
        # DETECT ------------------------------------------------------------------------------
        self._set(run, Step.DETECT, state=StepState.RUNNING, started_at=self._clock(), attempts=1)
        if observation is None:
            observation = await self._retry_observe(run)
        diag = diagnose(observation)
        if observation.ray_reachable and not diag.head_lost:
            self._active_jobs = {
                j.job_id: j for j in observation.jobs if j.status in ACTIVE_JOB_STATES
            }
        jobs_at_start = dict(self._active_jobs)
        await self._end_step(
            run,
            Step.DETECT,
            ActionResult(
                action="detect",
                ok=True,
                elapsed_s=self._elapsed(run, Step.DETECT),
                per_host={
                    h: HostResult(host=h, ok=c is HostCondition.OK, error="" if c == "ok" else c)
                    for h, c in diag.conditions.items()
                },
                message=diag.summary(),
            ),
        )
        stalled_at_start = set(diag.stalled_runs)
        all_hosts = [h.name for h in observation.hosts]
        head = observation.head
        workers = [h for h in all_hosts if h != head]
        if diag.needs_recovery:
            run.did_something = True

        # RECREATE ----------------------------------------------------------------------------
        to_recreate = list(diag.to_recreate)
        recreated: list[str] = []
        if to_recreate:
            res = await self._do_hosts(
                run, Step.RECREATE, to_recreate, lambda hs: self._ops.recreate(hs)
            )
            recreated = _union(to_recreate, res.data.get("hosts", ()))
        else:
            await self._skip(run, Step.RECREATE, "no host to recreate: every VM is up")
        head_lost = diag.head_lost or head in recreated

        # WAIT_READY --------------------------------------------------------------------------
        waiting = _union(recreated, diag.hosts_in(HostCondition.NOT_READY))
        if waiting:
            await self._do_hosts(
                run,
                Step.WAIT_READY,
                waiting,
                lambda hs: self._ops.wait_ready(hs, self.ready_timeout_s),
            )
        else:
            await self._skip(run, Step.WAIT_READY, "no host coming up")

        # BOOTSTRAP ---------------------------------------------------------------------------
        fresh = _union(recreated, diag.hosts_in(HostCondition.NOT_READY))
        to_bootstrap = list(all_hosts) if head_lost else fresh
        if to_bootstrap:
            await self._do_hosts(run, Step.BOOTSTRAP, to_bootstrap, self._ops.bootstrap)
        else:
            await self._skip(run, Step.BOOTSTRAP, "no fresh VM: every host kept its install")

        # HEAD --------------------------------------------------------------------------------
        if head_lost:
            await self._do(run, Step.HEAD, [head], lambda: self._ops.start_head())
        else:
            await self._skip(run, Step.HEAD, f"head on {head} is alive")

        # WORKERS -----------------------------------------------------------------------------
        if head_lost:
            to_join = list(workers)
        else:
            needing = diag.hosts_in(
                HostCondition.RAY_DOWN, HostCondition.DUPLICATE, HostCondition.NOT_READY
            )
            to_join = [h for h in _union(recreated, needing) if h != head]
        if to_join:
            await self._do_hosts(run, Step.WORKERS, to_join, self._ops.join_workers)
        elif not workers:
            await self._skip(run, Step.WORKERS, "single-host pod: no workers")
        else:
            await self._skip(run, Step.WORKERS, "every worker's Ray node is alive")

        # TUNNEL ------------------------------------------------------------------------------
        if head_lost or diag.tunnel_down:
            await self._do(run, Step.TUNNEL, [], lambda: self._ops.open_tunnel())
        else:
            await self._skip(run, Step.TUNNEL, "tunnel up and the head kept its address")

        # RESUBMIT ----------------------------------------------------------------------------
        resubmitted: dict[str, str] = {}
        if head_lost and jobs_at_start:
            lost = sorted(jobs_at_start)
            res = await self._do(run, Step.RESUBMIT, lost, lambda: self._ops.resubmit(lost))
            resubmitted = dict(res.data.get("resubmitted", {}))
            for old, new in resubmitted.items():
                await self._event(
                    "job_resubmitted",
                    f"job {old} lost with the head, resubmitted as {new}",
                    actor=run.actor,
                    data={"old_job_id": old, "new_job_id": new},
                )
        elif head_lost:
            await self._skip(run, Step.RESUBMIT, "no job was active on the lost head")
        else:
            n = len(jobs_at_start)
            await self._skip(run, Step.RESUBMIT, f"head kept: {n} active job(s) continue")

        # VERIFY ------------------------------------------------------------------------------
        return await self._verify(run, len(all_hosts), resubmitted, stalled_at_start)

    async def _verify(
        self, run: _Run, n_hosts: int, resubmitted: Mapping[str, str], stalled_before: set[str]
    ) -> bool:
        self._set(run, Step.VERIFY, state=StepState.RUNNING, started_at=self._clock(), attempts=1)
        deadline = self._clock() + self.verify_timeout_s
        unmet: list[str] = ["not checked yet"]
        while True:
            obs = await self._retry_observe(run, step=Step.VERIFY)
            diag = diagnose(obs)
            if diag.hosts_in(HostCondition.LOST):
                # Something new broke while we were recovering: report it and go again.
                self._set(
                    run,
                    Step.VERIFY,
                    state=StepState.FAILED,
                    elapsed_s=self._elapsed(run, Step.VERIFY),
                    message=f"new loss during recovery: {diag.summary()}",
                )
                await self._record_step_end(run, Step.VERIFY, ok=False)
                await self._emit_transitions(obs, diag)
                return True
            unmet = _unmet(obs, diag, n_hosts, resubmitted, stalled_before)
            self._set(run, Step.VERIFY, message="waiting: " + "; ".join(unmet) if unmet else "")
            if not unmet:
                break
            if self._clock() >= deadline:
                self._set(
                    run,
                    Step.VERIFY,
                    state=StepState.FAILED,
                    elapsed_s=self._elapsed(run, Step.VERIFY),
                    message=f"not back after {self.verify_timeout_s:.0f}s: " + "; ".join(unmet),
                )
                await self._record_step_end(run, Step.VERIFY, ok=False)
                raise StepFailed(Step.VERIFY, "; ".join(unmet))
            await self._sleep(self.poll_interval_s)
        if obs.ray_reachable:
            self._active_jobs = {j.job_id: j for j in obs.jobs if j.status in ACTIVE_JOB_STATES}
        silent = sorted(set(obs.stalled_runs) & stalled_before)
        msg = f"{obs_alive(obs)}/{n_hosts} Ray nodes alive"
        if obs.tunnel_up:
            msg += ", tunnel up"
        if resubmitted:
            msg += f", {len(resubmitted)} job(s) running again"
        if silent:
            msg += f"; still silent (superseded by resubmission): {', '.join(silent)}"
        self._set(
            run,
            Step.VERIFY,
            state=StepState.OK,
            elapsed_s=self._elapsed(run, Step.VERIFY),
            message=msg,
        )
        await self._record_step_end(run, Step.VERIFY, ok=True)
        self._last_healthy_at = obs.at
        self._unhealthy_since = None
        self._detect_s = None
        self._unhealthy_polls = 0
        self._armed = True
        return False

    async def _retry_observe(self, run: _Run, step: Step = Step.DETECT) -> Observation:
        attempts = self.step_retries + 1
        last = ""
        for attempt in range(1, attempts + 1):
            try:
                return await self._ops.observe()
            except Exception as exc:  # an unanswered poll is retried like any step
                last = f"observe failed: {exc}"
                self._set(run, step, attempts=attempt, message=last)
                if attempt < attempts:
                    await self._sleep(self.backoff_s * 2 ** (attempt - 1))
        self._set(run, step, state=StepState.FAILED, elapsed_s=self._elapsed(run, step))
        await self._record_step_end(run, step, ok=False)
        raise StepFailed(step, last)

    async def _do(
        self,
        run: _Run,
        step: Step,
        hosts: Sequence[str],
        op: Callable[[], Awaitable[ActionResult]],
    ) -> ActionResult:
        """A whole-cluster step: retried as a whole."""
        return await self._attempts(run, step, list(hosts), lambda _hs: op(), per_host_retry=False)

    async def _do_hosts(
        self,
        run: _Run,
        step: Step,
        hosts: Sequence[str],
        op: Callable[[Sequence[str]], Awaitable[ActionResult]],
    ) -> ActionResult:
        """A per-host step: a retry re-runs only the hosts that failed."""
        return await self._attempts(run, step, list(hosts), op, per_host_retry=True)

    async def _attempts(
        self,
        run: _Run,
        step: Step,
        hosts: list[str],
        op: Callable[[Sequence[str]], Awaitable[ActionResult]],
        *,
        per_host_retry: bool,
    ) -> ActionResult:
        host_states = {h: "running" for h in hosts}
        self._set(
            run,
            step,
            state=StepState.RUNNING,
            started_at=self._clock(),
            hosts=dict(host_states),
            message=f"{len(hosts)} host(s)" if hosts else "",
        )
        await self._event(
            "recovery_step",
            f"{step} started" + (f" on {', '.join(hosts)}" if hosts else ""),
            actor=run.actor,
            data={"step": str(step), "state": "running", "hosts": list(hosts)},
        )
        per_host: dict[str, HostResult] = {}
        pending = list(hosts)
        attempts = self.step_retries + 1
        merged_data: dict[str, Any] = {}
        last_msg = ""
        for attempt in range(1, attempts + 1):
            self._set(run, step, attempts=attempt)
            try:
                res = await op(pending)
            except Exception as exc:  # an op that raises is a failed attempt, with its reason
                res = ActionResult(action=str(step), ok=False, elapsed_s=0.0, message=repr(exc))
            last_msg = res.message
            for key, value in res.data.items():
                if isinstance(value, Mapping):
                    merged_data.setdefault(key, {}).update(value)
                elif isinstance(value, list | tuple):
                    merged_data[key] = _union(merged_data.get(key, ()), value)
                else:
                    merged_data[key] = value
            for h, hr in res.per_host.items():
                per_host[h] = hr
                host_states[h] = "ok" if hr.ok else "failed"
            failed_hosts = [h for h in pending if h in res.per_host and not res.per_host[h].ok]
            if per_host_retry and failed_hosts:
                pending = failed_hosts  # the next attempt re-runs only these
            elif res.ok:
                for h in pending:
                    host_states[h] = "ok"
                result = ActionResult(
                    action=str(step),
                    ok=True,
                    elapsed_s=self._elapsed(run, step),
                    per_host=per_host,
                    message=res.message,
                    data=merged_data,
                )
                self._set(
                    run,
                    step,
                    state=StepState.OK,
                    hosts=dict(host_states),
                    elapsed_s=result.elapsed_s,
                    message=_ok_message(res.message, hosts),
                )
                await self._end_step(run, step, result, publish_state=False)
                return result
            reason = _failure_reason(res, pending)
            self._set(
                run,
                step,
                hosts=dict(host_states),
                message=f"attempt {attempt}/{attempts} failed: {reason}",
            )
            if attempt < attempts:
                await self._sleep(self.backoff_s * 2 ** (attempt - 1))
        result = ActionResult(
            action=str(step),
            ok=False,
            elapsed_s=self._elapsed(run, step),
            per_host=per_host,
            message=last_msg,
            data=merged_data,
        )
        reason = _failure_reason(result, pending)
        self._set(
            run,
            step,
            state=StepState.FAILED,
            elapsed_s=result.elapsed_s,
            message=f"failed after {attempts} attempt(s): {reason}",
        )
        await self._end_step(run, step, result, publish_state=False)
        raise StepFailed(step, reason)

    async def _skip(self, run: _Run, step: Step, reason: str) -> None:
        self._set(run, step, state=StepState.SKIPPED, message=reason)
        await self._record(
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
        self, run: _Run, step: Step, result: ActionResult, publish_state: bool = True
    ) -> None:
        if publish_state:
            self._set(
                run,
                step,
                state=StepState.OK if result.ok else StepState.FAILED,
                elapsed_s=result.elapsed_s,
                message=result.message,
            )
        await self._record(
            replace(
                result,
                action=f"recovery.{step}",
                data={**result.data, "state": run.steps[step].state},
            ),
            run.actor,
        )

    async def _record_step_end(self, run: _Run, step: Step, ok: bool) -> None:
        st = run.steps[step]
        await self._record(
            ActionResult(
                action=f"recovery.{step}",
                ok=ok,
                elapsed_s=st.elapsed_s,
                message=st.message,
                data={"state": st.state},
            ),
            run.actor,
        )

    # -- helpers --------------------------------------------------------------------------------
    def _elapsed(self, run: _Run, step: Step) -> float:
        started = run.steps[step].started_at
        return 0.0 if started is None else max(0.0, self._clock() - started)

    def _set(self, run: _Run, step: Step, **changes: Any) -> None:
        run.steps[step] = replace(run.steps[step], **changes)
        self._publish_status()

    def _publish_status(self) -> None:
        run = self._run
        if run is None:
            return
        self._status = RecoveryStatus(
            active=run.result == "",
            auto=self._auto,
            steps=tuple(run.steps[s] for s in STEPS),
            trigger=run.trigger,
            started_at=run.started_at,
            detected_at=run.detected_at,
            detect_s=run.detect_s,
            mttr_s=run.mttr_s,
            result=run.result,
        )
        self._publish(self._status)

    def _finish(self, run: _Run) -> None:
        self._publish_status()

    async def _record(self, result: ActionResult, actor: str) -> None:
        if self._journal is None:
            return
        try:
            await self._journal.record_action(result, actor)
        except Exception:  # the journal is a record, not a dependency of recovering
            log.exception("journal: could not record %s", result.action)

    async def _event(
        self,
        kind: str,
        message: str,
        *,
        host: str = "",
        actor: str = "watchdog",
        data: Mapping[str, Any] | None = None,
    ) -> None:
        ev = Event(
            at=self._clock(), kind=kind, message=message, host=host, actor=actor, data=data or {}
        )
        self._publish(ev)
        if self._journal is None:
            return
        try:
            await self._journal.record_event(ev)
        except Exception:
            log.exception("journal: could not record event %s", kind)


def obs_alive(obs: Observation) -> int:
    return sum(1 for h in obs.hosts if h.ray_alive >= 1)


def _unmet(
    obs: Observation,
    diag: Diagnosis,
    n_hosts: int,
    resubmitted: Mapping[str, str],
    stalled_before: set[str],
) -> list[str]:
    unmet: list[str] = []
    not_ready = [h.name for h in obs.hosts if str(h.tpu_state) != HostState.READY]
    if not_ready:
        unmet.append(f"not READY: {', '.join(not_ready)}")
    unreachable = [h.name for h in obs.hosts if h.ssh_ok is False]
    if unreachable:
        unmet.append(f"SSH down: {', '.join(unreachable)}")
    if not obs.ray_reachable:
        unmet.append("Ray GCS not answering")
    else:
        alive = obs_alive(obs)
        if alive < n_hosts:
            missing = [h.name for h in obs.hosts if h.ray_alive == 0]
            unmet.append(f"{alive}/{n_hosts} Ray nodes alive (missing {', '.join(missing)})")
        dup = [h.name for h in obs.hosts if h.ray_alive > 1]
        if dup:
            unmet.append(f"duplicate Ray nodes on {', '.join(dup)}")
    if obs.tunnel_up is False:
        unmet.append("tunnel down")
    status = {j.job_id: j.status for j in obs.jobs}
    for old, new in resubmitted.items():
        st = status.get(new, "UNKNOWN")
        if st in ("FAILED", "STOPPED"):
            unmet.append(f"resubmitted job {new} (was {old}) is {st}")
        elif st not in ("RUNNING", "SUCCEEDED"):
            unmet.append(f"resubmitted job {new} is {st}")
    new_stalls = sorted(set(obs.stalled_runs) - stalled_before)
    if new_stalls:
        unmet.append(f"metrics stalled: {', '.join(new_stalls)}")
    return unmet


def _union(a: Sequence[str], b: Sequence[str] | Any) -> list[str]:
    out = list(a)
    for x in b or ():
        if x not in out:
            out.append(x)
    return out


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


def _ok_message(message: str, hosts: Sequence[str]) -> str:
    if message:
        return message
    return f"ok on {', '.join(hosts)}" if hosts else "ok"


def _cond_text(cond: HostCondition, h: HostObservation) -> str:
    return {
        HostCondition.LOST: f"VM lost (TPU state {h.tpu_state})",
        HostCondition.UNREACHABLE: "unreachable over SSH and no live Ray node",
        HostCondition.RAY_DOWN: "Ray node down (VM fine)",
        HostCondition.DUPLICATE: f"{h.ray_alive} live Ray nodes on {h.ip}",
        HostCondition.UNKNOWN: f"TPU state {h.tpu_state}",
    }.get(cond, str(cond))
