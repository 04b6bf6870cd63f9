"""The W&B backend of ``engine.sweep`` (online only: a W&B sweep's controller lives on the
W&B server, so it cannot run offline).

``num_nodes * agents_per_node`` Ray tasks each run ``wandb.agent(sweep_id)``; runs
checkpoint under ``<storage>/<sweep-id>/<run-id>`` and are marked preempting, so W&B
re-queues a run whose agent died, and its checkpoint is picked up when it is rerun.
Re-launch with the same ``--sweep-id`` to continue.

A run trains in the agent's own process (wandb.agent hands it the run object), so a
preemption notice is honoured when SIGTERM reaches that process while its raylet lives
(``ray job stop``, a GKE pod's grace); when a whole host goes down the raylet takes the agent
with it and the run resumes from its last periodic checkpoint. The Ray Tune backend runs each
trainer in a process of its own and has no such gap.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from typing import Any

from engine.contract import SWEEP_WANDB
from engine.exit_codes import EX_PREEMPTED
from engine.logs import log
from engine.raycluster import connect, smallest_node_cpus
from engine.sweep_spaces import SweepSpec, trial_config, wandb_sweep_config
from engine.sweep_tune import storage_uri


def _wandb_agent(index: int, sweep_id: str, settings: dict[str, Any]) -> dict[str, Any]:
    """Body of one agent task: pull runs from the W&B sweep until it is done."""
    import ray
    import wandb

    from engine.notice import TrainingPreempted
    from engine.trainer import run_training

    spec = SweepSpec(**settings["spec"])
    runs: list[str] = []

    def one_run() -> None:
        # a re-queued run comes back with its id in WANDB_RUN_ID: continue its history
        run = wandb.init(resume="allow")
        run.mark_preempting()  # W&B re-queues the run if this agent dies mid-run
        params = {k: v for k, v in dict(run.config).items() if k in spec.parameters}
        cfg = trial_config(spec, params, settings, run_name=f"{sweep_id}-{run.id}")
        try:
            run_training(cfg)
        except TrainingPreempted:
            # the notice checkpoint is written and the run marked preempting: this agent's
            # host is going away, so stop pulling runs (Ray retries the agent elsewhere)
            sys.stderr.flush()
            os._exit(EX_PREEMPTED)
        runs.append(run.id)

    wandb.agent(
        sweep_id,
        function=one_run,
        project=settings.get("wandb_project"),
        entity=settings.get("wandb_entity"),
    )
    return {"agent": index, "node_ip": ray.util.get_node_ip_address(), "runs": runs}


def run_wandb(args: argparse.Namespace, spec: SweepSpec) -> dict[str, Any]:
    import time

    import wandb

    config = wandb_sweep_config(spec, args.method, args.run_cap)
    sweep_id = args.sweep_id or wandb.sweep(
        config, project=args.wandb_project, entity=args.wandb_entity
    )
    log(
        f"{SWEEP_WANDB.format(sweep_id=sweep_id)}: {args.num_nodes * args.agents_per_node} agents",
        "sweep",
    )
    connect(args.address)
    import ray

    try:
        cpus_per_node = args.cpus_per_node or smallest_node_cpus()
        resources = {"TPU": float(args.tpu_per_task)} if args.tpu_per_task > 0 else {}
        root = storage_uri(args.storage)
        settings = {
            "spec": dataclasses.asdict(spec),
            "engine_storage": f"{root.rstrip('/')}/{sweep_id}",
            "wandb": "online",
            "wandb_project": args.wandb_project,
            "wandb_entity": args.wandb_entity,
            "trial_timesteps": args.trial_timesteps,
            "checkpoint_every": args.checkpoint_every,
            "seed": args.seed,
        }
        agent = ray.remote(_wandb_agent)
        refs = [
            agent.options(
                num_cpus=cpus_per_node / args.agents_per_node,
                resources=resources,
                scheduling_strategy="SPREAD",
                max_retries=args.max_failures,
            ).remote(i, sweep_id, settings)
            for i in range(args.num_nodes * args.agents_per_node)
        ]
        started = time.monotonic()
        agents = ray.get(refs)
        runs = sum(len(a["runs"]) for a in agents)
        return {
            "backend": "wandb",
            "sweep_id": sweep_id,
            "agents": agents,
            "completed": runs,
            "wall_seconds": time.monotonic() - started,
        }
    finally:
        ray.shutdown()
