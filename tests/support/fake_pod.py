"""A small model of a TPU VM pod for recovery tests, and a real watchdog over it.

``FakePod`` models what the real pod does (VMs that get preempted and come back bare, Ray
nodes that must be started on a bootstrapped host and join the current head, jobs that live
on the head) and implements the TPU VM recovery's ``PodOps`` on that model. The watchdog
driven over it is the real one, with the real journal (in memory, or a file shared by
several) behind the real event sink. Time is a manual clock advanced by the injected sleep.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from console.services.backends.tpu_vm.recovery import pod_plan
from console.services.model import (
    ActionResult,
    Event,
    HostResult,
    JobInfo,
    RecoveryStatus,
    Update,
)
from console.services.observation import HostObservation, Observation
from console.services.record.journal import Journal
from console.services.record.sink import EventSink
from console.services.recovery.watchdog import Watchdog
from tests.support.clock import Clock


@dataclass
class FakeHost:
    name: str
    ip: str
    tpu_state: str = "READY"
    installed: bool = True
    ray: int = 0  # live Ray nodes on this host
    ray_head_gen: int = -1  # which head generation its worker joined
    preempted_at: float | None = None
    ssh_ok: bool = True


@dataclass
class FakePod:
    """A 4-host pod: host 0 runs the Ray head."""

    clock: Clock
    n: int = 4
    hosts: list[FakeHost] = field(default_factory=list)
    head_gen: int = 0
    head_up: bool = False
    tunnel: bool | None = None
    jobs: dict[str, str] = field(default_factory=dict)  # job id -> status on the live head
    submitted: dict[str, str] = field(default_factory=dict)  # job id -> spec (the console's)
    next_job: int = 1
    calls: list[tuple[str, tuple[str, ...]]] = field(default_factory=list)
    fail: dict[str, list[str]] = field(default_factory=dict)  # op -> hosts failing (consumed)
    always_fail: dict[str, set[str]] = field(default_factory=dict)
    stalled: tuple[str, ...] = ()
    on_verify_observe: Any = None

    def __post_init__(self) -> None:
        self.hosts = [FakeHost(f"pod-w{i}", f"127.0.0.{10 + i}") for i in range(self.n)]

    def host(self, name: str) -> FakeHost:
        return next(h for h in self.hosts if h.name == name)

    # -- setting the scene ----------------------------------------------------------------------
    def form(self) -> None:
        self.head_up = True
        self.head_gen += 1
        for h in self.hosts:
            h.ray, h.ray_head_gen = 1, self.head_gen
        self.tunnel = True

    def submit(self, spec: str) -> str:
        jid = f"raysubmit_{self.next_job}"
        self.next_job += 1
        self.jobs[jid] = "RUNNING"
        self.submitted[jid] = spec
        return jid

    def preempt(self, name: str) -> None:
        h = self.host(name)
        h.tpu_state, h.installed, h.ray, h.ssh_ok = "PREEMPTED", False, 0, False
        h.preempted_at = self.clock()
        if name == self.hosts[0].name:
            self.head_up = False
            self.jobs.clear()
            self.tunnel = False

    # -- RecoveryOps -----------------------------------------------------------------------------
    async def observe(self) -> Observation:
        self.calls.append(("observe", ()))
        if self.on_verify_observe is not None:
            self.on_verify_observe(self)
        return Observation(
            at=self.clock(),
            hosts=tuple(
                HostObservation(
                    name=h.name,
                    ip=h.ip,
                    tpu_state=h.tpu_state,
                    ssh_ok=h.ssh_ok,
                    ray_alive=h.ray if self.head_up else 0,
                    preempted_at=h.preempted_at,
                )
                for h in self.hosts
            ),
            head=self.hosts[0].name,
            ray_reachable=self.head_up,
            tunnel_up=self.tunnel,
            jobs=tuple(
                JobInfo(job_id=j, status=s) for j, s in self.jobs.items() if j in self.submitted
            ),
            stalled_runs=self.stalled,
        )

    def _per_host(self, op: str, hosts: Sequence[str], ok_fn: Any) -> ActionResult:
        self.calls.append((op, tuple(hosts)))
        failing = set(self.fail.pop(op, [])) | self.always_fail.get(op, set())
        per: dict[str, HostResult] = {}
        for name in hosts:
            if name in failing:
                per[name] = HostResult(host=name, ok=False, exit_status=1, error="boom")
                continue
            err = ok_fn(self.host(name))
            per[name] = HostResult(host=name, ok=not err, error=err or "")
        return ActionResult(
            action=op, ok=all(r.ok for r in per.values()), elapsed_s=0.1, per_host=per
        )

    async def recreate(self, hosts: Sequence[str]) -> ActionResult:
        def do(h: FakeHost) -> str:
            h.tpu_state, h.installed, h.ray, h.preempted_at, h.ssh_ok = (
                "CREATING",
                False,
                0,
                None,
                False,
            )
            return ""

        res = self._per_host("recreate", hosts, do)
        return ActionResult(
            action="recreate",
            ok=res.ok,
            elapsed_s=0.1,
            per_host=res.per_host,
            data={"hosts": [h for h, r in res.per_host.items() if r.ok]},
        )

    async def wait_hosts_ready(self, hosts: Sequence[str], timeout_s: float) -> ActionResult:
        def do(h: FakeHost) -> str:
            h.tpu_state, h.ssh_ok = "READY", True
            return ""

        return self._per_host("wait_ready", hosts, do)

    async def bootstrap(self, hosts: Sequence[str]) -> ActionResult:
        def do(h: FakeHost) -> str:
            if h.tpu_state != "READY":
                return f"{h.name} is {h.tpu_state}"
            h.installed = True
            return ""

        return self._per_host("bootstrap", hosts, do)

    async def start_head(self) -> ActionResult:
        head = self.hosts[0]

        def do(h: FakeHost) -> str:
            if not h.installed:
                return "ray: command not found"
            self.head_gen += 1
            self.head_up = True
            h.ray, h.ray_head_gen = 1, self.head_gen
            for w in self.hosts[1:]:  # workers of the old head die with its GCS
                if w.ray_head_gen != self.head_gen:
                    w.ray = 0
            return ""

        return self._per_host("start_head", [head.name], do)

    async def join_workers(self, hosts: Sequence[str]) -> ActionResult:
        def do(h: FakeHost) -> str:
            if not self.head_up:
                return "no head to join"
            if not h.installed:
                return "ray: command not found"
            h.ray, h.ray_head_gen = 1, self.head_gen  # `ray stop -f` then `ray start`: one node
            return ""

        return self._per_host("join_workers", hosts, do)

    async def rejoin_workers(self, hosts: Sequence[str]) -> ActionResult:
        return await self.join_workers(hosts)  # one `ray start` or several at once: same end

    async def stop_orphans(self, hosts: Sequence[str]) -> ActionResult:
        def do(h: FakeHost) -> str:
            h.ray = 0  # `ray stop -f`
            return ""

        return self._per_host("stop_orphans", hosts, do)

    async def open_tunnel(self) -> ActionResult:
        self.calls.append(("open_tunnel", ()))
        if not self.head_up:
            return ActionResult(action="tunnel", ok=False, elapsed_s=0.0, message="head down")
        self.tunnel = True
        return ActionResult(action="tunnel", ok=True, elapsed_s=0.0)

    async def resubmit(self, job_ids: Sequence[str]) -> ActionResult:
        self.calls.append(("resubmit", tuple(job_ids)))
        mapping = {}
        for old in job_ids:
            new = self.submit(self.submitted[old])
            mapping[old] = new
        return ActionResult(
            action="resubmit", ok=True, elapsed_s=0.0, data={"resubmitted": mapping}
        )


class JournalView:
    """What the watchdog journaled, read back from the real journal."""

    def __init__(self, journal: Journal, sink: EventSink) -> None:
        self.journal = journal
        self.sink = sink

    async def flush(self) -> None:
        await self.sink.flush()

    @property
    def events(self) -> list[Event]:
        return [e for e in self.journal.query(limit=100_000) if e.kind != "action"]

    @property
    def actions(self) -> list[tuple[ActionResult, str]]:
        out = []
        for e in self.journal.query(limit=100_000, kinds=["action"]):
            data = dict(e.data)
            per_host = {h: HostResult(**r) for h, r in data.pop("per_host", {}).items()}
            res = ActionResult(
                action=data.pop("action"),
                ok=data.pop("ok"),
                elapsed_s=data.pop("duration_s"),
                per_host=per_host,
                message=e.message,
                data=data,
            )
            out.append((res, e.actor))
        return out


def make_watchdog(
    pod: FakePod, clock: Clock, **kw: Any
) -> tuple[Watchdog, JournalView, list[Update]]:
    published: list[Update] = []
    journal = Journal(kw.pop("journal_path", ":memory:"), clock=clock)
    sink = EventSink(journal, published.append, clock=clock)
    kw.setdefault("poll_interval_s", 1.0)
    kw.setdefault("step_retries", 2)

    async def resubmit(job_ids: Sequence[str]) -> ActionResult:
        return await pod.resubmit(job_ids)  # looked up per call: a test may swap it

    plan = pod_plan(pod, resubmit, ready_timeout_s=kw.get("ready_timeout_s", 600.0))
    wd = Watchdog(
        plan,
        observe=pod.observe,
        sink=sink,
        publish=published.append,
        clock=clock,
        sleep=clock.sleep,
        action_lease=kw.pop("action_lease", None),
        **kw,
    )
    return wd, JournalView(journal, sink), published


async def wait_done(wd: Watchdog) -> RecoveryStatus:
    assert wd._task is not None
    return await wd._task
