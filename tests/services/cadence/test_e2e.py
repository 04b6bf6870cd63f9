"""The seed's checklist question "are metrics arriving at a steady cadence?", answered for a
job the console itself submitted, with the console's own default W&B directory.

No fakes: an emulated pod, real Ray, a real PPO trainer logging to W&B offline files under
<state>/phantom/wandb (the product's default, whose name once hid every run from cadence).
The run shows up in the services' cadence and in `status`; SIGSTOP the trainer and it turns
stalled within k x its median interval, and the stall is journaled.
"""

from __future__ import annotations

import contextlib
import os
import signal
from dataclasses import replace
from pathlib import Path

import pytest

from benchmarks.pods import pod_config
from console.services.jobs.spec import SubmitSpec
from console.status import collect_status
from console.wiring import make_services
from emulators.tpu_pod.client import PodInfo
from tests.support.waiting import until


def _trainer_pids(job_id: str) -> list[int]:
    """The trainer processes of one Ray job (its driver carries the job's submission id)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes()
            env = (entry / "environ").read_bytes()
        except OSError:
            continue
        if b"engine.train" in cmd and job_id.encode() in env:
            pids.append(int(entry.name))
    return pids


@pytest.mark.slow
@pytest.mark.timeout(900)
async def test_a_console_submitted_run_has_a_cadence_and_a_stopped_trainer_stalls(
    pod: PodInfo, tmp_path: Path
) -> None:
    base = pod_config(pod, tmp_path, recovery={"poll_interval_s": 1.0, "stall_factor": 3.0})
    config = replace(base, wandb=replace(base.wandb, dir=""))  # the product's default dir
    state = tmp_path / "state" / "phantom"
    services = make_services(config, state_dir=state, autostart_pod=False)
    stopped: list[int] = []
    try:
        await services.start()
        for step in (services.bootstrap, services.ray_up, services.open_tunnel):
            res = await step()
            assert res.ok, res.message
        spec = SubmitSpec(
            train_args="--algo ppo --total-timesteps 2000000 --n-envs 2 --log-every 256 "
            "--device cpu --torch-threads 1",
            runtime_env={"env_vars": {"WANDB__TRANSACTION_LOG_FLUSH_INTERVAL": "1"}},
        )
        job = await services.submit(spec)
        await until(
            lambda: [c.last_step is not None for c in services.cadence()] == [True],
            300,
            "the run's first metrics",
        )
        (run,) = services.cadence()
        assert (state / "wandb").is_dir()
        status = await collect_status(services)
        assert [c["run_id"] for c in status["cadence"]] == [run.run_id]

        await until(
            lambda: (services.cadence()[0].median_interval_s or 0) > 0, 300, "a median interval"
        )
        stopped = _trainer_pids(job.job_id)
        assert stopped, "the trainer process was not found"
        for pid in stopped:
            os.kill(pid, signal.SIGSTOP)  # alive, RUNNING to Ray, but silent
        await until(lambda: services.cadence()[0].stalled, 300, "the stall")
        await until(lambda: services.events(kinds=["stalled"]), 30, "the stall in the journal")
        assert [e.data.get("run_id") for e in await services.events(kinds=["stalled"])] == [
            run.run_id
        ]
    finally:
        for pid in stopped:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        await services.teardown()
        await services.stop()
        services.close_journal()
