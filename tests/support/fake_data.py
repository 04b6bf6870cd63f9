"""The fixed data the fake services answer with: one pod, its jobs, runs and events, in a few
scenarios (healthy, preempted and recovering, a GKE slice), all at the fixed time ``T0``."""

from __future__ import annotations

from dataclasses import replace

from console.services.model import (
    Event,
    HostStatus,
    JobInfo,
    LogLine,
    PodSnapshot,
    PodStatus,
    RecoveryOutcome,
    RecoveryStatus,
    RecoveryStep,
    RunCadence,
    RunMetrics,
    WorkloadStatus,
)

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
        outcome=RecoveryOutcome.OK,
        steps=tuple(RecoveryStep(name, "ok", T0 - 200, 10.0, 1) for name in STEPS),
    )
