"""One trainer per node as Ray tasks (``scripts/ray_distributed_train.py``).

Each trainer runs ``engine.train`` in-process (``run_training``) with
``--seed base + i`` and its own run name, so trainer i always writes to
``<storage>/<run-name-i>/``. Trainers are pinned to distinct nodes with a
STRICT_SPREAD placement group (one bundle per trainer, ``{"CPU": c, "TPU": t}``
when ``--tpu-per-task`` > 0); ``--placement spread`` uses Ray's best-effort SPREAD
strategy instead. A trainer whose node is lost fails with a system error and is
retried by Ray (``max_retries``); its bundle is rescheduled on a live node (or
waits for the node to come back) and the retried trainer resumes from its last
checkpoint, provided ``--storage`` is shared by all nodes (``file://`` on the
emulator's bucket, ``gs://`` on GCP).

Preemption notice: each trainer runs in a process of its own (``engine.trialproc``), so a
SIGTERM on its host reaches it even as the raylet goes down: it checkpoints at the step
reached and exits 75; Ray retries the task (a ``TrainerPreempted`` error is retryable, a
lost worker is a system failure) and the retried trainer waits for that checkpoint and
resumes from it. A SIGTERM to the launcher itself (the head host's notice: losing the head
ends every task) is forwarded to every trainer (``ray.cancel``; each trainer task then gives
its trainer the notice and waits for its checkpoint), and the launcher exits 75.

Results are gathered and printed as one JSON object (last line on stdout).
Exit codes (``engine.exit_codes``): 0 all trainers finished, 1 a trainer failed or the
cluster could not place the trainers, 2 usage error, 75 preempted (every running trainer
wrote a notice checkpoint; submit the same job again to resume).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from engine.cliargs import (
    bounded_text,
    non_negative_float,
    non_negative_int,
    positive_float,
    positive_int,
    ray_address,
)
from engine.envvars import EnvError, apply_jax_platform, notice_grace_s
from engine.exit_codes import EX_FAILURE, EX_OK, EX_PREEMPTED
from engine.logs import log
from engine.notice import PreemptionNotice
from engine.raycluster import connect
from engine.trainconfig import (
    UsageError,
    build_parser,
    config_from_args,
    default_run_name,
)
from engine.trialproc import EventWriter, trainer_processes

_ADDRESS_HELP = "Ray address: auto, host:port (GCS) or ray://host:10001 (default $RAY_ADDRESS)"


class TrainerPreempted(RuntimeError):
    """A trainer stopped on a preemption notice after checkpointing (Ray retries the task)."""


def build_launcher_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="scripts/ray_distributed_train.py",
        description="Run one engine.train trainer per Ray node (seeds base-seed + i).",
    )
    parser.add_argument(
        "--train-args",
        type=bounded_text,
        required=True,
        help='arguments for engine.train, e.g. "--algo ppo --total-timesteps 100000 --alpha 0.4"',
    )
    parser.add_argument("--num-nodes", type=positive_int, required=True, help="trainers (1/node)")
    parser.add_argument(
        "--tpu-per-task", type=non_negative_float, default=0.0, help="TPU resource per trainer"
    )
    parser.add_argument("--cpus-per-task", type=positive_float, default=1.0)
    parser.add_argument("--base-seed", type=non_negative_int, default=0)
    parser.add_argument("--address", type=ray_address, default=None, help=_ADDRESS_HELP)
    parser.add_argument(
        "--max-retries", type=non_negative_int, default=3, help="retries of a lost trainer"
    )
    parser.add_argument(
        "--placement",
        choices=("strict", "spread"),
        default="strict",
        help="strict: one trainer per node guaranteed (STRICT_SPREAD); spread: best effort",
    )
    parser.add_argument(
        "--placement-timeout",
        type=positive_float,
        default=300.0,
        help="seconds to wait for enough nodes before giving up",
    )
    parser.add_argument(
        "--validate-only",
        action="store_true",
        help="check the flags (and --train-args), print the per-trainer argv as JSON, exit",
    )
    return parser


def trainer_argvs(train_args: str, num_nodes: int, base_seed: int) -> list[list[str]]:
    """Per-trainer argv lists: the user's args plus ``--seed`` and ``--run-name``.

    Raises UsageError if ``train_args`` is not valid for engine.train.
    """
    try:
        base_argv = shlex.split(train_args)
    except ValueError as exc:
        raise UsageError(f"--train-args: cannot split {train_args!r} ({exc})") from None
    if not base_argv:
        raise UsageError('--train-args is empty; e.g. "--algo ppo --total-timesteps 100000"')
    try:
        # trainers run on other nodes: the storage is checked by them, not here
        args = build_parser(raise_errors=True).parse_args(base_argv)
        cfg = config_from_args(args, local_checks=False)
    except UsageError as exc:
        raise UsageError(f"--train-args: {exc}") from None
    user_name = "--run-name" in base_argv or any(a.startswith("--run-name=") for a in base_argv)
    out = []
    for i in range(num_nodes):
        seed = base_seed + i
        if user_name:
            name = f"{cfg.run_name}-t{i}"
        else:
            name = default_run_name(replace(cfg, seed=seed, run_name=""))
        out.append([*base_argv, "--seed", str(seed), "--run-name", name])
    return out


def _storage_warning(argv: Sequence[str], num_nodes: int) -> None:
    parser = build_parser()
    args, _ = parser.parse_known_args(list(argv))
    storage = str(args.storage)
    if num_nodes > 1 and "://" not in storage and not os.path.isabs(storage):
        log(
            f"warning: --storage {storage!r} is relative, so each node writes its own copy; "
            "a trainer retried on another node starts over. Use file:///shared/path or gs://.",
            "distributed",
        )


# Variables a trainer needs from the launcher's environment. Secrets are deliberately not
# here: WANDB_API_KEY reaches trainers through the job's runtime env (submit_ray_job.sh),
# which Ray tasks inherit.
FORWARDED_ENV = (
    "WANDB_MODE",
    "WANDB_DIR",
    "WANDB_PROJECT",
    "WANDB_ENTITY",
    "WANDB_SILENT",
    "WANDB_BASE_URL",
    "PHANTOM_JAX_PLATFORM",
    "JAX_PLATFORMS",
)


def forwarded_env() -> dict[str, str]:
    return {k: os.environ[k] for k in FORWARDED_ENV if os.environ.get(k)}


def trainer_main(args: dict[str, Any], events: EventWriter, notice: PreemptionNotice) -> Any:
    """One trainer's training, in its own process (``engine.trialproc``)."""
    from engine.train import train_from_argv

    os.environ.setdefault("PHANTOM_HOST_IP", args["node"])  # the node name in checkpoints
    return train_from_argv(args["argv"], notice=notice)


def interruptible_by_cancel() -> None:
    """Let ``ray.cancel`` interrupt this task, whatever SIGINT this worker inherited.

    Ray cancels a running task by ``_thread.interrupt_main()``, which raises KeyboardInterrupt
    through SIGINT's Python handler, and does nothing where SIGINT is ignored: a Ray node started
    from a background shell or a service passes SIGINT ignored down to its workers (bash ignores
    it for background jobs), and Python keeps it so. There the launcher's notice never reached a
    trainer: each trained on to its end, no notice checkpoint written.
    """
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.default_int_handler)


def _run_trainer(index: int, argv: list[str]) -> dict[str, Any]:
    """Body of the Ray task: start the trainer process, wait for it, say where it ran."""
    import socket

    import ray

    interruptible_by_cancel()  # the launcher's notice arrives as ray.cancel

    ctx = ray.get_runtime_context()
    node_ip = ray.util.get_node_ip_address()
    log(
        f"trainer {index} on node {node_ip} ({ctx.get_node_id()[:12]}), "
        f"attempt task {ctx.get_task_id()}",
        "distributed",
    )
    handle = trainer_processes().start(
        "engine.distributed:trainer_main", {"argv": argv, "node": node_ip}
    )
    code: int | None = None
    result: dict[str, Any] = {}
    try:
        while code is None:
            code = handle.exit_code()
            for event in handle.new_events():
                if event["event"] == "result":
                    result = event["result"]
                elif event["event"] in ("usage_error", "error"):
                    result = {"error": event["message"]}
            if code is None:
                time.sleep(0.2)
    finally:
        if code is None:  # cancelled (the launcher's notice) or torn down: pass it on
            handle.stop()
            deadline = time.monotonic() + notice_grace_s()
            while handle.exit_code() is None and time.monotonic() < deadline:
                time.sleep(0.1)
        handle.close()
    if code == EX_PREEMPTED:
        raise TrainerPreempted(f"trainer {index} preempted after a notice checkpoint")
    if code != EX_OK:
        raise RuntimeError(f"trainer {index} exited {code}: {result.get('error', 'see its log')}")
    result.update(
        {
            "index": index,
            "node_ip": node_ip,
            "node_id": ctx.get_node_id(),
            "hostname": socket.gethostname(),
            "argv": argv,
        }
    )
    return result


def run(
    args: argparse.Namespace, argvs: list[list[str]], notice: PreemptionNotice
) -> dict[str, Any]:
    connect(args.address)  # first: a wrong address fails before Ray is even imported
    notice.reinstall()  # ray.init took SIGTERM over (its handler exits at once)
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    n = args.num_nodes
    bundle: dict[str, float] = {"CPU": float(args.cpus_per_task)}
    if args.tpu_per_task > 0:
        bundle["TPU"] = float(args.tpu_per_task)
    resources = {"TPU": float(args.tpu_per_task)} if args.tpu_per_task > 0 else {}
    task = ray.remote(_run_trainer)
    pg = None
    started = time.monotonic()
    try:
        if args.placement == "strict":
            pg = placement_group([dict(bundle) for _ in range(n)], strategy="STRICT_SPREAD")
            deadline = time.monotonic() + args.placement_timeout
            while True:
                ready, _ = ray.wait([pg.ready()], timeout=10.0)
                if ready:
                    break
                alive = [node for node in ray.nodes() if node.get("Alive")]
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"cannot place {n} trainers on distinct nodes with {bundle} each: "
                        f"{len(alive)} node(s) alive with resources "
                        f"{[node.get('Resources', {}) for node in alive]}"
                    )
                log(f"waiting for {n} nodes with {bundle} ({len(alive)} alive)", "distributed")
        refs = []
        for i, argv in enumerate(argvs):
            if pg is not None:
                strategy: Any = PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=i)
            else:
                strategy = "SPREAD"
            refs.append(
                task.options(
                    num_cpus=args.cpus_per_task,
                    resources=resources,
                    scheduling_strategy=strategy,
                    max_retries=args.max_retries,
                    retry_exceptions=[TrainerPreempted],
                    name=f"trainer-{i}",
                    runtime_env={"env_vars": forwarded_env()},
                ).remote(i, argv)
            )
        log(
            f"submitted {n} trainers ({args.placement} placement, max_retries={args.max_retries})",
            "distributed",
        )
        results: dict[int, dict[str, Any]] = {}
        failures: dict[int, str] = {}
        index_of = {ref: i for i, ref in enumerate(refs)}
        pending = list(refs)
        forwarded = False
        while pending:
            if notice.requested and not forwarded:
                # losing the head ends every task: every trainer checkpoints now
                log(
                    f"SIGTERM: notice forwarded to {len(pending)} running trainer(s)", "distributed"
                )
                for ref in pending:
                    ray.cancel(ref)
                forwarded = True
            done, pending = ray.wait(pending, num_returns=1, timeout=0.5)
            if not done:
                continue
            i = index_of[done[0]]
            try:
                results[i] = ray.get(done[0])
                r = results[i]
                log(
                    f"trainer {i} finished on {r['node_ip']}: {r['num_timesteps']} steps "
                    f"(resumed from {r['resumed_from_step']})",
                    "distributed",
                )
            except Exception as exc:  # a trainer's own error, or retries exhausted
                failures[i] = f"{type(exc).__name__}: {exc}"
                log(f"trainer {i} failed: {failures[i].splitlines()[0]}", "distributed")
        return {
            "preempted": forwarded,
            "num_nodes": n,
            "placement": args.placement,
            "wall_seconds": time.monotonic() - started,
            "distinct_nodes": len({r["node_id"] for r in results.values()}),
            "trainers": [results[i] for i in sorted(results)],
            "failures": {str(k): v for k, v in sorted(failures.items())},
        }
    finally:
        if pg is not None:
            remove_placement_group(pg)
        ray.shutdown()


def main(argv: Sequence[str] | None = None) -> int:
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")  # before ray is imported (engine.sweep.main)
    notice = PreemptionNotice()
    with notice.installed():
        parser = build_launcher_parser()
        try:
            apply_jax_platform()  # before anything imports jax
        except EnvError as exc:
            parser.error(str(exc))
        args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
        try:
            argvs = trainer_argvs(args.train_args, args.num_nodes, args.base_seed)
        except UsageError as exc:
            parser.error(str(exc))
        if args.validate_only:
            print(json.dumps({"trainers": argvs}), flush=True)
            return EX_OK
        _storage_warning(argvs[0], args.num_nodes)
        try:
            summary = run(args, argvs, notice)
        except ConnectionError as exc:
            log(
                f"error: cannot reach the Ray cluster (--address {args.address}): {exc}",
                "distributed",
            )
            return EX_FAILURE
        except RuntimeError as exc:
            log(f"error: {exc}", "distributed")
            return EX_FAILURE
        print(json.dumps(summary, sort_keys=True, default=str), flush=True)
        if summary["preempted"]:
            log("preempted: running trainers wrote notice checkpoints; exiting 75", "distributed")
            return EX_PREEMPTED
        return EX_FAILURE if summary["failures"] else EX_OK
