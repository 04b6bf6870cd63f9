"""``workload create``: a GKE workload (xpk's JobSet, or the HF <-> MaxText conversion Job)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from console.commands.kit.base import Command, Effect, Front, Session
from console.commands.kit.bind import Where
from console.commands.kit.params import Kind, arg
from console.commands.kit.workload_args import build_workload_spec, workload_problems
from console.services.capabilities import Capability
from console.services.jobs.workload import CONVERT_DIRECTIONS, TEMPLATES, TPU_TYPES
from console.services.model import ActionResult, to_jsonable


@dataclass(frozen=True, kw_only=True)
class Args:
    name: str = arg(Kind.NAME, "NAME")
    template: str | None = arg(
        Kind.CHOICE,
        help="xpk's standard or Pathways JobSet, "
        "or the HF <-> MaxText conversion Job (default standard)",
        choices=TEMPLATES,
        flag=True,
    )
    spec: dict[str, Any] | None = arg(
        Kind.PATH, "FILE", "the spec as TOML/JSON/YAML (flags override it)", flag=True
    )
    image: str | None = arg(Kind.STR, "IMAGE", "container image (default: gke.image)", flag=True)
    command: str | None = arg(
        Kind.STR, '"..."', "what every worker runs (default: gke.command)", flag=True
    )
    tpu_type: str | None = arg(
        Kind.CHOICE,
        "TPU_TYPE",  # v4-N, v5p-N, v5litepod-N, v6e-N: too many to list in usage
        "default gke.tpu_type",
        choices=tuple(TPU_TYPES),
        flag=True,
    )
    slices: int | None = arg(Kind.INT, "N", flag=True, min=1, max=64)
    max_restarts: int | None = arg(Kind.INT, "N", flag=True, min=0, max=1000)
    spot: bool | None = arg(Kind.ONOFF, "on|off", flag=True)
    env: tuple[tuple[str, str], ...] = arg(
        Kind.ENV, "NAME=VALUE", "container env; secrets as NAME=$VAR only", flag=True, repeat=True
    )
    hf_token_env: str | None = arg(
        Kind.STR, "VAR", "the variable holding your HF token (default HF_TOKEN)", flag=True
    )
    run_name: str | None = arg(
        Kind.STR, "RUN", "default: the workload name (same name: resumes)", flag=True
    )
    base_output_dir: str | None = arg(
        Kind.STR, "URI", "gs://bucket/path or file:///path", flag=True
    )
    checkpoint: str | None = arg(Kind.STR, "URI", "MAXTEXT_CKPT_PATH (must exist)", flag=True)
    grace: int | None = arg(
        Kind.INT, "S", "terminationGracePeriodSeconds", flag=True, min=0, max=3600
    )
    direction: str | None = arg(
        Kind.CHOICE, help="convert: which way", choices=CONVERT_DIRECTIONS, flag=True
    )
    src: str | None = arg(Kind.STR, "URI", "convert: the checkpoint to convert", flag=True)
    dry_run: bool = arg(
        Kind.FLAG, help="only show the manifest and the xpk command line", flag=True
    )


def _fields(args: Args) -> dict[str, Any]:
    return {f.name: getattr(args, f.name) for f in dataclasses.fields(args)}


def check(args: Args, where: Where) -> str:
    return workload_problems(
        _fields(args), where.settings.workload, where.path_exists, where.produced
    )


async def run(s: Session, args: Args) -> ActionResult:
    svc = await s.services()
    spec = build_workload_spec(_fields(args), svc.settings.workload)
    preview = svc.preview_workload(spec)
    shown: dict[str, Any] = {
        "workload": spec.name,
        "kind": preview.kind,
        "spec": spec.display(),
        "command_line": preview.command_line,
        "console_url": preview.console_url,
        "logs_url": preview.logs_url,
        "output_uri": preview.output_uri,
    }
    if preview.secret_name:
        # (not under a key named "secret": the scrubber would mask the whole value)
        shown["env_delivery"] = {
            "kind": "Secret",
            "name": preview.secret_name,
            "variables": list(preview.secret_keys),
        }
    if args.dry_run:
        return ActionResult.done(
            "workload_create",
            f"workload {spec.name}: dry run",
            {**shown, "manifest": preview.manifest, "dry_run": True},
        )
    info = await svc.create_workload(spec, s.actor)
    s.made(info)
    return ActionResult.done(
        "workload_create", f"created workload {spec.name}", {**to_jsonable(info), **shown}
    )


COMMAND = Command(
    "workload_create",
    "create a GKE workload (xpk's JobSet, or the conversion Job); sets `last`",
    Args,
    run,
    Effect.ACTS,
    order=50,
    needs=Capability.WORKLOADS,
    fronts=frozenset({Front.SCRIPT, Front.MCP}),
    verb="workload create",
    check=check,
    sets_job=True,
)
