"""A false stall at the end of a GKE workload (issue 45's field failures).

A run that has logged its last step goes silent while it ends: the writer's final save and
upload, the processes exiting, the Jobs and then the JobSet marked complete. On the emulator
with the real trainer, the writer spends ``FINAL_SAVE_TIME`` on its final save after the
last step while the other processes have exited: the JobSet stays running, beyond the stall
rule's limit. The console must call that run finishing, not stalled, and say at the end that
it finished, not that it is "logging again". Before, it journaled ``stalled`` (and then
``logging again``) for every run that completed.
"""

from __future__ import annotations

from pathlib import Path

from console.services.model import RunCadence
from emulators.gke import client as gke_client
from tests.services.backends.gke.test_backend import spec
from tests.support.fixtures_gke import gke
from tests.support.gke_services import events, gke_config, gke_services
from tests.support.waiting import until

__all__ = ["gke"]


async def test_a_workload_at_its_end_is_finishing_then_finished_never_stalled(
    gke: gke_client.GkeInfo, tmp_path: Path
) -> None:
    # limit: 20 x 0.2 s + the emulator's 1 s lag = 5 s; the writer's final save takes 12 s
    config = gke_config(gke.run_dir, recovery={"auto": False, "stall_factor": 20})
    async with gke_services(config, tmp_path / "state") as (svc, seen):
        env = {"STEPS": "20", "STEP_TIME": "0.2", "CHECKPOINT_PERIOD": "10"}
        env["FINAL_SAVE_TIME"] = "12"
        await svc.create_workload(spec(config, "ends", env=env), "test")

        def cadence(state: str) -> RunCadence | None:
            found = (c for c in svc.cadence() if c.run_id == "ends" and c.state == state)
            return next(found, None)

        await until(lambda: cadence("finished") is not None, 120, "the run finished")
        assert not events(seen, "stalled"), [e.message for e in events(seen, "stalled")]
        assert not events(seen, "cadence_resumed")
        # ... and while the writer saved, the run was shown finishing at its last step.
        shown = [u for u in seen if isinstance(u, RunCadence) and u.run_id == "ends"]
        assert any(c.state == "finishing" and c.last_step == 20 for c in shown)
