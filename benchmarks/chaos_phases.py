"""The chaos drill's training phases: a single ``engine.train`` job, then a Ray Tune sweep.

Each phase submits its job through the console as a user would, fires the preemptions
``chaos_report.plan`` drew for it (``Drill._fire``: the watchdog alone recovers), waits for
the job's end and checks what it left: the single job's final weights at exactly its
``--total-timesteps``, every trial of the sweep's run cap final at its total, no trial
restarted from step 0 after a checkpoint. Each also notes what the ledger check
(``chaos_ledger``) compares: the job's id, when it was submitted and when it was seen ended.
The trainers log to offline W&B run files in the drill's own ``WANDB_DIR``: the engine's
steps that ``phantom report --runs`` reads.
"""

from __future__ import annotations

import json
import shlex
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks.chaos_ledger import JobTruth
from benchmarks.chaos_report import JOB, SWEEP, brief, trial_restarts
from console.services.jobs.spec import SubmitSpec
from console.services.model import JobStatus
from engine.sweep_tune import read_status

if TYPE_CHECKING:
    from benchmarks.chaos import Drill

# wandb-core writes a run file every this many seconds (W&B's default: 15): within a moment
# of each point, so what a SIGKILLed trainer logged is on disk
FLUSH_INTERVAL_S = 0.1


def train_env(drill: Drill) -> dict[str, Any]:
    """The runtime env of the phases' jobs: the drill's, plus the trainers' W&B run files
    apart from the console's own W&B dir (its cadence watch stays as it was)."""
    env = drill._env()
    env["env_vars"] = {
        **env["env_vars"],
        "WANDB_DIR": str(drill.runs_dir),
        "WANDB__TRANSACTION_LOG_FLUSH_INTERVAL": f"{FLUSH_INTERVAL_S:g}",
    }
    return env


async def job_phase(drill: Drill) -> None:
    assert drill.svc is not None and drill.pod is not None
    s, shots = drill.s, [x for x in drill.shots if x.phase == JOB]
    train_args = (
        f"--algo ppo --total-timesteps {s.job_total()} --checkpoint-every {s.job_interval} "
        f"--log-every 256 --hparams {shlex.quote(json.dumps({'n_steps': 256}))} "
        f"--run-name {s.job_run} --eval-episodes 2 --wandb offline --device cpu "
        "--torch-threads 1"
    )
    submitted = time.time()
    job = await drill.svc.submit(
        SubmitSpec(mode="single", train_args=train_args, runtime_env=train_env(drill)),
        actor="chaos",
    )
    truth = JobTruth(JOB, job.job_id, s.job_run, submitted)
    drill.truths.append(truth)
    drill._say(f"single job {job.job_id}: {train_args}")
    await drill._until(lambda: bool(drill._running(s.job_run)), 420, "the job's first progress")
    for shot in shots:
        await drill._fire(shot, s.job_run, s.job_interval)
    info = await drill._job_end(job.job_id)
    truth.ended_seen_at = time.time()
    manifest = Path(drill.pod.bucket) / s.job_run / "final" / "MANIFEST.json"
    try:
        drill.job_final_step = int(json.loads(manifest.read_text())["step"])
    except (OSError, ValueError, KeyError):
        drill.job_final_step = None
    if info.status != JobStatus.SUCCEEDED:
        drill.problems.append(f"single job ended {info.status}: {info.message}")
    if drill.job_final_step != s.job_total():
        drill.problems.append(
            f"single job's final weights at step {drill.job_final_step}, not its "
            f"--total-timesteps {s.job_total()} ({manifest})"
        )
    drill._say(f"single job {info.status} at step {drill.job_final_step}")


async def sweep_phase(drill: Drill) -> None:
    assert drill.svc is not None and drill.pod is not None
    s, shots = drill.s, [x for x in drill.shots if x.phase == SWEEP]
    sweep_args = (
        f"--trial-timesteps {s.trial_total()} --checkpoint-every {s.trial_interval} "
        "--max-failures 50 --wandb offline"
    )
    submitted = time.time()
    job = await drill.svc.submit(
        SubmitSpec(
            mode="sweep",
            sweep_kind="ppo_rl_study",
            sweep_method="random",
            run_cap=s.run_cap,
            num_nodes=s.hosts,
            agents_per_node=1,
            tpu_per_task=0,
            sweep_id=s.sweep_id,
            sweep_args=sweep_args,
            runtime_env=train_env(drill),
        ),
        actor="chaos",
    )
    prefix = f"{s.sweep_id}-"
    truth = JobTruth(SWEEP, job.job_id, prefix, submitted)
    drill.truths.append(truth)
    drill._say(f"sweep {s.sweep_id} ({job.job_id}): run cap {s.run_cap}, {sweep_args}")
    await drill._until(lambda: bool(drill._running(prefix)), 600, "the first trial's progress")
    for shot in shots:
        await drill._fire(shot, prefix, s.trial_interval)
    info = await drill._job_end(job.job_id)
    truth.ended_seen_at = time.time()
    if info.status != JobStatus.SUCCEEDED:
        drill.problems.append(f"sweep job ended {info.status}: {info.message}")
    trials = read_status(f"{drill.pod.bucket_uri}/sweeps", s.sweep_id)
    done = [t for t in trials.values() if t.get("final") and t.get("step") == s.trial_total()]
    drill.trials_final = len(done)
    if len(trials) != s.run_cap or len(done) != s.run_cap:
        drill.problems.append(
            f"{len(done)} of {len(trials)} trials final at step {s.trial_total()}; run cap "
            f"{s.run_cap}: {brief(trials)}"
        )
    drill.problems.extend(trial_restarts(trials))
    drill._say(f"sweep {info.status}: {len(done)}/{s.run_cap} trials final")
