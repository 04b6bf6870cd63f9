"""Two GKE field failures (issue 45, item 7) reproduced on the GKE emulator with the real
trainer and the console's services:

* TensorBoard flush lag: a metrics logger that writes its buffered steps every N steps (the
  emulated GRPO trainer's ``TB_FLUSH_STEPS``) leaves the newest steps on no disk between
  flushes; the console must not call that run stalled, and must count every step once the
  run ends (the last steps flushed on exit are not lost);
* Terminating pods blocking a JobSet's recreation: a pod held by a finalizer after its
  containers are gone keeps its Job, and the JobSet cannot recreate a Job of that name.
"""

from __future__ import annotations

from pathlib import Path

from console.services.model import RunMetrics
from emulators.gke import client as gke_client
from tests.emulators.gke.test_kubectl import run
from tests.services.backends.gke.test_backend import latest_metrics, spec
from tests.support.fixtures_gke import gke, kubectl
from tests.support.gke_services import events, gke_config, gke_services
from tests.support.waiting import until

__all__ = ["gke"]


async def test_tensorboard_flush_lag_is_no_stall_and_hides_no_step(
    gke: gke_client.GkeInfo, tmp_path: Path
) -> None:
    """Steps of 0.2 s, flushed 20 at a time: the run is silent 4 s between flushes, beyond
    the stall rule's 10 x 0.2 s + the emulator's lag. Before, the console
    journaled ``stalled`` (and ``cadence_resumed``) at each flush; now the reader sees the
    flushes' span and allows it. Every step is counted at the end: the trainer flushes what
    it holds on exit."""
    config = gke_config(gke.run_dir, recovery={"auto": False})
    steps = 140
    async with gke_services(config, tmp_path / "state") as (svc, seen):
        env = {"STEPS": str(steps), "STEP_TIME": "0.2", "TB_FLUSH_STEPS": "20"}
        await svc.create_workload(spec(config, "laggy", env=env), "test")

        def finished() -> bool:
            got: RunMetrics | None = latest_metrics(seen, "laggy")
            return got is not None and got.last_step == steps

        await until(finished, 120, f"the run's step {steps} read from TensorBoard")
        assert not events(seen, "stalled"), [e.message for e in events(seen, "stalled")]
        metrics = latest_metrics(seen, "laggy")
        assert metrics is not None
        assert [s for s, _ in metrics.series["step_time_sec"]] == list(range(21, steps + 1))


async def test_a_pod_held_terminating_by_a_finalizer_is_released_and_the_jobset_recreated(
    gke: gke_client.GkeInfo, tmp_path: Path
) -> None:
    """A worker pod carries a finalizer of another controller (here a log shipper's, added
    with the real kubectl). A crash of another worker restarts the JobSet: the held pod ends
    Failed but stays Terminating, so its Job's foreground deletion never ends and the
    JobSet cannot recreate a Job of that name: nothing runs (the emulator reproduces it, as
    the cluster does). The console's diagnosis names the pod and its finalizer, and the
    watchdog's recovery takes the finalizers off: the JobSet's next attempt runs. Before,
    the workload stayed with no pod for ever and nothing said why."""
    k = kubectl("1.33")
    config = gke_config(gke.run_dir)
    async with gke_services(config, tmp_path / "state") as (svc, seen):
        env = {"STEPS": "4000", "STEP_TIME": "0.25"}
        await svc.create_workload(spec(config, "held", env=env), "test")

        def running(attempt: int) -> list[str]:
            return sorted(
                p.name
                for p in svc.snapshot().pods
                if p.workload == "held" and p.phase == "Running" and p.restart_attempt == attempt
            )

        await until(lambda: len(running(0)) == 8, 90, "8 pods Running")
        holder, victim = running(0)[1], running(0)[2]
        patch = '{"metadata":{"finalizers":["example.com/log-shipper"]}}'
        run(k, gke, "patch", "pod", holder, "-p", patch)
        gke_client.crash_container(gke.run_dir, victim)

        def held() -> tuple[str, ...]:
            w = next((w for w in svc.snapshot().workloads if w.name == "held"), None)
            return w.held if w is not None else ()

        await until(lambda: bool(held()), 60, "the pod held Terminating, seen")
        assert held()[0].startswith(f"{holder} (") and "example.com/log-shipper" in held()[0]
        await until(lambda: len(running(1)) == 8, 120, "the JobSet's next attempt Running")
        released = [
            e
            for e in events(seen, "action")
            if str(e.data.get("action", "")) == "recovery.release" and e.data.get("ok")
        ]
        assert released and holder in released[0].message, [e.message for e in released]
        gone = run(k, gke, "get", "pod", holder, "--ignore-not-found", "-o", "name").stdout
        assert gone.strip() == ""
