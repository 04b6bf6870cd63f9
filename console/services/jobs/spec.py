"""What a job submission is, validated before anything is sent.

One ``SubmitSpec`` serves the TUI's submit form, ``--script``'s ``submit`` line and
``submit_ray_job.sh``: the same modes (single / distributed / sweep), the same variables as
the seed, the same entrypoints. ``validate`` returns every problem keyed by field so a form
can mark each one; ``entrypoint`` and ``command_preview`` show exactly what will run.
"""

from __future__ import annotations

import dataclasses
import json
import os
import secrets
import shlex
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from console.config.runtime_env import RuntimeEnvError, validate_runtime_env
from console.secrets import mask_env
from console.services.errors import ConsoleError

MODES = ("single", "distributed", "sweep")
SWEEP_METHODS = ("random", "grid")  # what engine.sweep implements
SWEEP_BACKENDS = ("tune", "wandb")
DEFAULT_TRAIN_ARGS = "--algo ppo --total-timesteps 5000 --alpha 0.3 --device cpu"
# Never upload these with the working dir: a venv alone is GBs.
WORKING_DIR_EXCLUDES = [".venv", ".git", "runs", "wandb", "tests/__snapshots__", "*.egg-info"]


class SpecError(ConsoleError, ValueError):
    def __init__(self, problems: Mapping[str, str]) -> None:
        self.problems = dict(problems)
        super().__init__("; ".join(f"{k}: {v}" for k, v in self.problems.items()))


@dataclass(frozen=True)
class SubmitSpec:
    mode: str = "single"
    train_args: str = DEFAULT_TRAIN_ARGS
    runtime_env: Mapping[str, Any] = field(default_factory=dict)
    num_nodes: int = 1
    tpu_per_task: int = 0
    agents_per_node: int = 1
    base_seed: int = 42
    sweep_kind: str = "ppo_rl_study"
    sweep_method: str = "random"
    run_cap: int = 6
    sweep_backend: str = "tune"
    sweep_id: str = ""  # set to resume / relaunch an existing sweep
    # Extra engine.sweep flags (submit_ray_job.sh's SWEEP_ARGS), e.g. "--trial-timesteps 3000
    # --checkpoint-every 500 --max-failures 10".
    sweep_args: str = ""
    submission_id: str = ""
    # Shared checkpoint storage (fsspec URI) every node can reach; sent as PHANTOM_STORAGE,
    # the default of engine.train/engine.sweep --storage. Filled in by the services.
    storage: str = ""

    def validate(self) -> dict[str, str]:
        """Every problem, keyed by field name (empty dict: valid)."""
        p: dict[str, str] = {}
        if self.mode not in MODES:
            p["mode"] = f"{self.mode!r} is not a mode; use one of {', '.join(MODES)}"
        try:
            args = shlex.split(self.train_args)
        except ValueError as exc:
            p["train_args"] = f"bad quoting: {exc}"
            args = []
        if self.mode != "sweep" and not args:
            p["train_args"] = "required, e.g. " + DEFAULT_TRAIN_ARGS
        args = [x for a in args for x in (a.split("=", 1) if a.startswith("--alpha=") else [a])]
        if "--alpha" in args:
            i = args.index("--alpha")
            val = args[i + 1] if i + 1 < len(args) else ""
            if val != "auto":
                try:
                    if not 0.0 <= float(val) <= 1.0:
                        p["train_args"] = f"--alpha {val}: must be in [0, 1] or 'auto'"
                except ValueError:
                    p["train_args"] = f"--alpha {val!r}: must be a number in [0, 1] or 'auto'"
        for name in ("num_nodes", "agents_per_node", "run_cap"):
            if getattr(self, name) < 1:
                p[name] = f"must be at least 1, got {getattr(self, name)}"
        if self.tpu_per_task < 0:
            p["tpu_per_task"] = f"must be 0 or more, got {self.tpu_per_task}"
        if self.mode == "sweep":
            if self.sweep_method not in SWEEP_METHODS:
                p["sweep_method"] = f"{self.sweep_method!r}: use one of {', '.join(SWEEP_METHODS)}"
            if self.sweep_backend not in SWEEP_BACKENDS:
                p["sweep_backend"] = f"{self.sweep_backend!r}: use tune or wandb"
            if not self.sweep_kind.replace("_", "").isalnum():
                p["sweep_kind"] = f"{self.sweep_kind!r}: a search-space name like ppo_rl_study"
            try:
                shlex.split(self.sweep_args)
            except ValueError as exc:
                p["sweep_args"] = f"bad quoting: {exc}"
        bad_env = self.runtime_env_problem()
        if bad_env is not None:
            p["runtime_env"] = str(bad_env)
        return p

    def runtime_env_problem(self) -> RuntimeEnvError | None:
        """What is wrong with the runtime env (its ``part`` names the field), if anything."""
        try:
            validate_runtime_env(self.runtime_env)
        except RuntimeEnvError as exc:
            return exc
        return None

    def checked(self) -> SubmitSpec:
        problems = self.validate()
        if problems:
            raise SpecError(problems)
        return self

    def entrypoint(self) -> str:
        """The command the job runs on the cluster (the seed's commands)."""
        q = shlex.quote
        if self.mode == "single":
            return "python -m engine.train " + self.train_args
        if self.mode == "distributed":
            return (
                "python scripts/ray_distributed_train.py"
                f" --train-args {q(self.train_args)} --num-nodes {self.num_nodes}"
                f" --tpu-per-task {self.tpu_per_task} --base-seed {self.base_seed}"
            )
        # Sweeps take their training arguments from the search space
        # (engine/sweeps/<kind>.json), not from train_args.
        parts = [
            "python -m engine.sweep",
            f"--backend {self.sweep_backend}",
            f"--kind {q(self.sweep_kind)}",
            f"--method {self.sweep_method}",
            f"--run-cap {self.run_cap}",
            f"--num-nodes {self.num_nodes}",
            f"--agents-per-node {self.agents_per_node}",
            f"--tpu-per-task {self.tpu_per_task}",
        ]
        if self.sweep_id:
            parts.append(f"--sweep-id {q(self.sweep_id)}")
        try:
            parts.extend(q(word) for word in shlex.split(self.sweep_args))
        except ValueError:  # bad quoting, which validate() reports: a preview shows it as typed
            parts.append(self.sweep_args)
        return " ".join(parts)

    def entrypoint_resources(self) -> dict[str, float]:
        # The driver itself needs no TPU; trainers ask for theirs from Ray.
        return {}

    def resolved_runtime_env(self, environ: Mapping[str, str] | None = None) -> dict[str, Any]:
        """Runtime env to send: ``$NAME`` values resolved from the environment."""
        env = dict(self.runtime_env)
        environ = os.environ if environ is None else environ
        if "env_vars" in env:
            env["env_vars"] = {
                k: (environ.get(v[1:], "") if v.startswith("$") else v)
                for k, v in env["env_vars"].items()
            }
        if self.storage:
            env_vars = dict(env.get("env_vars") or {})
            env_vars.setdefault("PHANTOM_STORAGE", self.storage)
            env["env_vars"] = env_vars
        env.setdefault("excludes", list(WORKING_DIR_EXCLUDES))
        return env

    def display_runtime_env(self) -> dict[str, Any]:
        """Runtime env safe to show: secret values masked, references kept as $NAME."""
        env = dict(self.runtime_env)
        if "env_vars" in env:
            env["env_vars"] = mask_env(env["env_vars"])
        return env

    def command_preview(self, address: str, working_dir: str = ".") -> str:
        """The equivalent `ray job submit` command line (secrets masked)."""
        q = shlex.quote
        env = json.dumps(self.display_runtime_env(), separators=(",", ":"), ensure_ascii=False)
        return (
            f"ray job submit --address {q(address)} --working-dir {q(working_dir)} "
            f"--runtime-env-json {q(env)} -- {self.entrypoint()}"
        )

    def with_sweep_id(self, sweep_id: str) -> SubmitSpec:
        return replace(self, sweep_id=sweep_id)


# What a submission records about itself in the job's metadata, so the console can tell
# its jobs apart and resubmit one as it was (secrets stay $NAME references).
META_MODE = "phantom.mode"
META_SWEEP_ID = "phantom.sweep_id"
META_SPEC = "phantom.spec"
META_SUBMITTED_AT = "phantom.submitted_at"


def spec_metadata(spec: SubmitSpec, *, submitted_at: float | None = None) -> dict[str, str]:
    """Ray job metadata for a submission (string values only, as Ray requires)."""
    spec_json = dataclasses.asdict(spec)
    spec_json["runtime_env"] = dict(spec.runtime_env)  # $NAME references, never values
    meta = {
        META_MODE: spec.mode,
        META_SWEEP_ID: spec.sweep_id,
        META_SPEC: json.dumps(spec_json, separators=(",", ":"), sort_keys=True),
    }
    if submitted_at is not None:
        meta[META_SUBMITTED_AT] = f"{submitted_at:.3f}"
    return meta


def spec_from_metadata(metadata: Mapping[str, str]) -> SubmitSpec | None:
    """The spec a job was submitted with, or None for jobs phantom did not submit.

    ``submission_id`` is cleared: a resubmission chooses its own (the old id may still exist
    on a cluster whose head survived).
    """
    raw = metadata.get(META_SPEC)
    if not raw:
        return None
    try:
        data = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    known = {f.name for f in dataclasses.fields(SubmitSpec)}
    kwargs = {k: v for k, v in data.items() if k in known}
    kwargs["submission_id"] = ""
    try:
        return SubmitSpec(**kwargs)
    except TypeError:
        return None


def new_job_id(mode: str, now: float) -> str:
    """A fresh job id the console chooses itself (so a retry can send the same one)."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(now))
    return f"phantom-{mode}-{stamp}-{secrets.token_hex(3)}"
