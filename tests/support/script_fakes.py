"""A recording fake at the ConsoleServices boundary, for the script/status front-end tests.

It is not a mock of our own services' logic: it only records which intents the front end
sent and answers with the published data model, so tests can prove ordering, exit codes,
JSON shapes and -- for invalid scripts -- that nothing ran at all. The real services are
exercised by tests/test_script_e2e.py against the emulator.
(No tests in this module; it is imported by the test_script*/test_status* modules and by
the subprocess in the SIGINT test.)
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from console.config import Config
from console.services.jobs.spec import SubmitSpec
from console.services.model import (
    ActionResult,
    Event,
    HostResult,
    HostState,
    HostStatus,
    JobInfo,
    LogLine,
    LogStreamClosed,
    PodSnapshot,
    RecoveryStatus,
    RunCadence,
    Update,
    UpdateBus,
)
from console.wiring import capabilities_for

T0 = 1_700_000_000.0


@dataclass
class Behaviour:
    """What the fake does. ``fail``: method names answering ok=False; ``raise_in``: raising."""

    fail: set[str] = field(default_factory=set)
    raise_in: dict[str, Exception] = field(default_factory=dict)
    hang: set[str] = field(default_factory=set)  # never return (until cancelled)
    # Status sequence job_status walks through (the last one repeats).
    job_statuses: list[str] = field(default_factory=lambda: ["RUNNING", "SUCCEEDED"])
    logs: str = "step 1\nstep 2\ndone\n"
    hosts: int = 4
    reachable: bool = True
    publish_job_updates: bool = True
    job_updates_as_events: bool = False  # publish Event(kind="job_state") like JobWatcher
    resubmit_on_recover: bool = False
    announce_resubmission: bool = True  # False: only the shared registry knows (another process)
    action_data: dict[str, Any] = field(default_factory=dict)


class FakeServices:
    def __init__(self, config: Config, record: Callable[[tuple[Any, ...]], None], b: Behaviour):
        self.config = config
        self.capabilities = capabilities_for(config)
        self._record = record
        self.b = b
        self.bus = UpdateBus()
        self._clock = T0
        self._jobs: dict[str, int] = {}
        self._successor: dict[str, str] = {}
        self._n = 0

    # helpers --------------------------------------------------------------------------------
    def now(self) -> float:
        self._clock += 1.0
        return self._clock

    async def _call(self, name: str, *args: Any) -> None:
        self._record((name, *args))
        if name in self.b.raise_in:
            raise self.b.raise_in[name]
        if name in self.b.hang:
            await asyncio.Event().wait()

    def _result(self, name: str, hosts: Sequence[str] = ()) -> ActionResult:
        ok = name not in self.b.fail
        per_host = {h: HostResult(host=h, ok=ok, exit_status=0 if ok else 1) for h in hosts}
        return ActionResult(
            action=name,
            ok=ok,
            elapsed_s=0.01,
            per_host=per_host,
            message="" if ok else f"{name} failed on purpose",
            data=dict(self.b.action_data),
        )

    def _names(self) -> list[str]:
        return [f"{self.config.cluster.node_name}-w{i}" for i in range(self.b.hosts)]

    # lifecycle ------------------------------------------------------------------------------
    async def start(self) -> None:
        await self._call("start")

    async def stop(self) -> None:
        self._record(("stop",))

    def subscribe(self, callback: Callable[[Update], None]) -> Callable[[], None]:
        return self.bus.subscribe(callback)

    # state ----------------------------------------------------------------------------------
    def snapshot(self) -> PodSnapshot:
        hosts = tuple(
            HostStatus(
                index=i,
                name=name,
                ip=f"127.0.0.{10 + i}",
                tpu_state=HostState.READY,
                ray_state="ALIVE",
                ray_nodes=1,
                ssh="ok",
            )
            for i, name in enumerate(self._names())
        )
        if not self.b.reachable:
            return PodSnapshot(
                at=T0,
                provider=self.config.cluster.provider,
                node_name=self.config.cluster.node_name,
                warnings=("TPU API unreachable: connection refused",),
            )
        return PodSnapshot(
            at=T0,
            provider=self.config.cluster.provider,
            node_name=self.config.cluster.node_name,
            accelerator_type="v4-32",
            tpu_state=HostState.READY,
            health="HEALTHY",
            hosts=hosts,
            tunnel_up=True,
            dashboard_url="http://127.0.0.1:8265",
        )

    async def refresh(self) -> PodSnapshot:
        await self._call("refresh")
        return self.snapshot()

    def recovery_status(self) -> RecoveryStatus:
        return RecoveryStatus(active=False, auto=True)

    def cadence(self) -> list[RunCadence]:
        return [
            RunCadence(
                run_id="run1",
                name="ppo-a0.3",
                source="offline",
                last_step=2048,
                last_at=T0,
                seconds_since=3.0,
                median_interval_s=1.5,
                steps_per_min=40.0,
            )
        ]

    async def cadence_now(self, deadline_s: float | None = None) -> list[RunCadence]:
        return self.cadence()

    async def events(self, limit: int = 500, kinds: Sequence[str] | None = None) -> list[Event]:
        return []

    # actions --------------------------------------------------------------------------------
    async def wait_ready(self, timeout_s: float, actor: str = "user") -> ActionResult:
        await self._call("wait_ready", timeout_s, actor)
        return self._result("wait_ready", self._names())

    async def bootstrap(
        self, hosts: Sequence[str] | None = None, actor: str = "user"
    ) -> ActionResult:
        await self._call("bootstrap", None if hosts is None else list(hosts), actor)
        return self._result("bootstrap", list(hosts or self._names()))

    async def ray_up(self, actor: str = "user") -> ActionResult:
        await self._call("ray_up", actor)
        return self._result("ray_up", self._names())

    async def open_tunnel(self, actor: str = "user") -> ActionResult:
        await self._call("open_tunnel", actor)
        return self._result("open_tunnel")

    async def submit(self, spec: SubmitSpec, actor: str = "user") -> JobInfo:
        await self._call("submit", spec.mode, spec.entrypoint(), actor)
        self._n += 1
        job_id = f"raysubmit_{self._n}"
        self._jobs[job_id] = 0
        info = JobInfo(job_id=job_id, status="PENDING", entrypoint=spec.entrypoint())
        if self.b.publish_job_updates:
            self.bus.publish(info)
        return info

    async def list_jobs(self) -> list[JobInfo]:
        return [JobInfo(job_id=j, status=self._status(j)) for j in self._jobs]

    def _status(self, job_id: str) -> str:
        seq = self.b.job_statuses
        return seq[min(self._jobs[job_id], len(seq) - 1)]

    def successor(self, job_id: str) -> str:
        while job_id in self._successor:
            job_id = self._successor[job_id]
        return job_id

    async def job_status(self, job_id: str) -> JobInfo:
        await self._call("job_status", job_id)
        if job_id not in self._jobs:
            raise ValueError(f"unknown job id {job_id!r}")
        before = self._status(job_id) if self._jobs[job_id] else None
        info = JobInfo(job_id=job_id, status=self._status(job_id))
        self._jobs[job_id] += 1
        if self.b.job_updates_as_events:
            if before != info.status:
                self.bus.publish(
                    Event(
                        at=self.now(),
                        kind="job_state",
                        message=f"job {job_id} {before or 'new'} -> {info.status}",
                        data={"job_id": job_id, "old_status": before, "new_status": info.status},
                    )
                )
        elif self.b.publish_job_updates:
            self.bus.publish(info)  # the poller would publish the same transition
        return info

    async def stop_job(self, job_id: str, actor: str = "user") -> ActionResult:
        await self._call("stop_job", job_id, actor)
        if job_id in self._jobs:
            self.b.job_statuses = ["STOPPED"]
            self._jobs[job_id] = 0
        return self._result("stop_job")

    async def follow_logs(self, job_id: str) -> AsyncIterator[LogLine | LogStreamClosed]:
        for line in self.b.logs.splitlines():
            yield LogLine(job_id=job_id, text=line, at=T0)
        yield LogStreamClosed(job_id=job_id, job_status="SUCCEEDED", at=T0)

    async def job_logs(self, job_id: str) -> str:
        await self._call("job_logs", job_id)
        return self.b.logs

    async def recover(self, actor: str = "user", timeout_s: float | None = None) -> RecoveryStatus:
        await self._call("recover", actor, timeout_s)
        ok = "recover" not in self.b.fail
        if self.b.resubmit_on_recover and self._jobs:
            old = sorted(self._jobs)[-1]
            self._n += 1
            new = f"raysubmit_{self._n}"
            self._jobs[new] = 0
            self._successor[old] = new
            if self.b.announce_resubmission:
                self.bus.publish(
                    Event(
                        at=self.now(),
                        kind="job_resubmitted",
                        message=f"job {old} lost with the head, resubmitted as {new}",
                        actor=actor,
                        data={"old_job_id": old, "new_job_id": new},
                    )
                )
        if ok:
            self.bus.publish(
                Event(
                    at=self.now(),
                    kind="recovered",
                    message="cluster recovered in 12.5s",
                    actor=actor,
                    data={"mttr_s": 12.5, "detect_s": 1.0},
                )
            )
        return RecoveryStatus(
            active=False,
            auto=True,
            trigger=f"requested by {actor}",
            mttr_s=12.5 if ok else None,
            result="ok" if ok else "failed: bootstrap",
        )

    def set_auto_recovery(self, enabled: bool, actor: str = "user") -> None:
        self._record(("set_auto_recovery", enabled, actor))

    async def relaunch_sweep(self, actor: str = "user") -> JobInfo:
        await self._call("relaunch_sweep", actor)
        self._n += 1
        job_id = f"raysubmit_{self._n}"
        self._jobs[job_id] = 0
        return JobInfo(job_id=job_id, status="PENDING")

    async def teardown(self, actor: str = "user") -> ActionResult:
        await self._call("teardown", actor)
        return self._result("teardown", self._names())

    async def preempt(self, host: str, actor: str = "user") -> ActionResult:
        await self._call("preempt", host, actor)
        ev = Event(
            at=self.now(),
            kind="preempted",
            message=f"{host}: preempted",
            host=host,
            actor="watchdog",
            data={"detect_s": 0.5},
        )
        self.bus.publish(ev)
        self.bus.publish(ev)  # a duplicate publication must print once
        return self._result("preempt", [host])

    async def recreate(self, host: str, actor: str = "user") -> ActionResult:
        await self._call("recreate", host, actor)
        return self._result("recreate", [host])


class FakePod:
    """PodControl recording pod up/down."""

    def __init__(self, record: Callable[[tuple[Any, ...]], None], up: bool = False) -> None:
        self._record = record
        self.up_now = up

    async def is_up(self) -> bool:
        return self.up_now

    async def up(
        self, hosts: int, *, ready_delay: float | None, ssh_port: int | None
    ) -> dict[str, Any]:
        self._record(("pod.up", hosts))
        self.up_now = True
        return {"state": "READY", "hosts": hosts}

    async def down(self) -> bool:
        self._record(("pod.down",))
        was, self.up_now = self.up_now, False
        return was


@dataclass
class Harness:
    behaviour: Behaviour = field(default_factory=Behaviour)
    calls: list[tuple[Any, ...]] = field(default_factory=list)
    built: int = 0

    def record(self, call: tuple[Any, ...]) -> None:
        self.calls.append(call)

    def factory(self, config: Config) -> FakeServices:
        self.built += 1
        return FakeServices(config, self.record, self.behaviour)

    def pod(self, up: bool = False) -> FakePod:
        return FakePod(self.record, up)

    def names(self) -> list[str]:
        return [c[0] for c in self.calls]


def file_recorder(path: str) -> Callable[[tuple[Any, ...]], None]:
    """For the subprocess test: every call appended to ``path`` as a JSON line."""

    def record(call: tuple[Any, ...]) -> None:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(list(call), default=str) + "\n")

    return record


def run_in_subprocess(script: str, calls_path: str, hang: str) -> int:
    """Entry point of the SIGINT/SIGTERM test's child process."""
    import sys

    from console.script.main import script_main

    record = file_recorder(calls_path)
    behaviour = Behaviour(hang={hang}, job_statuses=["RUNNING"])
    return script_main(
        script,
        Config(),
        services_factory=lambda cfg: FakeServices(cfg, record, behaviour),
        pod_control=FakePod(record),
        stdout=sys.stdout,
        stderr=sys.stderr,
    )
