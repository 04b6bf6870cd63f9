"""A fake of the services boundary (``ConsoleServices``) with fixed data, for UI tests.

It publishes on a real ``UpdateBus`` and records every intent it receives in ``calls``, so a
Pilot test can press keys and then assert "recover() was called" or "submit() got these
values". Times are fixed (``T0``); nothing here touches the network.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from console.config import Config, parse_config
from console.services.jobs.spec import SubmitSpec
from console.services.jobs.workload import WorkloadPreview, WorkloadSpec
from console.services.model import (
    ActionResult,
    Event,
    HostResult,
    HostStatus,
    JobInfo,
    LogLine,
    LogStreamClosed,
    PodSnapshot,
    PodStatus,
    RecoveryStatus,
    RecoveryStep,
    RunCadence,
    RunMetrics,
    Update,
    UpdateBus,
    WorkloadStatus,
)
from console.wiring import capabilities_for

T0 = 1_760_000_000.0  # 2025-10-09 08:53:20 UTC
NODE = "phantom-pod"
RESOURCES = {"TPU": 8.0, "CPU": 2.0}
RUNTIME_ENV = {
    "pip": ["stable-baselines3>=2.2.0", "gymnasium>=0.29.0", "wandb"],
    "env_vars": {"WANDB_PROJECT": "phantom", "WANDB_API_KEY": "$WANDB_API_KEY"},
}
STEPS = (
    "detect",
    "recreate",
    "wait_ready",
    "bootstrap",
    "ray_head",
    "ray_workers",
    "tunnel",
    "relaunch",
    "verify_metrics",
)


def host(
    i: int,
    state: str = "READY",
    *,
    ray: str = "ALIVE",
    ray_nodes: int = 1,
    ssh: str = "ok",
    health: str = "HEALTHY",
    seen: float = 2.0,
) -> HostStatus:
    return HostStatus(
        index=i,
        name=f"{NODE}-w{i}",
        ip=f"127.0.0.{10 + i}",
        tpu_state=state,
        health=health,
        ray_state=ray,
        ray_nodes=ray_nodes,
        ssh=ssh,
        resources=RESOURCES,
        last_seen=T0 - seen,
    )


def healthy_pod(n: int = 4, at: float = T0 - 1.0) -> PodSnapshot:
    return PodSnapshot(
        at=at,
        provider="local",
        node_name=NODE,
        accelerator_type="v4-32",
        tpu_state="READY",
        health="HEALTHY",
        hosts=tuple(host(i) for i in range(n)),
        tunnel_up=True,
        dashboard_url="http://127.0.0.1:8265",
    )


def preempted_pod() -> PodSnapshot:
    hosts = [
        host(0),
        host(1),
        host(2, "PREEMPTED", ray="DEAD", ssh="down", health="", seen=252.0),
        host(3, ray="ALIVE", ray_nodes=2),
    ]
    return replace(
        healthy_pod(),
        tpu_state="PREEMPTED",
        health="",
        hosts=tuple(hosts),
        tunnel_up=False,
        warnings=(
            "phantom-pod-w2 is PREEMPTED (since 4m12s); Ray node on 127.0.0.12 is DEAD",
            "2 Ray nodes on 127.0.0.13 (phantom-pod-w3): duplicate, run recovery",
            "tunnel to the dashboard is down",
        ),
    )


GKE_POOL = "phantom-gke-np-0"


def gke_pod(preempted: bool = False) -> PodSnapshot:
    """A v5p-64 slice (8 nodes), an xpk JobSet on it (restarted once) and its pods: what the
    GKE screens list. ``preempted``: the slice's nodes shutting down, the pods disrupted."""
    state = "PREEMPTED" if preempted else "READY"
    nodes = tuple(
        replace(
            host(
                i,
                state,
                ray="-",
                ray_nodes=0,
                ssh="unknown",
                health="" if not preempted else "NotReady: node is shutting down",
            ),
            name=f"gke-phantom-gke-{GKE_POOL}-3e01e57e-{i:04x}",
            ip=f"127.0.2.{10 + i}",
            pool=GKE_POOL,
            resources={"TPU": 4.0},
        )
        for i in range(8)
    )
    pods = tuple(
        PodStatus(
            name=f"grpo-slice-job-0-{i}-x{i}k2p",
            phase="Running" if not preempted else "Failed",
            status="Running" if not preempted else "ExitCode:143",
            ready="1/1" if not preempted else "0/1",
            restarts=0,
            node=nodes[i].name,
            created_at=T0 - 600.0,
            workload="grpo",
            replicated_job="slice-job",
            completion_index=i,
            restart_attempt=1,
            ip=nodes[i].ip,
            disrupted=preempted,
            message="TerminationByKubelet: Pod was terminated in response to imminent node "
            "shutdown."
            if preempted
            else "",
            containers=("jax-tpu",),
        )
        for i in range(8)
    )
    grpo = WorkloadStatus(
        name="grpo",
        status="PENDING" if preempted else "RUNNING",
        template="standard",
        restarts=1,
        created_at=T0 - 3600.0,
        pods_total=8,
        pods_running=0 if preempted else 8,
        disrupted=8 if preempted else 0,
        owned=True,
        run_name="grpo",
        console_url="https://console.cloud.google.com/kubernetes/service/us-east5/phantom-gke/"
        "default/grpo/details?project=phantom-local",
    )
    done = WorkloadStatus(
        name="to-maxtext",
        status="SUCCEEDED",
        kind="Job",
        template="convert",
        terminal_state="Completed",
        completed="True",
        created_at=T0 - 7200.0,
        owned=True,
    )
    return PodSnapshot(
        at=T0 - 1.0,
        provider="gke",
        node_name=NODE,
        accelerator_type="v5p-64 (2x4x4) x1",
        tpu_state=state,
        hosts=nodes,
        pods=pods,
        workloads=(done, grpo),
        warnings=(
            f"slice {GKE_POOL}: 8/8 nodes lost, preempted (spot capacity reclaimed; GKE "
            "recreates the nodes) at 08:53:19",
        )
        if preempted
        else (),
    )


def tunix_metrics(steps: int = 40) -> RunMetrics:
    """The six Tunix metrics of a GRPO run, by the doc's names (for the metrics screen)."""
    series = {
        "rewards/mean": tuple((s, 0.15 + 0.7 * (1 - 0.97**s)) for s in range(1, steps + 1)),
        "score/mean": tuple((s, 0.11 + 0.7 * (1 - 0.97**s)) for s in range(1, steps + 1)),
        "rollout_time": tuple((s, 0.6 + 0.05 * (s % 3)) for s in range(1, steps + 1)),
        "completions/mean_length": tuple((s, 180 + 5.0 * s) for s in range(1, steps + 1)),
        "actor_dequeue_time": tuple((s, 0.05 + 0.01 * (s % 4)) for s in range(1, steps + 1)),
        "step_time_sec": tuple((s, 1.0 + 0.02 * (s % 5)) for s in range(1, steps + 1)),
    }
    return RunMetrics("grpo", "grpo", series, last_step=steps, at=T0 - 2.0)


def grpo_cadence() -> RunCadence:
    """The GRPO workload's run as the TensorBoard source reports it: a step every ~1 s."""
    return RunCadence(
        "grpo",
        "grpo",
        "tensorboard",
        40,
        T0 - 2.0,
        2.0,
        1.0,
        60.0,
        (1.0, 1.1, 0.9, 1.0, 1.2, 1.0, 1.0, 1.1, 1.0, 0.9),
        False,
        "running",
    )


def jobs() -> list[JobInfo]:
    return [
        JobInfo(
            "raysubmit_sweep7Kq2mX9a",
            "RUNNING",
            "python -m engine.sweep --backend tune --kind ppo_rl_study --method "
            "random --run-cap 6 --num-nodes 4 --agents-per-node 2 --tpu-per-task 0",
            start_time=T0 - 3720.0,
            env={"PHANTOM_JAX_PLATFORM": "cpu", "WANDB_MODE": "offline"},
            preemptions=2,  # resubmitted twice after its head was preempted
        ),
        JobInfo(
            "raysubmit_distR4tPz01b",
            "FAILED",
            "python scripts/ray_distributed_train.py --train-args '--algo ppo "
            "--total-timesteps 100000 --alpha 0.4 --device cpu' --num-nodes 4 --tpu-per-task 8",
            start_time=T0 - 7300.0,
            end_time=T0 - 7000.0,
            message="node 127.0.0.12 died",
            env={"WANDB_MODE": "offline"},
            env_problems=("PHANTOM_JAX_PLATFORM not set",),
            errors_in_row=2,  # and its predecessor: one more and recovery stops resubmitting
            preemptions=1,
        ),
        JobInfo(
            "raysubmit_smoke3Hd8vQ2c",
            "SUCCEEDED",
            "python -m engine.train --algo ppo --total-timesteps 5000 --alpha 0.3 --device cpu",
            start_time=T0 - 9000.0,
            end_time=T0 - 8880.0,
        ),
    ]


def log_lines(job_id: str, n: int = 60) -> list[LogLine]:
    out = []
    for i in range(n):
        step = 2048 * (i + 1)
        if i % 10 == 9:
            text = f"[ckpt] saved file:///bucket/ckpt/step-{step}.zip"
        else:
            text = (
                f"trial ppo_{i % 4:02d} | step {step:>7} | ep_rew_mean {-120 + i * 2.5:7.2f} "
                f"| loss {0.9 / (i + 1):.4f} | fps {410 + i % 7}"
            )
        out.append(LogLine(job_id, text, T0 - 600 + i * 10))
    return out


def runs() -> list[RunCadence]:
    return [
        RunCadence(
            "a1b2c3",
            "ppo_rl_study-00",
            "offline",
            48_128,
            T0 - 2.1,
            2.1,
            2.0,
            61.0,
            (2.0, 1.9, 2.1, 2.0, 2.2, 1.8, 2.0, 2.1, 2.0, 1.9, 2.0, 2.1),
            False,
            "running",
        ),
        RunCadence(
            "d4e5f6",
            "ppo_rl_study-01",
            "offline",
            40_960,
            T0 - 252.0,
            252.0,
            2.0,
            0.0,
            (2.0, 2.1, 1.9, 2.0, 2.2, 2.0, 3.5, 6.0, 12.0),
            True,
            "running",
        ),
        RunCadence(
            "g7h8i9",
            "ppo_rl_study-02",
            "offline",
            100_000,
            T0 - 900.0,
            900.0,
            2.4,
            50.0,
            (2.4, 2.5, 2.3, 2.4, 2.6, 2.4),
            False,
            "finished",
        ),
    ]


def events() -> list[Event]:
    return [
        Event(T0 - 9000, "job_state", "raysubmit_smoke3Hd8vQ2c RUNNING", actor="user", id=1),
        Event(T0 - 8880, "job_state", "raysubmit_smoke3Hd8vQ2c SUCCEEDED", id=2),
        Event(
            T0 - 7000,
            "preempted",
            "host preempted (TPU API state PREEMPTED)",
            host=f"{NODE}-w2",
            id=3,
        ),
        Event(
            T0 - 6866,
            "recovered",
            "pod recovered by watchdog",
            actor="watchdog",
            data={"mttr_s": 134.0},
            id=4,
        ),
        Event(T0 - 3720, "action", "submit sweep ppo_rl_study (run cap 6)", actor="user", id=5),
        Event(T0 - 400, "duplicate_ray_node", "2 Ray nodes on 127.0.0.13", host=f"{NODE}-w3", id=6),
        Event(
            T0 - 252,
            "preempted",
            "host preempted (SSH down, Ray node DEAD)",
            host=f"{NODE}-w2",
            id=7,
        ),
        Event(
            T0 - 250, "stalled", "run ppo_rl_study-01: no metric for 5x its median interval", id=8
        ),
        Event(T0 - 248, "action", "recover started", actor="watchdog", id=9),
    ]


def recovering() -> RecoveryStatus:
    hosts4 = {f"{NODE}-w{i}": "ok" for i in range(4)}
    return RecoveryStatus(
        active=True,
        auto=True,
        trigger="phantom-pod-w2 PREEMPTED",
        started_at=T0 - 248.0,
        detected_at=T0 - 250.0,
        detect_s=2.0,
        steps=(
            RecoveryStep("detect", "ok", T0 - 250, 2.0, 1),
            RecoveryStep("recreate", "ok", T0 - 248, 95.5, 1, {f"{NODE}-w2": "ok"}),
            RecoveryStep("wait_ready", "ok", T0 - 152, 40.2, 1, {f"{NODE}-w2": "ok"}),
            RecoveryStep(
                "bootstrap",
                "running",
                T0 - 112,
                0.0,
                2,
                {**hosts4, f"{NODE}-w2": "running", f"{NODE}-w3": "failed"},
                "w3: pip exited 1, retrying",
            ),
            *(RecoveryStep(name) for name in STEPS[4:]),
        ),
    )


def recovered() -> RecoveryStatus:
    return RecoveryStatus(
        active=False,
        auto=True,
        trigger="phantom-pod-w2 PREEMPTED",
        started_at=T0 - 248.0,
        detected_at=T0 - 250.0,
        detect_s=2.0,
        mttr_s=190.0,
        result="ok",
        steps=tuple(RecoveryStep(name, "ok", T0 - 200, 10.0, 1) for name in STEPS),
    )


@dataclass
class Call:
    name: str
    args: dict[str, Any] = field(default_factory=dict)


class FakeServices:
    """Implements ``ConsoleServices`` with fixed snapshots; ``calls`` records intents."""

    def __init__(
        self,
        scenario: str = "preempted",
        *,
        config: Config | None = None,
        close_early: bool = True,
        n_hosts: int = 4,
    ) -> None:
        gke = scenario in ("gke", "gke_preempted")
        self.config = config or (
            parse_config({"cluster": {"provider": "gke"}})
            if gke
            else Config(runtime_env=RUNTIME_ENV)
        )
        # The real declarations of the backend this config picks (and its emulator's verbs).
        self.capabilities = capabilities_for(self.config)
        self.bus = UpdateBus()
        self.calls: list[Call] = []
        self.fail: dict[str, Exception] = {}
        self.close_early = close_early
        if scenario == "healthy":
            self.pod = healthy_pod(n_hosts)
            self.recovery = recovered()
        elif gke:
            self.pod = gke_pod(preempted=scenario == "gke_preempted")
            self.recovery = recovered()
        elif scenario == "empty":
            self.pod = PodSnapshot(at=0.0, provider="local", node_name=NODE)
            self.recovery = RecoveryStatus(active=False, auto=True)
        else:
            self.pod = preempted_pod()
            self.recovery = recovering()
        self.jobs = {j.job_id: j for j in jobs()} if scenario != "empty" else {}
        self.runs = runs() if scenario != "empty" else []
        # Published by start(), as the cadence poller publishes them (there is no getter).
        self.metrics: list[RunMetrics] = []
        if gke:
            self.runs = [grpo_cadence()]
            self.metrics = [tunix_metrics()]
        self.events_list = events() if scenario != "empty" else []
        self.started = False
        self.stopped = False
        self.live: dict[str, asyncio.Queue[LogLine | None]] = {}

    # helpers for tests -----------------------------------------------------------------------

    def publish(self, update: Update) -> None:
        self.bus.publish(update)

    def called(self, name: str) -> list[Call]:
        return [c for c in self.calls if c.name == name]

    def _record(self, name: str, **args: Any) -> None:
        self.calls.append(Call(name, args))
        if name in self.fail:
            raise self.fail[name]

    def _ok(self, action: str, hosts: Sequence[str] = ()) -> ActionResult:
        return ActionResult(
            action, True, 1.5, {h: HostResult(h, True, 0, 1.5) for h in hosts}, "done"
        )

    # ConsoleServices ---------------------------------------------------------------------------

    async def start(self) -> None:
        self._record("start")
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
        self._record("refresh")
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

    async def wait_ready(self, timeout_s: float, actor: str = "user") -> ActionResult:
        self._record("wait_ready", timeout_s=timeout_s, actor=actor)
        return self._ok("wait_ready")

    async def bootstrap(
        self, hosts: Sequence[str] | None = None, actor: str = "user"
    ) -> ActionResult:
        self._record("bootstrap", hosts=list(hosts) if hosts else None, actor=actor)
        return self._ok("bootstrap", hosts or [h.name for h in self.pod.hosts])

    async def ray_up(self, actor: str = "user") -> ActionResult:
        self._record("ray_up", actor=actor)
        return self._ok("ray_up")

    async def open_tunnel(self, actor: str = "user") -> ActionResult:
        self._record("open_tunnel", actor=actor)
        return self._ok("open_tunnel")

    async def submit(self, spec: SubmitSpec, actor: str = "user") -> JobInfo:
        self._record("submit", spec=spec, actor=actor)
        job = JobInfo(
            f"raysubmit_fake{len(self.called('submit')):04d}",
            "PENDING",
            spec.entrypoint(),
            start_time=T0,
        )
        self.jobs[job.job_id] = job
        self.publish(job)
        return job

    async def list_jobs(self) -> list[JobInfo]:
        self._record("list_jobs")
        return list(self.jobs.values())

    def successor(self, job_id: str) -> str:
        return job_id

    async def job_status(self, job_id: str) -> JobInfo:
        self._record("job_status", job_id=job_id)
        return self.jobs[job_id]

    async def stop_job(self, job_id: str, actor: str = "user") -> ActionResult:
        self._record("stop_job", job_id=job_id, actor=actor)
        self.jobs[job_id] = replace(self.jobs[job_id], status="STOPPED")
        return self._ok("stop_job")

    async def follow_logs(self, job_id: str) -> AsyncIterator[LogLine | LogStreamClosed]:
        self._record("follow_logs", job_id=job_id)
        for line in log_lines(job_id):
            yield line
        status = self.jobs[job_id].status if job_id in self.jobs else "SUCCEEDED"
        if status in ("PENDING", "RUNNING") and not self.close_early:
            # A live stream: lines pushed by the test, until it pushes None.
            queue = self.live.setdefault(job_id, asyncio.Queue())
            while (item := await queue.get()) is not None:
                yield item
            status = self.jobs[job_id].status
        yield LogStreamClosed(job_id, status, T0 - 5.0)

    def push_line(self, job_id: str, text: str | None) -> None:
        """Feed a live log stream (``None`` closes it)."""
        queue = self.live.setdefault(job_id, asyncio.Queue())
        queue.put_nowait(None if text is None else LogLine(job_id, text, T0))

    async def job_logs(self, job_id: str) -> str:
        self._record("job_logs", job_id=job_id)
        return "\n".join(line.text for line in log_lines(job_id))

    async def recover(self, actor: str = "user", timeout_s: float | None = None) -> RecoveryStatus:
        self._record("recover", actor=actor, timeout_s=timeout_s)
        self.recovery = recovered()
        self.pod = healthy_pod()
        self.publish(self.recovery)
        self.publish(self.pod)
        return self.recovery

    def set_auto_recovery(self, enabled: bool, actor: str = "user") -> None:
        self._record("set_auto_recovery", enabled=enabled, actor=actor)
        self.recovery = replace(self.recovery, auto=enabled)
        self.publish(self.recovery)

    async def relaunch_sweep(self, actor: str = "user") -> JobInfo:
        self._record("relaunch_sweep", actor=actor)
        return JobInfo("raysubmit_relaunch01", "PENDING", "python -m engine.sweep", start_time=T0)

    async def teardown(self, actor: str = "user") -> ActionResult:
        self._record("teardown", actor=actor)
        return self._ok("teardown")

    async def preempt(self, host: str, actor: str = "user") -> ActionResult:
        self._record("preempt", host=host, actor=actor)
        return self._ok("preempt", [host])

    async def recreate(self, host: str, actor: str = "user") -> ActionResult:
        self._record("recreate", host=host, actor=actor)
        return self._ok("recreate", [host])

    async def preempt_slice(
        self, slice_ref: str, grace_s: float | None = None, actor: str = "user"
    ) -> ActionResult:
        self._record("preempt_slice", slice_ref=slice_ref, grace_s=grace_s, actor=actor)
        return self._ok("preempt_slice", [slice_ref])

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
        self._record("create_workload", spec=spec, actor=actor)
        job = JobInfo(spec.name, "PENDING", spec.command, start_time=T0)
        self.jobs[job.job_id] = job
        self.publish(job)
        return job

    async def delete_workload(self, name: str, actor: str = "user") -> ActionResult:
        self._record("delete_workload", workload=name, actor=actor)
        return self._ok("workload_delete")

    async def describe(self, ref: str) -> str:
        self._record("describe", ref=ref)
        return f"kind: Pod\nmetadata:\n  name: {ref}\n\nEvents:\n<none>\n"
