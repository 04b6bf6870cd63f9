"""How long Ray lets a stopped job's driver stop: the console's `ray start` sets it.

Ray's JobSupervisor SIGTERMs a stopped job's driver and SIGKILLs it after
RAY_JOB_STOP_WAIT_TIME_S (read from the supervisor actor's own environment, which it inherits
from its node's raylet; Ray's default is 3 s). The engine's sweep driver needs longer: it stops
Ray Tune (state saved, each trial's trainer checkpoints at its step) and exits 75. The slow test
starts a real head with the console's own command line (``raycmd.head_start_command``), runs
a Tune sweep as a Ray job, stops it through the job SDK and reads what the driver, the trial
and the supervisor left.
"""

from __future__ import annotations

import asyncio
import os
import re
import shlex
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from console.services.backends.tpu_vm import raycmd
from console.services.backends.tpu_vm.jobs import JobService
from console.services.jobs.spec import SubmitSpec
from engine.contract import SWEEP_DRIVER_EXIT_WITHIN_S
from engine.sweep_tune import read_status
from tests.services.backends.tpu_vm.test_jobs import MARKER, RAY, VENV_BIN, free_port, kill_marked
from tests.support import REPO
from tests.support.waiting import until, wait_for

NODE_IP = "127.0.0.234"
SWEEP_ID = "stopwait"
TRIAL_STEPS = 32000  # far more than it reaches before the stop: the stop is what ends it


def test_every_node_lets_a_stopped_driver_outlast_the_sweep_drivers_own_stop() -> None:
    """Head and worker start with a job-stop wait Ray parses (an int, in seconds) that is
    longer than the sweep driver's own bound after SIGTERM; a node's own env still wins."""
    wait = raycmd.NODE_ENV["RAY_JOB_STOP_WAIT_TIME_S"]
    assert int(wait) > SWEEP_DRIVER_EXIT_WITHIN_S > 3  # 3: Ray's default, too short
    node = raycmd.RayNodeOptions(node_ip="127.0.0.10")
    for cmd in (raycmd.head_start_command(node), raycmd.worker_start_command(node, "h:6379")):
        words = shlex.split(cmd.replace(raycmd.TEMP_DIR_SHELL, "/tmp/ray"))
        assert f"RAY_JOB_STOP_WAIT_TIME_S={wait}" in words[: words.index("start")]
    mine = raycmd.RayNodeOptions(node_ip="127.0.0.10", env={"RAY_JOB_STOP_WAIT_TIME_S": "60"})
    assert "RAY_JOB_STOP_WAIT_TIME_S=60 " in raycmd.head_start_command(mine)


@dataclass(frozen=True)
class ConsoleHead:
    dashboard: str
    temp_dir: Path


@pytest.fixture
def console_head() -> Iterator[ConsoleHead]:
    """A one-node cluster started by the console's `ray start --head` command line (its
    NODE_ENV included), on loopback, in a short temp dir (Ray's socket paths stay short);
    every process it spawns carries a marker, and teardown kills exactly those pids."""
    temp_dir = Path(tempfile.mkdtemp(prefix="prs", dir="/tmp"))
    marker = uuid.uuid4().hex
    head = raycmd.RayHeadOptions(
        gcs_port=free_port(), dashboard_port=free_port(), client_server_port=free_port()
    )
    node = raycmd.RayNodeOptions(
        node_ip=NODE_IP,
        num_cpus=2,
        object_store_memory=100 * raycmd.MIB,
        temp_dir=str(temp_dir),
        ray=str(RAY),
    )
    env = {
        **os.environ,
        MARKER: marker,
        "RAY_USAGE_STATS_ENABLED": "0",
        "NO_GCE_CHECK": "True",
        "WANDB_MODE": "disabled",
        "PATH": f"{VENV_BIN}:{os.environ['PATH']}",
    }
    env.pop("RAY_ADDRESS", None)
    try:
        proc = subprocess.run(
            ["bash", "-c", raycmd.head_start_command(node, head)],
            env=env,
            capture_output=True,
            text=True,
            timeout=240,
            start_new_session=True,
        )
        if proc.returncode != 0:
            pytest.fail(f"ray start failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
        yield ConsoleHead(f"http://127.0.0.1:{head.dashboard_port}", temp_dir)
    finally:
        survivors = kill_marked(marker)
        shutil.rmtree(temp_dir, ignore_errors=True)
        assert not survivors, f"Ray processes survived teardown: {survivors}"


def _engine_copy(tmp_path: Path) -> Path:
    """The job's working dir: the engine package, as the console uploads the project."""
    wd = tmp_path / "proj"
    shutil.copytree(REPO / "engine", wd / "engine", ignore=shutil.ignore_patterns("__pycache__"))
    return wd


def _steps_reached(text: str) -> int:
    found = [int(s) for s in re.findall(r"progress step=(\d+)/", text)]
    return max(found, default=0)


@pytest.mark.slow
async def test_a_stopped_sweep_job_stops_cleanly_instead_of_being_sigkilled(
    console_head: ConsoleHead, tmp_path: Path
) -> None:
    """`ray job stop` of a Tune sweep: with Ray's default 3 s the supervisor SIGKILLed the
    driver in the middle of Tune's stop (no state saved, no 'state saved' line, the trial's
    trainer never checkpointed). With the console's wait the driver reaches its clean-stop
    line after Tune saved its state, the trial's trainer writes its notice checkpoint at the
    step it reached, and the supervisor says the job ended gracefully, not force-killed."""
    storage = f"file://{tmp_path / 'sweeps'}"
    jobs = JobService(console_head.dashboard)
    spec = SubmitSpec(
        mode="sweep",
        sweep_kind="ppo_rl_study",
        sweep_method="grid",
        run_cap=1,
        num_nodes=1,
        sweep_id=SWEEP_ID,
        sweep_args=(
            f"--trial-timesteps {TRIAL_STEPS} --checkpoint-every 1000000 --wandb disabled "
            f"--cpus-per-node 1 --storage {storage}"
        ),
        submission_id="phantom-test-sweep-stop",
    )
    info = await jobs.submit(spec, working_dir=_engine_copy(tmp_path), environ={})

    async def training() -> bool:
        status = (await jobs.status(info.job_id)).status
        assert status in ("PENDING", "RUNNING"), await jobs.logs(info.job_id)
        return (
            bool(read_status(storage, SWEEP_ID))
            and _steps_reached(await jobs.logs(info.job_id)) >= 2048
        )

    await until(training, 300, "the sweep's trial training past step 2048")
    assert await jobs.stop(info.job_id)
    done = await jobs.wait_for(
        info.job_id, {"STOPPED", "SUCCEEDED", "FAILED"}, timeout_s=raycmd.JOB_STOP_WAIT_S + 60
    )
    text = await jobs.logs(info.job_id)
    supervisor = console_head.temp_dir / "session_latest" / "logs" / "jobs"
    said = (supervisor / f"supervisor-{info.job_id}.log").read_text()

    assert done.status == "STOPPED", text[-4000:]
    assert "force-killed with SIGKILL" not in said, said[-3000:]
    assert "terminated gracefully with SIGTERM" in said, said[-3000:]
    assert f"preemption notice: sweep {SWEEP_ID} state saved" in text, text[-4000:]
    assert "Experiment has been interrupted, but the most recent state was saved" in text

    # The trial's trainer got its notice from the stopping trial and checkpoints on its own
    # (it may finish after the driver is gone): no periodic checkpoint comes before 10^6
    # steps, so a saved step is its notice checkpoint, at the step it had reached.
    def noticed() -> dict[str, Any] | None:
        (trial,) = read_status(storage, SWEEP_ID).values()
        first = trial["attempts"][0]
        return first if first["last_step"] else None

    first = await asyncio.to_thread(wait_for, noticed, 60, "the trial's notice checkpoint")
    assert 2048 <= first["last_step"] < TRIAL_STEPS and not first["final"], first
