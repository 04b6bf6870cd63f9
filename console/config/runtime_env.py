"""The [runtime_env] of submitted jobs, as `ray job submit --runtime-env-json` takes it: checked
here for the config file, `--script`'s `--runtime-env` and the submit form alike."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from console.secrets import is_secret_name


class RuntimeEnvError(ValueError):
    """A runtime env a job cannot run with; ``part`` is the field at fault ("pip",
    "env_vars", "excludes"; "" for the whole object)."""

    def __init__(self, part: str, message: str) -> None:
        super().__init__(message)
        self.part = part


def parse_runtime_env(value: Any, problems: list[str]) -> dict[str, Any] | None:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            problems.append(f"runtime_env: not valid JSON ({exc.msg} at char {exc.pos})")
            return None
    try:
        return validate_runtime_env(value, key="runtime_env")
    except ValueError as exc:
        problems.append(str(exc))
        return None


def validate_runtime_env(value: Any, *, key: str = "runtime_env") -> dict[str, Any]:
    """Check a Ray runtime env (as used by `ray job submit --runtime-env-json`).

    Raises ``RuntimeEnvError`` (a ValueError) naming the field, its ``part`` typed. Secret values must not be inlined: an env var whose
    name looks secret (KEY/TOKEN/SECRET/PASSWORD) must be given as ``"$NAME"``, resolved from
    the submitting machine's environment at submit time and never shown.
    """
    if not isinstance(value, Mapping):
        raise RuntimeEnvError("", f"{key}: must be a JSON object, got {type(value).__name__}")
    allowed = {"pip", "env_vars", "working_dir", "excludes", "py_modules", "conda", "uv", "config"}
    unknown = sorted(set(value) - allowed)
    if unknown:
        raise RuntimeEnvError(
            "", f"{key}: unknown field(s) {unknown}; allowed: {', '.join(sorted(allowed))}"
        )
    pip = value.get("pip")
    if pip is not None and (
        not isinstance(pip, list) or not all(isinstance(x, str) and x.strip() for x in pip)
    ):
        raise RuntimeEnvError(
            "pip", f'{key}.pip: must be a list of requirement strings, e.g. ["gymnasium"]'
        )
    env_vars = value.get("env_vars")
    if env_vars is not None:
        if not isinstance(env_vars, Mapping):
            raise RuntimeEnvError("env_vars", f"{key}.env_vars: must be an object of NAME: string")
        for name, val in env_vars.items():
            if not isinstance(val, str):
                raise RuntimeEnvError(
                    "env_vars", f"{key}.env_vars.{name}: must be a string, got {type(val).__name__}"
                )
            if is_secret_name(name) and val and not val.startswith("$"):
                raise RuntimeEnvError(
                    "env_vars",
                    f'{key}.env_vars.{name}: do not inline secrets; write "${name}" so the '
                    "value is taken from your environment at submit time",
                )
    excludes = value.get("excludes")
    if excludes is not None and (
        not isinstance(excludes, list) or not all(isinstance(x, str) for x in excludes)
    ):
        raise RuntimeEnvError("excludes", f"{key}.excludes: must be a list of path patterns")
    return dict(value)
