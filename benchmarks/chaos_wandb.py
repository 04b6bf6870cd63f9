"""The chaos drill's W&B phase: seed 000's sweep on W&B, preempted mid-sweep.

After the drill's other phases, on the same pod: the console submits a sweep with the W&B
backend (``AGENTS_PER_NODE`` agents on each of ``NODES`` nodes pulling runs from one W&B
sweep on the local W&B emulator; the console's config is W&B online against it, the key
read by the console from ``KEY_ENV`` and handed to the job as a ``$NAME`` reference). A
worker is preempted, then the head, each abruptly (a trainer in an agent's own process
cannot honour a notice once its raylet is gone: ``engine.sweep_wandb``); the watchdog alone
recovers, relaunching the agents with the sweep id it learned from the first job. The
emulator hands each run marked preempting whose agent went quiet to the next agent, which
resumes it from its checkpoint. Checked here, through the real ``wandb.Api()``: the sweep
finished with exactly its run cap of runs, all finished, and each run's final weights
downloadable by ``latest`` and by ``step-N`` at the trial's total; the drill's own checks
(from the trainers' lines) cover steps lost and restarts from step 0.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from benchmarks.chaos_report import HEAD, WORKER, Loss, Shot, ShotRecord, restarts_from_zero
from console.services.jobs.spec import SubmitSpec
from emulators.wandb import client

WANDB = "wandb"  # the phase's name in Shot.phase
KEY_ENV = "PHANTOM_CHAOS_WANDB_KEY"  # the console reads the key by this name only
ENTITY, PROJECT = "chaos", "seed000"
NODES, AGENTS_PER_NODE = 2, 2
AGENT_TIMEOUT_S = 10  # the emulator re-queues a preempted run after its agent is this quiet


def wandb_shots(first_index: int) -> list[Shot]:
    """A worker, then the head, both abrupt, mid checkpoint interval."""
    return [
        Shot(index=first_index, phase=WANDB, kind=WORKER, notice=False, cycle=0.5, pick=0.0),
        Shot(index=first_index + 1, phase=WANDB, kind=HEAD, notice=False, cycle=0.5, pick=0.0),
    ]


class WandbServer:
    """The W&B emulator of one drill, its key in this process's env under ``KEY_ENV``."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.info: client.WandbInfo | None = None
        self._key = secrets.token_hex(20)

    def start(self) -> None:
        os.environ[KEY_ENV] = self._key  # the console resolves $KEY_ENV for its jobs
        self.info = client.start(
            self.run_dir,
            environ={**os.environ},
            key_env=KEY_ENV,
            extra_args=["--agent-timeout", str(AGENT_TIMEOUT_S)],
        )

    def stop(self) -> None:
        client.stop(self.run_dir)
        os.environ.pop(KEY_ENV, None)

    @property
    def base_url(self) -> str:
        assert self.info is not None
        return self.info.base_url

    def config(self) -> dict[str, Any]:
        """The console's [wandb] table: online, against this server."""
        return {
            "mode": "online",
            "base_url": self.base_url,
            "entity": ENTITY,
            "project": PROJECT,
            "api_key_env": KEY_ENV,
        }

    def inspect(self, sweep_id: str, work: Path) -> dict[str, Any]:
        """The sweep as ``wandb.Api()`` sees it, each run's final artifact downloaded by
        ``latest`` and by its ``step-N`` alias (blocking: run it in a thread)."""
        home = work / "wandb-api"
        home.mkdir(parents=True, exist_ok=True)
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("WANDB_", "HTTP", "http", "NO_PROXY", "no_proxy"))
        }
        env.update(
            {
                "HOME": str(home),
                "WANDB_DIR": str(home),
                "WANDB_CONFIG_DIR": str(home),
                "WANDB_CACHE_DIR": str(home),
                "WANDB_BASE_URL": self.base_url,
                "WANDB_API_KEY": self._key,
                "WANDB_SILENT": "true",
                "NO_PROXY": "127.0.0.1,localhost",
            }
        )
        proc = subprocess.run(
            [sys.executable, "-c", _INSPECT, f"{ENTITY}/{PROJECT}/{sweep_id}", str(home)],
            env=env,
            capture_output=True,
            text=True,
            timeout=180,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"wandb.Api() on the sweep failed: {proc.stderr[-2000:]}")
        out: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
        return out


# The real client's view: the sweep, its runs, and each run's final weights by alias.
_INSPECT = """
import json, sys, wandb
api = wandb.Api()
sweep = api.sweep(sys.argv[1])
entity, project, _ = sys.argv[1].split("/")
runs = []
for run in sweep.runs:
    name = f"phantom-ppo-{sweep.id}-{run.id}"
    found = {}
    try:
        latest = api.artifact(f"{entity}/{project}/{name}:latest")
        steps = [a for a in latest.aliases if a.startswith("step-")]
        found["aliases"] = sorted(latest.aliases)
        found["latest_files"] = sorted(p.name for p in __import__("pathlib").Path(
            latest.download(f"{sys.argv[2]}/{name}-latest")).iterdir())
        if steps:
            by_step = api.artifact(f"{entity}/{project}/{name}:{steps[0]}")
            found["step_files"] = sorted(p.name for p in __import__("pathlib").Path(
                by_step.download(f"{sys.argv[2]}/{name}-step")).iterdir())
    except Exception as exc:
        found["error"] = f"{type(exc).__name__}: {exc}"[:300]
    runs.append({"id": run.id, "state": run.state, "artifact": found})
print(json.dumps({"state": sweep.state, "runs": runs}))
"""


def sweep_problems(view: dict[str, Any], run_cap: int, total: int) -> list[str]:
    """What the client's view of a finished W&B sweep should hold, as named problems."""
    out = []
    runs = view.get("runs", [])
    if view.get("state") != "FINISHED":
        out.append(f"W&B sweep is {view.get('state')}, not FINISHED")
    if len(runs) != run_cap:
        out.append(f"W&B sweep has {len(runs)} runs, run cap {run_cap}")
    for run in runs:
        art = run["artifact"]
        if run["state"] != "finished":
            out.append(f"W&B run {run['id']} is {run['state']}, not finished")
        if f"step-{total}" not in art.get("aliases", []) or "latest" not in art.get("aliases", []):
            out.append(f"W&B run {run['id']}: final artifact aliases {art}")
        elif not art.get("latest_files") or art.get("latest_files") != art.get("step_files"):
            out.append(f"W&B run {run['id']}: final artifact not downloadable by alias: {art}")
    return out


def sweep_url(base_url: str, sweep_id: str) -> str:
    return f"{base_url.rstrip('/')}/{ENTITY}/{PROJECT}/sweeps/{sweep_id}"


def sweep_spec(
    run_cap: int,
    total: int,
    interval: int,
    runtime_env: Mapping[str, Any] | None = None,
    max_failures: int = 50,
) -> SubmitSpec:
    """Seed 000's sweep on W&B as a user submits it: ``NODES`` x ``AGENTS_PER_NODE`` agents,
    ``run_cap`` runs of ``total`` steps checkpointed every ``interval``, no sweep id (the
    engine creates the sweep; the console learns its id from the job)."""
    return SubmitSpec(
        mode="sweep",
        sweep_backend="wandb",
        sweep_kind="ppo_rl_study",
        sweep_method="random",
        sweep_args=(
            f"--trial-timesteps {total} --checkpoint-every {interval} --max-failures {max_failures}"
        ),
        run_cap=run_cap,
        num_nodes=NODES,
        agents_per_node=AGENTS_PER_NODE,
        runtime_env=dict(runtime_env or {}),
    )


async def check_sweep(
    server: WandbServer, sweep_id: str, work: Path, run_cap: int, total: int
) -> tuple[list[str], int]:
    """The finished sweep through ``wandb.Api()``: its problems, and how many runs finished."""
    import asyncio

    view = await asyncio.to_thread(server.inspect, sweep_id, work)
    final = sum(r["state"] == "finished" for r in view.get("runs", []))
    return sweep_problems(view, run_cap, total), final


async def run_wandb_phase(drill: Any) -> None:
    """The phase, on ``drill`` (a ``benchmarks.chaos.Drill``): submit, preempt, check."""
    from console.services.model import JobStatus

    s, svc, server = drill.s, drill.svc, drill.wandb
    shots = [x for x in drill.shots if x.phase == WANDB]
    total = s.wandb_total()
    spec = sweep_spec(s.wandb_run_cap, total, s.wandb_interval, drill._env())
    sweep_args = spec.sweep_args
    job = await svc.submit(spec, actor="chaos")

    def learned() -> bool:
        sub = svc.registry.get(job.job_id)
        drill.wandb_sweep_id = sub.sweep_id if sub is not None else ""
        return bool(drill.wandb_sweep_id)

    await drill._until(learned, 300, "the W&B sweep id")
    sid = drill.wandb_sweep_id
    drill._say(
        f"W&B sweep {sid} ({job.job_id}): run cap {s.wandb_run_cap}, {NODES} nodes x "
        f"{AGENTS_PER_NODE} agents, {sweep_args}; {sweep_url(server.base_url, sid)}"
    )
    # what the script verbs print and the Jobs screen shows: the id and the emulator's page
    shown = await svc.job_status(job.job_id)
    if (shown.sweep_id, shown.sweep_url) != (sid, sweep_url(server.base_url, sid)):
        drill.problems.append(
            f"the console shows W&B sweep {shown.sweep_id!r} at {shown.sweep_url!r}, not {sid} "
            f"at {sweep_url(server.base_url, sid)}"
        )
    prefix = f"{sid}-"
    await drill._until(lambda: bool(drill._running(prefix)), 600, "the first W&B run's progress")
    head = drill.pod.hosts[0].name
    for shot in shots:
        if shot.kind == WORKER:  # a run training on a worker, or the shot hits nothing
            await drill._until(
                lambda: any(a.host != head for a in drill._running(prefix)),
                600,
                "a W&B run's progress on a worker",
            )
        await drill._fire(shot, prefix, s.wandb_interval)
    info = await drill._job_end(job.job_id)
    if info.status != JobStatus.SUCCEEDED:
        drill.problems.append(f"W&B sweep job ended {info.status}: {info.message}")
    last = svc.successor(job.job_id)
    relaunched = svc.registry.get(last)
    if last != job.job_id and (relaunched is None or relaunched.spec.sweep_id != sid):
        drill.problems.append(f"W&B sweep relaunched as {last} without its sweep id {sid}")
    problems, final = await check_sweep(server, sid, drill.work, s.wandb_run_cap, total)
    drill.problems.extend(problems)
    drill.wandb_figures = {
        "wandb_sweep_id": sid,
        "wandb_runs_final": final,
        "wandb_run_cap": s.wandb_run_cap,
        "wandb_relaunched_as": last,
    }
    drill._say(f"W&B sweep {info.status}: {final}/{s.wandb_run_cap} runs finished")


def wandb_figures(
    records: Sequence[ShotRecord], losses: Sequence[Loss], runs: Mapping[str, Any], prefix: str
) -> dict[str, Any]:
    """The W&B phase's own figures: steps lost per preemption, MTTR, restarts from 0."""
    shots = {r.shot.index: r for r in records if r.shot.phase == WANDB}
    lost: dict[int, int] = {}
    for loss in losses:
        if loss.shot in shots and loss.lost is not None:
            lost[loss.shot] = lost.get(loss.shot, 0) + loss.lost
    mine = {run: attempts for run, attempts in runs.items() if run.startswith(prefix)}
    return {
        "wandb_steps_lost_per_preemption": {
            f"{r.shot.kind}#{i}": lost.get(i, 0) for i, r in shots.items()
        },
        "wandb_mttr_s": {
            f"{r.shot.kind}#{i}": (
                None
                if r.recovery is None or r.recovery.mttr_s is None
                else round(r.recovery.mttr_s, 2)
            )
            for i, r in shots.items()
        },
        "wandb_restarted_from_zero": len(restarts_from_zero(mine)),
    }
