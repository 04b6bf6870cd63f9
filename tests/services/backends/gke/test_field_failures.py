"""Two GKE field failures (issue 45, item 7) reproduced on the GKE emulator with the real
trainer and the console's services:

* TensorBoard flush lag: a metrics logger that writes its buffered steps every N steps (the
  emulated GRPO trainer's ``TB_FLUSH_STEPS``) leaves the newest steps on no disk between
  flushes; the console must not call that run stalled, and must count every step once the
  run ends (the last steps flushed on exit are not lost);
* Terminating pods blocking a JobSet's recreation (test below).
"""

from __future__ import annotations

from pathlib import Path

from console.services.model import RunMetrics
from emulators.gke import client as gke_client
from tests.services.backends.gke.test_backend import latest_metrics, spec
from tests.support.fixtures_gke import gke
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
