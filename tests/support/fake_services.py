"""The one fake of the services boundary (``ConsoleServices``), for every front-end test: the
TUI's Pilot and snapshot tests, ``--script`` and ``phantom status``.

It is not a mock of our services' logic: it answers with the published data model (fixed
data from ``fake_data``, at the fixed time ``T0``), publishes on a real ``UpdateBus`` what the
real services would publish, and records every call in ``calls``, so a test can press keys or
run a script and then assert "recover() was called", "submit() got these values", or, for an
invalid script, that nothing ran at all. ``Behaviour`` says how it misbehaves on demand
(fails, raises, hangs) and how submitted jobs move. Nothing here touches the network; the real
services are exercised against the emulators.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from console.config import Config, parse_config
from console.services.api import ConsoleServices, ServiceSettings
from console.services.jobs.spec import SubmitSpec
from console.services.jobs.workload import WorkloadPreview, WorkloadSpec
from console.services.model import (
    ACTIVE_JOBS,
    ActionResult,
    Event,
    EventKind,
    HostResult,
    JobInfo,
    JobStatus,
    LogLine,
    LogStreamClosed,
    PodSnapshot,
    RecoveryOutcome,
    RecoveryStatus,
    RunCadence,
    RunMetrics,
    Update,
)
from console.services.model.bus import UpdateBus
from console.wiring import capabilities_for
from console.wiring.settings import service_settings
from tests.support.fake_data import (
    NODE,
    RUNTIME_ENV,
    T0,
    events,
    gke_pod,
    grpo_cadence,
    healthy_pod,
    jobs,
    log_lines,
    preempted_pod,
    recovered,
    recovering,
    runs,
    tunix_metrics,
)

SCENARIOS = ("preempted", "healthy", "idle", "empty", "gke", "gke_preempted")


@dataclass
class Behaviour:
    """How the fake answers beyond its data."""

    fail: set[str] = field(default_factory=set)  # method names answering ok=False
    raise_in: dict[str, Exception] = field(default_factory=dict)  # method names raising
    hang: set[str] = field(default_factory=set)  # never return (until cancelled)
    # The statuses a job submitted here walks through, one per job_status (the last repeats).
    job_statuses: list[JobStatus] = field(
        default_factory=lambda: [JobStatus.RUNNING, JobStatus.SUCCEEDED]
    )
    logs: str | None = None  # a job's log text (None: the fixture's lines)
    reachable: bool = True  # False: the snapshot says the TPU API is unreachable
    publish_job_updates: bool = True
    job_updates_as_events: bool = False  # publish Event(kind=job_state) like JobWatcher
    resubmit_on_recover: bool = False
    announce_resubmission: bool = True  # False: only the shared registry knows (another process)
    action_data: dict[str, Any] = field(default_factory=dict)


@dataclass
class Call:
    name: str
    args: dict[str, Any] = field(default_factory=dict)

    def as_tuple(self) -> tuple[Any, ...]:
        return (self.name, *self.args.values())


class FakeServices:
    """Implements ``ConsoleServices`` over a scenario's data; ``calls`` records every call
    (``on_call`` hears each too: a subprocess test writes them to a file)."""

    def __init__(
        self,
        scenario: str = "preempted",
        *,
        config: Config | None = None,
        close_early: bool = True,
        n_hosts: int = 4,
        behaviour: Behaviour | None = None,
        on_call: Callable[[Call], None] | None = None,
    ) -> None:
        assert scenario in SCENARIOS, scenario
        gke = scenario in ("gke", "gke_preempted")
        self.config = config or (
            parse_config({"cluster": {"provider": "gke"}})
            if gke
            else Config(runtime_env=RUNTIME_ENV)
        )
        # The real declarations of the backend this config picks (and its emulator's verbs).
        self.capabilities = capabilities_for(self.config)
        self._settings: tuple[Config, ServiceSettings] | None = None
        self.b = behaviour or Behaviour()
        self.bus = UpdateBus()
        self.calls: list[Call] = []
        self._on_call = on_call
        self.close_early = close_early
        self.recovery = recovered()
        if scenario in ("healthy", "idle"):
            self.pod = healthy_pod(n_hosts)
        elif gke:
            self.pod = gke_pod(preempted=scenario == "gke_preempted")
        elif scenario == "empty":
            self.pod = PodSnapshot(at=0.0, provider="local", node_name=NODE)
        else:
            self.pod = preempted_pod()
            self.recovery = recovering()
        if scenario in ("idle", "empty"):
            self.recovery = RecoveryStatus(active=False, auto=True)
        if not self.b.reachable:
            self.pod = PodSnapshot(
                at=T0,
                provider=self.config.cluster.provider,
                node_name=self.config.cluster.node_name,
                warnings=("TPU API unreachable: connection refused",),
            )
        fixtures = scenario not in ("idle", "empty")
        self.jobs = {j.job_id: j for j in jobs()} if fixtures else {}
        self.runs = runs()[:1] if scenario == "idle" else runs() if fixtures else []
        # Published by start(), as the cadence poller publishes them (there is no getter).
        self.metrics: list[RunMetrics] = []
        if gke:
            self.runs = [grpo_cadence()]
            self.metrics = [tunix_metrics()]
        self.events_list = events() if fixtures else []
        self.started = False
        self.stopped = False
        self.live: dict[str, asyncio.Queue[LogLine | None]] = {}
        self._walks: dict[str, tuple[list[JobStatus], int]] = {}  # jobs submitted here
        self._successor: dict[str, str] = {}
        self._submitted = 0
        self._clock = T0

    # helpers for tests -----------------------------------------------------------------------

    @property
    def settings(self) -> ServiceSettings:
        """The services' slice of ``config``, as the wiring builds it (a test may swap
        ``config``: the slice follows)."""
        if self._settings is None or self._settings[0] is not self.config:
            self._settings = (self.config, service_settings(self.config))
        return self._settings[1]

    def publish(self, update: Update) -> None:
        self.bus.publish(update)

    def called(self, name: str) -> list[Call]:
        return [c for c in self.calls if c.name == name]

    def push_line(self, job_id: str, text: str | None) -> None:
        """Feed a live log stream (``None`` closes it)."""
        queue = self.live.setdefault(job_id, asyncio.Queue())
        queue.put_nowait(None if text is None else LogLine(job_id, text, T0))

    def _record(self, name: str, **args: Any) -> None:
        call = Call(name, args)
        self.calls.append(call)
        if self._on_call is not None:
            self._on_call(call)
        if name in self.b.raise_in:
            raise self.b.raise_in[name]

    async def _intent(self, name: str, **args: Any) -> None:
        self._record(name, **args)
        if name in self.b.hang:
            await asyncio.Event().wait()

    def _result(self, action: str, hosts: Sequence[str] = ()) -> ActionResult:
        ok = action not in self.b.fail
        return ActionResult(
            action,
            ok,
            1.5,
            {h: HostResult(h, ok, 0 if ok else 1, 1.5) for h in hosts},
            "done" if ok else f"{action} failed on purpose",
            data=dict(self.b.action_data),
        )

    def _hosts(self) -> list[str]:
        return [h.name for h in self.pod.hosts]

    def _now(self) -> float:
        self._clock += 1.0
        return self._clock

    def _new_job(self, entrypoint: str) -> JobInfo:
        self._submitted += 1
        job = JobInfo(f"raysubmit_{self._submitted}", JobStatus.PENDING, entrypoint, start_time=T0)
        self.jobs[job.job_id] = job
        self._walks[job.job_id] = (list(self.b.job_statuses), 0)
        return job

    # ConsoleServices ---------------------------------------------------------------------------

    async def start(self) -> None:
        await self._intent("start")
        self.started = True
        for metrics in self.metrics:
            self.publish(metrics)

    async def stop(self) -> None:
        self._record("stop")
        self.stopped = True

    def subscribe(self, callback: Callable[[Update], None]) -> Callable[[], None]:
        return self.bus.subscribe(callback)

    def snapshot(self) -> PodSnapshot:
        return self.pod

    async def refresh(self) -> PodSnapshot:
        await self._intent("refresh")
        self.publish(self.pod)
        return self.pod

    def recovery_status(self) -> RecoveryStatus:
        return self.recovery

    def cadence(self) -> list[RunCadence]:
        return list(self.runs)

    async def cadence_now(self, deadline_s: float | None = None) -> list[RunCadence]:
        return self.cadence()

    async def events(self, limit: int = 500, kinds: Sequence[str] | None = None) -> list[Event]:
        self._record("events", limit=limit, kinds=kinds)
        rows = [e for e in self.events_list if kinds is None or e.kind in kinds]
        return rows[-limit:]

    async def journal_call(self, result: ActionResult, actor: str) -> ActionResult:
        self._record("journal_call", action=result.action, ok=result.ok, actor=actor)
        return result

    async def wait_ready(self, timeout_s: float, actor: str = "user") -> ActionResult:
        await self._intent("wait_ready", timeout_s=timeout_s, actor=actor)
        return self._result("wait_ready", self._hosts())

    async def bootstrap(
        self, hosts: Sequence[str] | None = None, actor: str = "user"
    ) -> ActionResult:
        await self._intent("bootstrap", hosts=list(hosts) if hosts else None, actor=actor)
        return self._result("bootstrap", list(hosts or self._hosts()))

    async def ray_up(self, actor: str = "user") -> ActionResult:
        await self._intent("ray_up", actor=actor)
        return self._result("ray_up", self._hosts())

    async def open_tunnel(self, actor: str = "user") -> ActionResult:
        await self._intent("open_tunnel", actor=actor)
        return self._result("open_tunnel")

    async def submit(self, spec: SubmitSpec, actor: str = "user") -> JobInfo:
        await self._intent("submit", spec=spec, actor=actor)
        job = self._new_job(spec.entrypoint())
        if self.b.publish_job_updates:
            self.publish(job)
        return job

    async def list_jobs(self) -> list[JobInfo]:
        self._record("list_jobs")
        return list(self.jobs.values())

    def successor(self, job_id: str) -> str:
        while job_id in self._successor:
            job_id = self._successor[job_id]
        return job_id

    async def job_status(self, job_id: str) -> JobInfo:
        """A job submitted here takes the next status of its walk; the fixtures stand still."""
        await self._intent("job_status", job_id=job_id)
        if job_id not in self.jobs:
            raise ValueError(f"unknown job id {job_id!r}")
        before, step = self.jobs[job_id], -1
        if job_id in self._walks:
            walk, step = self._walks[job_id]
            self._walks[job_id] = (walk, step + 1)
            self.jobs[job_id] = replace(before, status=walk[min(step, len(walk) - 1)])
        info = self.jobs[job_id]
        if step < 0:
            return info
        if self.b.job_updates_as_events:
            old = before.status if step else None  # the first poll: the watcher's "new"
            if old != info.status:
                self.publish(
                    Event(
                        at=self._now(),
                        kind=EventKind.JOB_STATE,
                        message=f"job {job_id} {old or 'new'} -> {info.status}",
                        data={"job_id": job_id, "old_status": old, "new_status": info.status},
                    )
                )
        elif self.b.publish_job_updates:
            self.publish(info)  # the poller would publish the same transition
        return info

    async def stop_job(self, job_id: str, actor: str = "user") -> ActionResult:
        await self._intent("stop_job", job_id=job_id, actor=actor)
        if job_id in self.jobs:
            self.jobs[job_id] = replace(self.jobs[job_id], status=JobStatus.STOPPED)
            self._walks[job_id] = ([JobStatus.STOPPED], 0)
        return self._result("stop_job")

    async def checkpoint(
        self, job: str, actor: str = "user", timeout_s: float = 120.0
    ) -> ActionResult:
        """Every running job asked (``all``), or the one named: a checkpoint each at step 512."""
        await self._intent("checkpoint", job=job, actor=actor, timeout_s=timeout_s)
        running = [j for j in self.jobs.values() if j.status in ACTIVE_JOBS]
        asked = running if job == "all" else [j for j in running if j.job_id == job]
        result = self._result("checkpoint", self._hosts()[:1])
        uri = "file:///runs/{}/checkpoints/step-000000000512"
        done = [{"run": j.job_id, "step": 512, "uri": uri.format(j.job_id)} for j in asked]
        return replace(result, data={"job": job, "checkpoints": done})

    async def follow_logs(self, job_id: str) -> AsyncIterator[LogLine | LogStreamClosed]:
        self._record("follow_logs", job_id=job_id)
        for line in self._log_lines(job_id):
            yield line
        status = self.jobs[job_id].status if job_id in self.jobs else JobStatus.SUCCEEDED
        if status in ACTIVE_JOBS and not self.close_early:
            # A live stream: lines pushed by the test, until it pushes None.
            queue = self.live.setdefault(job_id, asyncio.Queue())
            while (item := await queue.get()) is not None:
                yield item
            status = self.jobs[job_id].status
        yield LogStreamClosed(job_id, status, T0 - 5.0)

    async def job_logs(self, job_id: str) -> str:
        await self._intent("job_logs", job_id=job_id)
        return "\n".join(line.text for line in self._log_lines(job_id))

    def _log_lines(self, job_id: str) -> list[LogLine]:
        if self.b.logs is None:
            return log_lines(job_id)
        return [LogLine(job_id, text, T0) for text in self.b.logs.splitlines()]

    async def recover(self, actor: str = "user", timeout_s: float | None = None) -> RecoveryStatus:
        """Recovered (the pod healthy again), or failed at bootstrap when asked to fail; a job
        is resubmitted on the way when asked to."""
        await self._intent("recover", actor=actor, timeout_s=timeout_s)
        ok = "recover" not in self.b.fail
        if self.b.resubmit_on_recover and self._walks:
            old = sorted(self._walks)[-1]
            new = self._new_job(self.jobs[old].entrypoint).job_id
            self._successor[old] = new
            if self.b.announce_resubmission:
                self.publish(
                    Event(
                        at=self._now(),
                        kind=EventKind.JOB_RESUBMITTED,
                        message=f"job {old} lost with the head, resubmitted as {new}",
                        actor=actor,
                        data={"old_job_id": old, "new_job_id": new},
                    )
                )
        self.recovery = recovered()
        if not ok:
            self.recovery = replace(
                self.recovery, mttr_s=None, outcome=RecoveryOutcome.FAILED, failed_step="bootstrap"
            )
        else:
            self.pod = healthy_pod(len(self.pod.hosts) or 4)
            self.publish(
                Event(
                    at=self._now(),
                    kind=EventKind.RECOVERED,
                    message=f"cluster recovered in {self.recovery.mttr_s}s",
                    actor=actor,
                    data={"mttr_s": self.recovery.mttr_s, "detect_s": self.recovery.detect_s},
                )
            )
        self.publish(self.recovery)
        self.publish(self.pod)
        return self.recovery

    def set_auto_recovery(self, enabled: bool, actor: str = "user") -> None:
        self._record("set_auto_recovery", enabled=enabled, actor=actor)
        self.recovery = replace(self.recovery, auto=enabled)
        self.publish(self.recovery)

    async def relaunch_sweep(self, actor: str = "user") -> JobInfo:
        await self._intent("relaunch_sweep", actor=actor)
        return self._new_job("python -m engine.sweep")

    async def teardown(self, actor: str = "user") -> ActionResult:
        await self._intent("teardown", actor=actor)
        return self._result("teardown", self._hosts())

    async def trust_host(self, host: str, actor: str = "user") -> ActionResult:
        await self._intent("trust_host", host=host, actor=actor)
        return self._result("trust_host", [host])

    async def preempt(self, host: str, actor: str = "user") -> ActionResult:
        await self._intent("preempt", host=host, actor=actor)
        ev = Event(
            at=self._now(),
            kind=EventKind.PREEMPTED,
            message=f"{host}: preempted",
            host=host,
            actor="watchdog",
            data={"detect_s": 0.5},
        )
        self.publish(ev)
        self.publish(ev)  # one row heard twice (the sink and a poller): shown once
        return self._result("preempt", [host])

    async def recreate(self, host: str, actor: str = "user") -> ActionResult:
        await self._intent("recreate", host=host, actor=actor)
        return self._result("recreate", [host])

    async def preempt_slice(
        self, slice_ref: str, grace_s: float | None = None, actor: str = "user"
    ) -> ActionResult:
        await self._intent("preempt_slice", slice_ref=slice_ref, grace_s=grace_s, actor=actor)
        return self._result("preempt_slice", [slice_ref])

    def preview_workload(self, spec: WorkloadSpec) -> WorkloadPreview:
        self._record("preview_workload", spec=spec)
        return WorkloadPreview(
            name=spec.name,
            kind="JobSet",
            manifest={"kind": "JobSet", "metadata": {"name": spec.name}},
            manifest_yaml=f"kind: JobSet\nmetadata:\n  name: {spec.name}\n",
            command_line=f"xpk workload create --workload {spec.name}",
            secret_name=f"{spec.name}-phantom-env" if spec.secret_refs() else "",
            secret_keys=tuple(sorted(spec.secret_refs())),
            output_uri=spec.output_uri,
        )

    async def create_workload(self, spec: WorkloadSpec, actor: str = "user") -> JobInfo:
        await self._intent("create_workload", spec=spec, actor=actor)
        job = JobInfo(spec.name, JobStatus.PENDING, spec.command, start_time=T0)
        self.jobs[job.job_id] = job
        self.publish(job)
        return job

    async def delete_workload(self, name: str, actor: str = "user") -> ActionResult:
        await self._intent("delete_workload", workload=name, actor=actor)
        return self._result("workload_delete")

    async def describe(self, ref: str) -> str:
        self._record("describe", ref=ref)
        return f"kind: Pod\nmetadata:\n  name: {ref}\n\nEvents:\n<none>\n"


def _conforms(fake: FakeServices) -> ConsoleServices:
    """``make typecheck`` checks the fake against the one interface here: a method added to
    ``ConsoleServices`` and not to the fake fails it (tests/services/test_api.py shows it)."""
    return fake
