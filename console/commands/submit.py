"""``submit``: a Ray job (submit_ray_job.sh's RAY_MODE); ``last`` from then on."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from console.commands.kit import door
from console.commands.kit.base import Command, CommandFailed, Effect, Front, Session
from console.commands.kit.bind import Where
from console.commands.kit.params import Kind, arg
from console.config.validate import Invalid
from console.services.capabilities import Capability
from console.services.jobs.spec import SWEEP_BACKENDS, SWEEP_METHODS, SubmitSpec
from console.services.model import ActionResult, JobStatus, to_jsonable


@dataclass(frozen=True, kw_only=True)
class Args:
    mode: str = arg(Kind.CHOICE, choices=("single", "distributed", "sweep"))
    train_args: str | None = arg(Kind.STR, '"..."', "arguments of engine.train", flag=True)
    runtime_env: dict[str, Any] | None = arg(
        Kind.RUNTIME_ENV, "FILE|JSON", "Ray runtime env (default: config)", flag=True
    )
    num_nodes: int | None = arg(Kind.INT, "N", flag=True, min=1)
    tpu_per_task: int | None = arg(Kind.INT, "N", flag=True, min=0)
    agents_per_node: int | None = arg(Kind.INT, "N", flag=True, min=1)
    base_seed: int | None = arg(Kind.INT, "N", flag=True, min=0)
    sweep_kind: str | None = arg(Kind.STR, "K", flag=True)
    sweep_method: str | None = arg(Kind.CHOICE, choices=SWEEP_METHODS, flag=True)
    sweep_backend: str | None = arg(Kind.CHOICE, choices=SWEEP_BACKENDS, flag=True)
    run_cap: int | None = arg(Kind.INT, "N", flag=True, min=1)
    sweep_id: str | None = arg(Kind.STR, "ID", "resume this sweep", flag=True)
    sweep_args: str | None = arg(
        Kind.STR,
        '"..."',
        "more engine.sweep flags, e.g. '--trial-timesteps 3000 --max-failures 10'",
        flag=True,
    )
    submission_id: str | None = arg(Kind.STR, "ID", flag=True)


_SPEC_FIELDS = (
    "train_args",
    "num_nodes",
    "tpu_per_task",
    "agents_per_node",
    "base_seed",
    "sweep_kind",
    "sweep_method",
    "sweep_backend",
    "run_cap",
    "sweep_id",
    "sweep_args",
    "submission_id",
)


def build_spec(args: Args, runtime_env: Any) -> SubmitSpec:
    """The job these arguments describe (``runtime_env``: the config's, unless given)."""
    fields = {k: getattr(args, k) for k in _SPEC_FIELDS if getattr(args, k) is not None}
    env = args.runtime_env
    return SubmitSpec(
        mode=args.mode, runtime_env=dict(runtime_env) if env is None else env, **fields
    )


def _flag_of(spec_field: str) -> str:
    return "MODE" if spec_field == "mode" else "--" + spec_field.replace("_", "-")


def check(args: Args, where: Where) -> str:
    spec = build_spec(args, where.settings.runtime_env)
    problems = spec.validate()
    if problems:
        return "submit: " + "; ".join(f"{_flag_of(k)}: {v}" for k, v in problems.items())
    if spec.mode != "sweep":  # engine.train parses them on the cluster: check them here
        try:
            door.train_args("submit: --train-args", spec.train_args)
        except Invalid as exc:
            return str(exc)
    return ""


async def run(s: Session, args: Args) -> ActionResult:
    svc = await s.services()
    spec = build_spec(args, svc.settings.runtime_env)
    info = await svc.submit(spec, s.actor)
    s.made(info)
    result = to_jsonable(info)
    result["runtime_env"] = spec.display_runtime_env()
    if info.status is JobStatus.FAILED:
        raise CommandFailed(f"job {info.job_id} FAILED at submit: {info.message}", result)
    return ActionResult.done("submit", f"submitted {info.job_id} ({spec.mode})", result)


COMMAND = Command(
    "submit",
    "submit a job (submit_ray_job.sh's RAY_MODE); sets `last`",
    Args,
    run,
    Effect.ACTS,
    order=130,
    needs=Capability.RAY_JOBS,
    fronts=frozenset({Front.SCRIPT, Front.MCP}),
    check=check,
    sets_job=True,
)
