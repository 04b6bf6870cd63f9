"""The Ray Tune backend of ``engine.sweep`` (works offline; resumes with ``Tuner.restore``).

* random: ``num_samples = run cap`` draws (seeded); grid: the first ``run cap`` grid points.
* AGENTS_PER_NODE trials per node: each trial asks for ``cpus_per_node / agents_per_node``
  CPUs (plus ``{"TPU": t}`` when ``--tpu-per-task`` > 0) and at most
  ``num_nodes * agents_per_node`` trials run at once.
* A trial is a function trainable that runs its trainer in a process of its own
  (``engine.trialproc``): the trainer survives the raylet on a preempted host long enough
  to write its notice checkpoint, and actors are reused across trials, so the torch/SB3
  imports are paid once per actor.
* Trials checkpoint into the sweep's storage themselves
  (``<storage>/<sweep-id>/_runs/<sweep-id>-<trial-id>/checkpoints``, the ``engine.storage``
  format) and report metrics to Tune at each checkpoint. A failed trial (lost node,
  preemption) is restarted by Tune (``FailureConfig(max_failures)``) and resumes from its
  newest complete checkpoint, including a notice checkpoint written after the failure was
  already seen by Tune (it waits for an in-flight one). Every trial also keeps
  ``<storage>/<sweep-id>/_status/<trial>.json`` (node, attempt, step) current, so operators
  and tests see progress without the driver.
* The experiment lives at ``<storage>/<sweep-id>``. If it already exists the driver calls
  ``Tuner.restore`` on it, so re-submitting the same command after losing the head node
  continues the same sweep.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import signal
import time
import uuid
from pathlib import Path
from typing import Any

from engine.contract import (
    DRIVER_STOP_S,
    DRIVER_STUCK_S,
    EX_PREEMPTED,
    SWEEP_RESUMING,
    SWEEP_STARTING,
)
from engine.logs import log
from engine.notice import PreemptionNotice
from engine.raycluster import connect, smallest_node_cpus
from engine.storage import FsspecCheckpointStore, is_local, resolve_storage
from engine.sweep_spaces import SweepSpec, trial_config, trial_params, tune_param_space
from engine.trialproc import EventWriter, trainer_processes

TRIAL_KEEP_CHECKPOINTS = 2


class TrialPreempted(RuntimeError):
    """A trial's trainer stopped on a preemption notice after checkpointing (Tune retries)."""


# ---------------------------------------------------------------------------------- status


def _status_path(storage: str, sweep_id: str, trial_id: str) -> tuple[Any, str]:
    fs, root = resolve_storage(storage)
    return fs, f"{root}/{sweep_id}/_status/{trial_id}.json"


def read_status(storage: str, sweep_id: str) -> dict[str, dict[str, Any]]:
    """All trial status files of a sweep, by trial id (for operators and tests)."""
    fs, root = resolve_storage(storage)
    out: dict[str, dict[str, Any]] = {}
    try:
        paths = fs.glob(f"{root}/{sweep_id}/_status/*.json")
    except (OSError, FileNotFoundError):
        return out
    for path in paths:
        try:
            with fs.open(path, "rb") as fh:
                data = json.loads(fh.read().decode())
            out[str(data["trial_id"])] = data
        except (OSError, ValueError, KeyError):
            continue
    return out


def _update_status(storage: str, sweep_id: str, trial_id: str, attempt: dict[str, Any]) -> None:
    """Record one attempt of a trial in ``<storage>/<sweep>/_status/<trial>.json``.

    Only the trial itself writes its file (one attempt at a time: a new attempt first waits
    for an in-flight notice checkpoint of the previous one), so read-modify-write is safe;
    locally the write is a rename so readers never see half a file.
    """
    fs, path = _status_path(storage, sweep_id, trial_id)
    try:
        with fs.open(path, "rb") as fh:
            status = json.loads(fh.read().decode())
    except (OSError, ValueError):
        status = {"trial_id": trial_id, "attempts": []}
    attempts = [a for a in status.get("attempts", []) if a.get("attempt") != attempt["attempt"]]
    attempts.append(attempt)
    status.update(attempts=attempts, step=attempt.get("last_step", 0), final=attempt["final"])
    status["updated_unix"] = time.time()
    data = json.dumps(status, sort_keys=True).encode()
    if is_local(fs):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.tmp-{os.getpid()}"
        with open(tmp, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    else:
        with fs.open(path, "wb") as fh:
            fh.write(data)


class TrialStore(FsspecCheckpointStore):
    """A trial's checkpoints in the sweep's storage; every save also updates the trial's
    status file and tells the Tune side (an event) what to report."""

    def __init__(
        self,
        settings: dict[str, Any],
        trial_id: str,
        run_name: str,
        node: str,
        events: EventWriter | None,
    ) -> None:
        super().__init__(settings["engine_storage"], run_name, keep=TRIAL_KEEP_CHECKPOINTS)
        self.sweep_storage = settings["storage"]
        self.sweep_id = settings["sweep_id"]
        self.trial_id = trial_id
        self.events = events
        self.description = f"trial {trial_id} of sweep {self.sweep_id} ({self.description})"
        self.attempt: dict[str, Any] = {
            "attempt": uuid.uuid4().hex[:12],
            "node": node,
            "pid": os.getpid(),  # the trainer process: what a preemption must reach
            "started_unix": time.time(),
            "resumed_from_step": None,
            "last_step": None,
            "reports": 0,
            "final": False,
        }

    def latest(self, quiet: bool = False) -> Any:
        info = super().latest(quiet)
        # record the attempt before any training, so even an attempt killed before its
        # first checkpoint shows up (and a rerun from scratch could not hide)
        step = info.step if info else 0
        self.attempt.update(resumed_from_step=step, last_step=step)
        _update_status(self.sweep_storage, self.sweep_id, self.trial_id, self.attempt)
        return info

    def _record(self, step: int, manifest: dict[str, Any], metrics: dict[str, Any]) -> None:
        final = manifest.get("kind") == "final"
        self.attempt.update(
            last_step=step,
            reports=self.attempt["reports"] + 1,
            final=final,
            updated_unix=time.time(),
        )
        _update_status(self.sweep_storage, self.sweep_id, self.trial_id, self.attempt)
        if self.events is not None:
            clean = {k: v for k, v in metrics.items() if isinstance(v, int | float | str | bool)}
            clean["trial_id"] = self.trial_id
            self.events.emit("checkpoint", step=step, final=final, metrics=clean)

    def save(
        self, local_dir: Path, step: int, manifest: dict[str, Any], metrics: dict[str, Any]
    ) -> str:
        uri = super().save(local_dir, step, manifest, metrics)
        self._record(step, manifest, metrics)
        return uri

    def save_final(
        self, local_dir: Path, step: int, manifest: dict[str, Any], metrics: dict[str, Any]
    ) -> str:
        uri = super().save_final(local_dir, step, manifest, metrics)
        self._record(step, manifest, metrics)
        return uri


# ---------------------------------------------------------------------------------- trials


def trial_main(args: dict[str, Any], events: EventWriter, notice: PreemptionNotice) -> Any:
    """One trial's training, in its own process (``engine.trialproc``)."""
    from engine.trainer import run_training

    settings = args["settings"]
    spec = SweepSpec(**settings["spec"])
    run_name = f"{settings['sweep_id']}-{args['trial_id']}"
    cfg = trial_config(spec, args["params"], settings, run_name=run_name)
    store = TrialStore(settings, args["trial_id"], run_name, args["node"], events)
    return run_training(cfg, store=store, notice=notice, node=args["node"]).to_dict()


def _tune_trial(config: dict[str, Any], settings: dict[str, Any]) -> None:
    """Function trainable: start the trial's trainer process and relay its reports to Tune."""
    import ray
    from ray import tune

    trial_id = tune.get_context().get_trial_id()
    args = {
        "settings": settings,
        "params": trial_params(config),
        "trial_id": trial_id,
        "node": ray.util.get_node_ip_address(),
    }
    handle = trainer_processes().start("engine.sweep_tune:trial_main", args)
    code = None
    try:
        while True:
            code = handle.exit_code()  # read before draining: every event is in by then
            for event in handle.new_events():
                if event["event"] == "checkpoint":
                    tune.report(event["metrics"])
            if code is not None:
                break
            time.sleep(0.1)
    finally:
        if code is None:  # this function is being torn down: the trainer gets a notice
            handle.stop()
        handle.close()
    if code == EX_PREEMPTED:
        raise TrialPreempted(f"trial {trial_id}: trainer preempted after a notice checkpoint")
    if code != 0:
        raise RuntimeError(f"trial {trial_id}: trainer exited with code {code} (see its log)")


def _trial_dirname(trial: Any) -> str:
    return f"trial_{trial.trial_id}"


# After a notice the driver exits 75 without Tune's own stop when its main thread is stuck
# (no Python run for DRIVER_STUCK_S) or Tune has not stopped within DRIVER_STOP_S (inside the
# 30 s grace): Tune's state is saved every TUNE_GLOBAL_CHECKPOINT_S and each trial
# checkpoints on its own notice, so the sweep resumes the same. Both live in engine.contract:
# the console sizes Ray's job-stop wait (RAY_JOB_STOP_WAIT_TIME_S) from them.


def storage_uri(storage: str) -> str:
    _, root = resolve_storage(storage)
    return storage if "://" in storage else root


def run_tune(args: argparse.Namespace, spec: SweepSpec, sweep_id: str) -> dict[str, Any]:
    # Experiment state reaches the shared storage every few seconds, so a driver that
    # dies with the head node loses little when the sweep is resumed with Tuner.restore.
    os.environ.setdefault("TUNE_GLOBAL_CHECKPOINT_S", "5")
    connect(args.address)  # first: a wrong address fails before Ray Tune is even imported
    import ray
    from ray import tune
    from ray.tune.search.basic_variant import BasicVariantGenerator

    # The head's notice reaches this driver: stop the way Ray Tune stops on SIGUSR1 (state
    # saved, trials stopped; each trial's trainer then gets its own notice and checkpoints).
    notice = PreemptionNotice(on_first=lambda: signal.raise_signal(signal.SIGUSR1))

    try:
        cpus_per_node = args.cpus_per_node or smallest_node_cpus()
        per_trial: dict[str, float] = {"cpu": cpus_per_node / args.agents_per_node}
        if args.tpu_per_task > 0:
            per_trial["TPU"] = float(args.tpu_per_task)
        root = storage_uri(args.storage)
        settings = {
            "spec": dataclasses.asdict(spec),
            "sweep_id": sweep_id,
            "storage": root,
            "engine_storage": f"{root.rstrip('/')}/{sweep_id}/_runs",
            "wandb": args.wandb,
            "wandb_project": args.wandb_project,
            "wandb_entity": args.wandb_entity,
            "trial_timesteps": args.trial_timesteps,
            "checkpoint_every": args.checkpoint_every,
            "seed": args.seed,
        }
        trainable = tune.with_resources(
            tune.with_parameters(_tune_trial, settings=settings), per_trial
        )
        exp_path = f"{root.rstrip('/')}/{sweep_id}"
        started = time.monotonic()
        if tune.Tuner.can_restore(exp_path):
            log(
                f"{SWEEP_RESUMING.format(sweep_id=sweep_id)} from {exp_path} (Tuner.restore)",
                "sweep",
            )
            tuner = tune.Tuner.restore(
                exp_path,
                trainable=trainable,
                resume_unfinished=True,
                resume_errored=True,
                restart_errored=False,
            )
        else:
            param_space, num_samples = tune_param_space(spec, args.method, args.run_cap)
            log(
                f"{SWEEP_STARTING.format(sweep_id=sweep_id)}: {args.method}, {num_samples} sample(s), cap "
                f"{args.run_cap}, {args.agents_per_node}/node on {args.num_nodes} node(s), "
                f"{per_trial} per trial, storage {exp_path}",
                "sweep",
            )
            tuner = tune.Tuner(
                trainable,
                param_space=param_space,
                tune_config=tune.TuneConfig(
                    num_samples=num_samples,
                    search_alg=BasicVariantGenerator(
                        random_state=args.seed,
                        max_concurrent=args.num_nodes * args.agents_per_node,
                    ),
                    trial_dirname_creator=_trial_dirname,
                    # keep actors (and their trainer zygotes, torch/SB3 imported) across trials
                    reuse_actors=True,
                ),
                run_config=tune.RunConfig(
                    name=sweep_id,
                    storage_path=root,
                    failure_config=tune.FailureConfig(max_failures=args.max_failures),
                    sync_config=tune.SyncConfig(sync_period=5),
                    verbose=1,
                ),
            )
        # after ray.init, which installs a SIGTERM handler of its own; watched off the main
        # thread, which may be stuck in a Ray call when the head's raylet goes with the notice
        with notice.watched(stop_within_s=DRIVER_STOP_S, stuck_s=DRIVER_STUCK_S):
            results = tuner.fit()
        wall = time.monotonic() - started
        summary = summarise(results, spec, sweep_id, exp_path, wall)
        summary["preempted"] = notice.requested
        return summary
    finally:
        ray.shutdown()


def summarise(
    results: Any, spec: SweepSpec, sweep_id: str, exp_path: str, wall: float
) -> dict[str, Any]:
    trials: list[dict[str, Any]] = []
    for i in range(len(results)):
        result = results[i]
        metrics = dict(result.metrics or {})
        trials.append(
            {
                "trial_id": metrics.get("trial_id"),
                "path": result.path,
                "error": None if result.error is None else str(result.error).splitlines()[0],
                "num_timesteps": metrics.get("num_timesteps"),
                "metric": metrics.get(spec.metric_name),
                "resumed_from_step": metrics.get("resumed_from_step"),
                "config": trial_params(dict(result.config or {})),
            }
        )
    completed = [t for t in trials if t["error"] is None and t["num_timesteps"]]
    scored = [t for t in completed if isinstance(t["metric"], int | float)]
    best = None
    if scored:
        pick = max if spec.metric_goal == "maximize" else min
        best = pick(scored, key=lambda t: float(t["metric"]))
    return {
        "backend": "tune",
        "sweep_id": sweep_id,
        "experiment_path": exp_path,
        "trials": len(trials),
        "completed": len(completed),
        "errored": len(trials) - len(completed),
        "wall_seconds": wall,
        "trials_per_min": 60.0 * len(completed) / wall if wall > 0 else None,
        "metric": spec.metric_name,
        "best": best,
        "results": trials,
    }
