"""``workload create``'s arguments: the spec they make and what is wrong with it.

Flags override a ``--spec`` file (TOML, JSON or YAML of ``WorkloadSpec`` fields), which
overrides the config's ``[gke]`` workload defaults (the services' ``settings.workload``).
Problems name the flag and the spec field; a checkpoint is checked where this machine can
tell (``PathExists``), unless an earlier step of the same script is what makes it.
"""

from __future__ import annotations

import dataclasses
import json
import tomllib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from console.config.validate import read_text_file, safe_yaml
from console.services.jobs.workload import WorkloadSpec

PathExists = Callable[[str], "bool | None"]


def shown(value: str) -> str:
    """A value for a message: never the value itself when it may hold a secret."""
    key = value.partition("=")[0]
    return repr(key + "=...") if "=" in value else "the value"


_SPEC_FIELDS = {f.name: f for f in dataclasses.fields(WorkloadSpec) if f.name != "name"}


def load_spec_file(value: str, base_dir: Path, label: str) -> dict[str, Any]:
    path = Path(value).expanduser()
    if not path.is_absolute():
        path = base_dir / path
    # the spec file is named in every problem (binary, too big, a YAML alias bomb), never
    # the script that names it
    text = read_text_file(label, path)
    if path.suffix in (".yaml", ".yml"):
        data: Any = safe_yaml(text, f"{label} {path}")
    try:
        if path.suffix == ".toml":
            data = tomllib.loads(text)
        elif path.suffix not in (".yaml", ".yml"):
            data = json.loads(text)
    except ValueError as exc:
        raise ValueError(
            f"{label}: {path} is not valid {path.suffix[1:] or 'JSON'} ({exc})"
        ) from None
    if not isinstance(data, dict):
        raise ValueError(f"{label}: {path} must hold a table of spec fields")
    unknown = sorted(set(data) - set(_SPEC_FIELDS))
    if unknown:
        raise ValueError(
            f"{label}: {path}: unknown field(s) {unknown}; allowed: {', '.join(sorted(_SPEC_FIELDS))}"
        )
    defaults = WorkloadSpec(name="x")
    for key, val in data.items():
        want = getattr(defaults, key)
        ok = (
            isinstance(val, bool)
            if isinstance(want, bool)
            else isinstance(val, int) and not isinstance(val, bool)
            if isinstance(want, int)
            else isinstance(val, dict) and all(isinstance(v, str) for v in val.values())
            if isinstance(want, Mapping)
            else isinstance(val, str)
        )
        if not ok:
            raise ValueError(
                f"{label}: {path}: {key} = {shown(str(val)) if key == 'env' else repr(val)}: "
                f"must be {type(want).__name__ if not isinstance(want, Mapping) else 'a table of strings'}"
            )
    return data


# Script flag -> WorkloadSpec field (the rest keep their own names).
_WORKLOAD_FIELD = {
    "base_output_dir": "base_output_directory",
    "checkpoint": "maxtext_ckpt_path",
    "grace": "termination_grace_s",
    "direction": "convert_direction",
    "src": "convert_src",
}
_FIELD_FLAG = {v: k for k, v in _WORKLOAD_FIELD.items()}


def build_workload_spec(args: Mapping[str, Any], defaults: WorkloadSpec) -> WorkloadSpec:
    """``workload create``'s spec: the config's defaults < --spec file < flags."""
    fields: dict[str, Any] = dict(args.get("spec") or {})
    for key, value in args.items():
        if key in ("name", "spec", "dry_run", "env") or value is None:
            continue
        fields[_WORKLOAD_FIELD.get(key, key)] = value
    if args.get("env"):
        fields["env"] = {**dict(fields.get("env") or {}), **dict(args["env"])}
    return defaults.but(args["name"], **fields)


def _workload_flag(field_name: str) -> str:
    base = field_name.split(".", 1)[0]
    flag = "--" + _FIELD_FLAG.get(base, base).replace("_", "-")
    if base == "env" and "." in field_name:
        return f"--env {field_name.split('.', 1)[1]}"
    if base in ("name", "manifest"):
        return base.upper() if base == "name" else field_name
    if base == "termination_grace_s":
        return "--grace"
    return flag


def workload_problems(
    args: Mapping[str, Any],
    defaults: WorkloadSpec,
    path_exists: PathExists | None,
    produced: set[str],
) -> str:
    """What is wrong with ``workload create``'s arguments ("" if nothing), naming each flag.
    ``produced`` collects the checkpoints earlier convert steps make (and is added to)."""
    spec = build_workload_spec(args, defaults)
    problems = spec.validate()
    if not problems and path_exists is not None:
        checks = {"maxtext_ckpt_path": spec.maxtext_ckpt_path}
        if spec.template == "convert":
            checks["convert_src"] = spec.convert_src
        for key, uri in checks.items():
            if uri.rstrip("/") in produced:
                continue  # an earlier line of this script converts it
            if uri and path_exists(uri) is False:
                problems[key] = f"{uri} does not exist" + (
                    "; convert a checkpoint first (--template convert) or fix the path"
                    if key == "maxtext_ckpt_path"
                    else ""
                )
    if spec.template == "convert":
        out = spec.output_uri.rstrip("/")
        produced.add(f"{out}/0/items" if spec.convert_direction == "to_maxtext" else out)
    if not problems:
        return ""
    return f"workload create {spec.name}: " + "; ".join(
        f"{_workload_flag(k)} ({k}): {v}" for k, v in problems.items()
    )
