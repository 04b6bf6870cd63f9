"""Hyperparameter sweeps over Ray: a Ray Tune backend (default, works offline) and W&B agents.

``python -m engine.sweep --kind ppo_rl_study --method random --run-cap 900 \\
    --num-nodes 4 --agents-per-node 16 --tpu-per-task 0 --storage file:///bucket/sweeps``

Search spaces live in ``engine/sweeps/<kind>.json`` in W&B sweep syntax
(``value``, ``values``, or ``distribution`` with ``min``/``max``), plus ``algo``,
``metric`` and ``fixed`` training settings. Parameter names are engine.train
settings (``alpha``, ``n_envs``, ...) or keyword arguments of the SB3 algorithm.

Ray Tune backend
    * random: ``num_samples = run cap`` draws (seeded); grid: the first ``run cap``
      points of the full grid, in a fixed order.
    * AGENTS_PER_NODE trials per node: each trial asks for ``cpus_per_node /
      agents_per_node`` CPUs (plus ``{"TPU": t}`` when ``--tpu-per-task`` > 0) and
      at most ``num_nodes * agents_per_node`` trials run at once.
    * Trials checkpoint through ``tune.report(..., checkpoint=...)`` into
      ``storage_path`` (shared storage), and a failed trial (lost node) is
      restarted from its latest checkpoint (``FailureConfig(max_failures)``).
      Every trial also writes ``<storage>/<sweep-id>/_status/<trial>.json`` (node,
      attempt, step) so operators and tests can see progress without the driver.
    * The experiment lives at ``<storage>/<sweep-id>``. If it already exists the
      driver calls ``Tuner.restore`` on it, so re-submitting the same command
      after losing the head node continues the same sweep.

W&B backend (online only; its controller lives on the W&B server)
    ``num_nodes * agents_per_node`` Ray tasks each run ``wandb.agent(sweep_id)``;
    runs checkpoint under ``<storage>/<sweep-id>/<run-id>`` and are marked
    preempting, so W&B re-queues a run whose agent died and its checkpoint is
    picked up when it is rerun. Re-launch with the same ``--sweep-id`` to continue.

The last stdout line is a JSON summary. Exit codes: 0 ok, 1 failures, 2 usage.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import os
import sys
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.cliargs import non_negative_float, positive_int
from engine.storage import MANIFEST, CheckpointInfo, StorageError, resolve_storage, sha256_file
from engine.tracking import WANDB_MODES
from engine.train import (
    ALGOS,
    TrainConfig,
    UsageError,
    _check_hparams,
    run_training,
    validate_config,
)

SPEC_DIR = Path(__file__).resolve().parent / "sweeps"
METHODS = ("random", "grid")
BACKENDS = ("tune", "wandb")
_DISTRIBUTIONS = ("uniform", "log_uniform_values", "int_uniform")
_CONFIG_FIELDS = {f.name for f in dataclasses.fields(TrainConfig)} - {
    "hparams",
    "run_name",
    "storage",
    "wandb",
    "wandb_project",
    "wandb_entity",
    "algo",
}


def log(msg: str) -> None:
    print(f"[sweep] {msg}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------------------------
# search spaces


@dataclass(frozen=True)
class SweepSpec:
    kind: str
    algo: str
    metric_name: str
    metric_goal: str
    fixed: dict[str, Any]
    parameters: dict[str, dict[str, Any]]
    description: str = ""


def available_kinds() -> list[str]:
    return sorted(p.stem for p in SPEC_DIR.glob("*.json"))


def load_spec(kind: str) -> SweepSpec:
    """Load and validate ``engine/sweeps/<kind>.json``; raises UsageError."""
    path = SPEC_DIR / f"{kind}.json"
    if not kind.replace("_", "").replace("-", "").isalnum() or not path.exists():
        raise UsageError(
            f"--kind {kind!r}: no search space engine/sweeps/{kind}.json; "
            f"available: {', '.join(available_kinds())}"
        )
    try:
        raw = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise UsageError(f"engine/sweeps/{kind}.json is not valid JSON: {exc}") from None
    algo = raw.get("algo", "ppo")
    if algo not in ALGOS:
        raise UsageError(f"engine/sweeps/{kind}.json: algo {algo!r} is not one of {ALGOS}")
    metric = raw.get("metric", {"name": "eval/mean_reward", "goal": "maximize"})
    if metric.get("goal") not in ("maximize", "minimize"):
        raise UsageError(f"engine/sweeps/{kind}.json: metric.goal must be maximize or minimize")
    params = raw.get("parameters")
    if not isinstance(params, dict) or not params:
        raise UsageError(f"engine/sweeps/{kind}.json: 'parameters' must be a non-empty object")
    hparam_keys: dict[str, Any] = {}
    for name, p in params.items():
        where = f"engine/sweeps/{kind}.json parameter {name!r}"
        if not isinstance(p, dict):
            raise UsageError(f"{where}: expected an object")
        if "value" in p:
            pass
        elif "values" in p:
            if not isinstance(p["values"], list) or not p["values"]:
                raise UsageError(f"{where}: 'values' must be a non-empty list")
        elif p.get("distribution") in _DISTRIBUTIONS:
            if not {"min", "max"} <= set(p) or not p["min"] < p["max"]:
                raise UsageError(f"{where}: needs min < max")
        else:
            raise UsageError(
                f"{where}: give 'value', 'values' or 'distribution' ({', '.join(_DISTRIBUTIONS)})"
            )
        if name not in _CONFIG_FIELDS:
            hparam_keys[name] = None
    _check_hparams(algo, hparam_keys)
    return SweepSpec(
        kind=kind,
        algo=algo,
        metric_name=str(metric["name"]),
        metric_goal=str(metric["goal"]),
        fixed=dict(raw.get("fixed", {})),
        parameters=dict(params),
        description=str(raw.get("description", "")),
    )


def grid_points(spec: SweepSpec) -> list[dict[str, Any]]:
    """Every grid point in a fixed order (sorted names, listed values)."""
    names = sorted(spec.parameters)
    choices = []
    for name in names:
        p = spec.parameters[name]
        if "value" in p:
            choices.append([p["value"]])
        elif "values" in p:
            choices.append(list(p["values"]))
        else:
            raise UsageError(
                f"--method grid: parameter {name!r} is a distribution; grid needs 'values'"
            )
    return [dict(zip(names, combo, strict=True)) for combo in itertools.product(*choices)]


def tune_param_space(spec: SweepSpec, method: str, run_cap: int) -> tuple[dict[str, Any], int]:
    """(param_space, num_samples) for a Tuner."""
    from ray import tune

    if method == "grid":
        points = grid_points(spec)
        if len(points) < run_cap:
            log(f"grid has {len(points)} points (< run cap {run_cap}): running all of them")
        return {"grid_point": tune.grid_search(points[:run_cap])}, 1
    space: dict[str, Any] = {}
    for name, p in spec.parameters.items():
        if "value" in p:
            space[name] = p["value"]
        elif "values" in p:
            space[name] = tune.choice(p["values"])
        elif p["distribution"] == "uniform":
            space[name] = tune.uniform(p["min"], p["max"])
        elif p["distribution"] == "log_uniform_values":
            space[name] = tune.loguniform(p["min"], p["max"])
        else:
            space[name] = tune.randint(int(p["min"]), int(p["max"]) + 1)
    return space, run_cap


def trial_params(config: dict[str, Any]) -> dict[str, Any]:
    params = dict(config.get("grid_point", {}))
    params.update({k: v for k, v in config.items() if k != "grid_point"})
    return params


def trial_config(
    spec: SweepSpec, params: dict[str, Any], settings: dict[str, Any], run_name: str
) -> TrainConfig:
    """The engine.train configuration of one trial."""
    values: dict[str, Any] = {"algo": spec.algo, "hparams": {}}
    for key, value in {**spec.fixed, **params}.items():
        if key in _CONFIG_FIELDS:
            values[key] = value
        else:
            values["hparams"][key] = value
    if settings.get("trial_timesteps"):
        values["total_timesteps"] = int(settings["trial_timesteps"])
    if settings.get("checkpoint_every"):
        values["checkpoint_every"] = int(settings["checkpoint_every"])
    values.update(
        seed=int(settings.get("seed", 0)),
        run_name=run_name,
        storage=settings["engine_storage"],
        wandb=settings["wandb"],
        wandb_project=settings.get("wandb_project"),
        wandb_entity=settings.get("wandb_entity"),
    )
    if values.get("alpha") is not None and values["alpha"] != "auto":
        values["alpha"] = float(values["alpha"])
    return TrainConfig(**values)


# --------------------------------------------------------------------------------------------
# Ray Tune backend


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

    Only the trial itself writes its file (one attempt at a time), so read-modify-write
    is safe; locally the write is a rename so readers never see half a file.
    """
    from engine.storage import is_local

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


class TuneCheckpointStore:
    """Checkpoints of one Tune trial, persisted by Tune into the experiment's storage."""

    def __init__(self, storage: str, sweep_id: str, trial_id: str, node: str = "") -> None:
        from ray import tune

        self.storage = storage
        self.sweep_id = sweep_id
        self.trial_id = trial_id
        self._checkpoint = tune.get_checkpoint()
        self.description = f"Ray Tune trial {trial_id} of {sweep_id}"
        self.attempt: dict[str, Any] = {
            "attempt": uuid.uuid4().hex[:12],
            "node": node,
            "started_unix": time.time(),
            "resumed_from_step": None,
            "last_step": None,
            "reports": 0,
            "final": False,
        }

    def latest(self) -> CheckpointInfo | None:
        info = None
        if self._checkpoint is not None:
            with self._checkpoint.as_directory() as folder:
                manifest = json.loads((Path(folder) / MANIFEST).read_text())
            info = CheckpointInfo(
                step=int(manifest["step"]), uri=self._checkpoint.path, manifest=manifest
            )
        # record the attempt before any training, so even an attempt killed before its
        # first checkpoint shows up (and a rerun from scratch could not hide)
        self.attempt["resumed_from_step"] = info.step if info else 0
        self.attempt["last_step"] = info.step if info else 0
        _update_status(self.storage, self.sweep_id, self.trial_id, self.attempt)
        return info

    def fetch(self, info: CheckpointInfo, into: Path) -> Path:
        assert self._checkpoint is not None
        into.mkdir(parents=True, exist_ok=True)
        self._checkpoint.to_directory(str(into))
        for name, meta in info.manifest["files"].items():
            if sha256_file(into / name) != meta["sha256"]:
                raise OSError(f"checkpoint file {name} of trial {self.trial_id} is corrupt")
        return into

    def _report(
        self, local_dir: Path, step: int, manifest: dict[str, Any], metrics: dict[str, Any]
    ) -> str:
        from ray import tune

        (local_dir / MANIFEST).write_text(json.dumps(manifest, indent=1))
        clean = {k: v for k, v in metrics.items() if isinstance(v, int | float | str | bool)}
        clean["trial_id"] = self.trial_id
        tune.report(clean, checkpoint=tune.Checkpoint.from_directory(str(local_dir)))
        self.attempt.update(
            last_step=step,
            reports=self.attempt["reports"] + 1,
            final=manifest.get("kind") == "final",
            updated_unix=time.time(),
        )
        _update_status(self.storage, self.sweep_id, self.trial_id, self.attempt)
        return f"tune:{self.trial_id}@{step}"

    def save(
        self, local_dir: Path, step: int, manifest: dict[str, Any], metrics: dict[str, Any]
    ) -> str:
        return self._report(local_dir, step, manifest, metrics)

    def save_final(
        self, local_dir: Path, step: int, manifest: dict[str, Any], metrics: dict[str, Any]
    ) -> str:
        return self._report(local_dir, step, manifest, metrics)


def _tune_trial(config: dict[str, Any], settings: dict[str, Any]) -> None:
    """Function trainable: one engine.train run reporting checkpoints to Tune."""
    import ray
    from ray import tune

    spec = SweepSpec(**settings["spec"])
    trial_id = tune.get_context().get_trial_id()
    params = trial_params(config)
    cfg = trial_config(spec, params, settings, run_name=f"{settings['sweep_id']}-{trial_id}")
    store = TuneCheckpointStore(
        settings["storage"], settings["sweep_id"], trial_id, node=ray.util.get_node_ip_address()
    )
    run_training(cfg, store=store)


def _trial_dirname(trial: Any) -> str:
    return f"trial_{trial.trial_id}"


def _cluster_cpus_per_node() -> float:
    import ray

    cpus = [
        float(n.get("Resources", {}).get("CPU", 0))
        for n in ray.nodes()
        if n.get("Alive") and n.get("Resources", {}).get("CPU", 0) > 0
    ]
    if not cpus:
        raise RuntimeError("no alive Ray node with CPUs")
    return min(cpus)


def run_tune(args: argparse.Namespace, spec: SweepSpec, sweep_id: str) -> dict[str, Any]:
    import ray
    from ray import tune
    from ray.tune.search.basic_variant import BasicVariantGenerator

    # Experiment state reaches the shared storage every few seconds, so a driver that
    # dies with the head node loses little when the sweep is resumed with Tuner.restore.
    os.environ.setdefault("TUNE_GLOBAL_CHECKPOINT_S", "5")
    # num_to_keep forces a state snapshot per trial checkpoint; that is intended here
    os.environ.setdefault("TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S", "0")
    ray.init(address=args.address, log_to_driver=True)
    try:
        cpus_per_node = args.cpus_per_node or _cluster_cpus_per_node()
        per_trial: dict[str, float] = {"cpu": cpus_per_node / args.agents_per_node}
        if args.tpu_per_task > 0:
            per_trial["TPU"] = float(args.tpu_per_task)
        _, root = resolve_storage(args.storage)
        storage_uri = args.storage if "://" in args.storage else root
        settings = {
            "spec": dataclasses.asdict(spec),
            "sweep_id": sweep_id,
            "storage": storage_uri,
            "engine_storage": f"{storage_uri.rstrip('/')}/{sweep_id}/_runs",
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
        exp_path = f"{storage_uri.rstrip('/')}/{sweep_id}"
        started = time.monotonic()
        if tune.Tuner.can_restore(exp_path):
            log(f"resuming sweep {sweep_id} from {exp_path} (Tuner.restore)")
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
                f"starting sweep {sweep_id}: {args.method}, {num_samples} sample(s), cap "
                f"{args.run_cap}, {args.agents_per_node}/node on {args.num_nodes} node(s), "
                f"{per_trial} per trial, storage {exp_path}"
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
                ),
                run_config=tune.RunConfig(
                    name=sweep_id,
                    storage_path=storage_uri,
                    failure_config=tune.FailureConfig(max_failures=args.max_failures),
                    checkpoint_config=tune.CheckpointConfig(num_to_keep=2),
                    sync_config=tune.SyncConfig(sync_period=5),
                    verbose=1,
                ),
            )
        results = tuner.fit()
        wall = time.monotonic() - started
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
    finally:
        ray.shutdown()


# --------------------------------------------------------------------------------------------
# W&B backend


def wandb_sweep_config(spec: SweepSpec, method: str, run_cap: int) -> dict[str, Any]:
    if method == "grid":
        grid_points(spec)  # raises if a parameter is a distribution
    return {
        "method": method,
        "metric": {"name": spec.metric_name, "goal": spec.metric_goal},
        "parameters": spec.parameters,
        "run_cap": run_cap,
        "description": spec.description,
    }


def _wandb_agent(index: int, sweep_id: str, settings: dict[str, Any]) -> dict[str, Any]:
    """Body of one agent task: pull runs from the W&B sweep until it is done."""
    import ray
    import wandb

    spec = SweepSpec(**settings["spec"])
    runs: list[str] = []

    def one_run() -> None:
        run = wandb.init()
        run.mark_preempting()  # W&B re-queues the run if this agent dies mid-run
        params = {k: v for k, v in dict(run.config).items() if k in spec.parameters}
        cfg = trial_config(spec, params, settings, run_name=f"{sweep_id}-{run.id}")
        run_training(cfg)
        runs.append(run.id)

    wandb.agent(
        sweep_id,
        function=one_run,
        project=settings.get("wandb_project"),
        entity=settings.get("wandb_entity"),
    )
    return {"agent": index, "node_ip": ray.util.get_node_ip_address(), "runs": runs}


def run_wandb(args: argparse.Namespace, spec: SweepSpec) -> dict[str, Any]:
    import ray
    import wandb

    config = wandb_sweep_config(spec, args.method, args.run_cap)
    sweep_id = args.sweep_id or wandb.sweep(
        config, project=args.wandb_project, entity=args.wandb_entity
    )
    log(f"W&B sweep {sweep_id}: {args.num_nodes * args.agents_per_node} agents")
    ray.init(address=args.address, log_to_driver=True)
    try:
        cpus_per_node = args.cpus_per_node or _cluster_cpus_per_node()
        resources = {"TPU": float(args.tpu_per_task)} if args.tpu_per_task > 0 else {}
        _, root = resolve_storage(args.storage)
        storage_uri = args.storage if "://" in args.storage else root
        settings = {
            "spec": dataclasses.asdict(spec),
            "engine_storage": f"{storage_uri.rstrip('/')}/{sweep_id}",
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


# --------------------------------------------------------------------------------------------
# CLI


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m engine.sweep", description="Run a hyperparameter sweep over Ray."
    )
    parser.add_argument("--kind", default="ppo_rl_study", help="search space engine/sweeps/KIND")
    parser.add_argument("--method", choices=METHODS, default="random")
    parser.add_argument("--run-cap", type=positive_int, default=900, help="max trials")
    parser.add_argument("--num-nodes", type=positive_int, default=1)
    parser.add_argument("--agents-per-node", type=positive_int, default=1)
    parser.add_argument("--tpu-per-task", type=non_negative_float, default=0.0)
    parser.add_argument(
        "--cpus-per-node",
        type=non_negative_float,
        default=0.0,
        help="CPUs of one node (default: smallest alive node's CPU count)",
    )
    parser.add_argument("--backend", choices=BACKENDS, default="tune")
    parser.add_argument("--sweep-id", default="", help="default: derived from kind/method/cap")
    parser.add_argument(
        "--storage",
        default=os.environ.get("PHANTOM_STORAGE", "runs").rstrip("/") + "/sweeps",
        help="shared storage for trial checkpoints and sweep state (file:// or gs://)",
    )
    parser.add_argument("--address", default=None, help="Ray address (default $RAY_ADDRESS)")
    parser.add_argument("--max-failures", type=int, default=3, help="retries per failed trial")
    parser.add_argument("--trial-timesteps", type=positive_int, default=None)
    parser.add_argument("--checkpoint-every", type=positive_int, default=None)
    parser.add_argument("--seed", type=int, default=0)
    default_mode = os.environ.get("WANDB_MODE", "offline")
    parser.add_argument(
        "--wandb",
        choices=WANDB_MODES,
        default=default_mode if default_mode in WANDB_MODES else "offline",
    )
    parser.add_argument("--wandb-project", default=os.environ.get("WANDB_PROJECT") or None)
    parser.add_argument("--wandb-entity", default=os.environ.get("WANDB_ENTITY") or None)
    return parser


def validate(args: argparse.Namespace) -> tuple[SweepSpec, str]:
    """All checks that need no cluster; raises UsageError."""
    spec = load_spec(args.kind)
    try:
        resolve_storage(args.storage)
    except StorageError as exc:
        raise UsageError(f"--storage: {exc}") from None
    if args.method == "grid":
        grid_points(spec)
    if args.backend == "wandb":
        if args.wandb != "online":
            raise UsageError(
                f"--backend wandb needs --wandb online (got {args.wandb}): a W&B sweep's "
                "controller lives on the W&B server, so it cannot run offline; "
                "use --backend tune for offline sweeps"
            )
        if not os.environ.get("WANDB_API_KEY"):
            raise UsageError("--backend wandb needs WANDB_API_KEY in the environment")
    sweep_id = args.sweep_id or f"{args.kind}-{args.method}-cap{args.run_cap}-s{args.seed}"
    if not all(c.isalnum() or c in "-_." for c in sweep_id):
        raise UsageError(f"--sweep-id {sweep_id!r}: use letters, digits, - _ . only")
    # a sample trial must be a valid engine.train configuration
    sample = grid_points(spec)[0] if args.method == "grid" else _first_values(spec)
    cfg = trial_config(
        spec,
        sample,
        {
            "engine_storage": args.storage,
            "wandb": "disabled",
            "trial_timesteps": args.trial_timesteps,
            "checkpoint_every": args.checkpoint_every,
        },
        run_name="validate",
    )
    validate_config(cfg)
    if "://" not in args.storage and args.num_nodes > 1:
        log(
            f"warning: --storage {args.storage!r} is a local path; trials retried on another "
            "node need shared storage (file:///shared or gs://)"
        )
    return spec, sweep_id


def _first_values(spec: SweepSpec) -> dict[str, Any]:
    out = {}
    for name, p in spec.parameters.items():
        if "value" in p:
            out[name] = p["value"]
        elif "values" in p:
            out[name] = p["values"][0]
        else:
            out[name] = p["min"]
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    try:
        spec, sweep_id = validate(args)
    except UsageError as exc:
        parser.error(str(exc))
    try:
        summary = (
            run_wandb(args, spec) if args.backend == "wandb" else run_tune(args, spec, sweep_id)
        )
    except RuntimeError as exc:
        log(f"error: {exc}")
        return 1
    print(json.dumps(summary, sort_keys=True, default=str), flush=True)
    return 0 if summary.get("completed") and not summary.get("errored") else 1


if __name__ == "__main__":
    sys.exit(main())
