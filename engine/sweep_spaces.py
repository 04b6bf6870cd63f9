"""Sweep search spaces: ``engine/sweeps/<kind>.json`` in W&B sweep syntax, and their trials.

A space file has ``parameters`` (each ``value``, ``values``, or ``distribution`` with
``min``/``max``), plus ``algo``, ``metric`` and ``fixed`` training settings. Parameter names
are ``engine.train`` settings (``alpha``, ``n_envs``, ...) or keyword arguments of the SB3
algorithm. random: ``num_samples = run cap`` seeded draws; grid: the first ``run cap`` points
of the full grid, in a fixed order (sorted names, listed values).
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import itertools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.logs import log
from engine.trainconfig import (
    ALGOS,
    TrainConfig,
    UsageError,
    build_parser,
    check_hparam_keys,
    check_hparams,
)

SPEC_DIR = Path(__file__).resolve().parent / "sweeps"
METHODS = ("random", "grid")
_DISTRIBUTIONS = ("uniform", "log_uniform_values", "int_uniform")
CONFIG_FIELDS = {f.name for f in dataclasses.fields(TrainConfig)} - {
    "hparams",
    "run_name",
    "storage",
    "wandb",
    "wandb_project",
    "wandb_entity",
    "algo",
}
MAX_SPEC_BYTES = 1 << 20


@dataclass(frozen=True)
class SweepSpec:
    kind: str
    algo: str
    metric_name: str
    metric_goal: str
    fixed: dict[str, Any]
    parameters: dict[str, dict[str, Any]]
    description: str = ""
    method: str = ""  # the file's own "method" (empty: --method decides)


def available_kinds() -> list[str]:
    return sorted(p.stem for p in SPEC_DIR.glob("*.json"))


def _spec_source(kind: str) -> tuple[Path, str]:
    """(file, name used in messages) for ``--kind``: a name in engine/sweeps or a .json path."""
    if kind.endswith(".json") or "/" in kind:
        return Path(kind).expanduser(), f"--kind {kind[:200]}"
    if (
        not kind.replace("_", "").replace("-", "").isalnum()
        or not (SPEC_DIR / f"{kind}.json").is_file()
    ):
        raise UsageError(
            f"--kind {kind[:80]!r}: no search space engine/sweeps/{kind[:80]}.json; "
            f"available: {', '.join(available_kinds())} (or give a path to a .json file)"
        )
    return SPEC_DIR / f"{kind}.json", f"engine/sweeps/{kind}.json"


def _read_spec(path: Path, where: str) -> dict[str, Any]:
    try:
        if path.is_dir():
            raise UsageError(f"{where}: is a directory; give a search-space .json file")
        size = path.stat().st_size
        if size > MAX_SPEC_BYTES:
            raise UsageError(f"{where}: {size} bytes is too large for a search space (max 1 MiB)")
        raw = json.loads(path.read_bytes().decode("utf-8"))
    except FileNotFoundError:
        raise UsageError(
            f"{where}: no such file; give a name from engine/sweeps or a path"
        ) from None
    except UnicodeDecodeError:
        raise UsageError(f"{where}: not a text file (binary content); expected JSON") from None
    except json.JSONDecodeError as exc:
        raise UsageError(f"{where} is not valid JSON: {exc.msg} (line {exc.lineno})") from None
    except OSError as exc:
        raise UsageError(f"{where}: cannot be read ({exc.strerror or exc})") from None
    if not isinstance(raw, dict):
        raise UsageError(f"{where}: expected a JSON object with 'parameters'")
    return raw


def _check_parameter(where: str, p: Any) -> None:
    if not isinstance(p, dict):
        raise UsageError(f"{where}: expected an object")
    _check_keys(where, p, PARAMETER_KEYS)
    if "value" in p:
        return
    if "values" in p:
        if not isinstance(p["values"], list) or not p["values"]:
            raise UsageError(f"{where}: 'values' must be a non-empty list")
        return
    if p.get("distribution") in _DISTRIBUTIONS:
        lo, hi = p.get("min"), p.get("max")
        numbers = all(isinstance(v, int | float) and not isinstance(v, bool) for v in (lo, hi))
        if not numbers or not lo < hi:  # type: ignore[operator]
            raise UsageError(f"{where}: needs numbers min < max")
        if p["distribution"] == "log_uniform_values" and lo <= 0:  # type: ignore[operator]
            raise UsageError(f"{where}: log_uniform_values needs min > 0")
        return
    raise UsageError(
        f"{where}: give 'value', 'values' or 'distribution' ({', '.join(_DISTRIBUTIONS)})"
    )


# The keys of a space file (W&B sweep syntax plus the engine's algo and fixed settings) and of
# one parameter; anything else is a typo (`fixd`) that would otherwise be ignored.
SPEC_KEYS = ("algo", "description", "fixed", "method", "metric", "parameters")
PARAMETER_KEYS = ("distribution", "max", "min", "value", "values")


def _check_keys(where: str, given: Any, allowed: tuple[str, ...]) -> None:
    unknown = sorted(str(k) for k in given if k not in allowed)
    if unknown:
        close = difflib.get_close_matches(unknown[0], allowed, n=1, cutoff=0.6)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        shown = ", ".join(repr(k[:40]) for k in unknown[:5])
        raise UsageError(f"{where}: unknown key(s) {shown}{hint}; allowed: {', '.join(allowed)}")


def _train_flags() -> dict[str, argparse.Action]:
    """engine.train's flags by setting name: each sweep value is checked by the flag's own
    type and choices, so a space cannot hold what the command line refuses (n_envs 0, alpha
    7)."""
    parser = build_parser(raise_errors=True)
    return {a.dest: a for a in parser._actions if a.option_strings}


def _check_setting(where: str, name: str, value: Any, flags: dict[str, argparse.Action]) -> None:
    action = flags.get(name)
    if action is None:
        return
    flag = action.option_strings[-1]
    if action.nargs == 0:  # a switch (store_true)
        if not isinstance(value, bool):
            raise UsageError(f"{where}: {name} = {value!r}: true or false (engine.train {flag})")
        return
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise UsageError(f"{where}: {name} = {str(value)[:40]!r}: a number or a string")
    text = str(value)
    if action.choices is not None and text not in action.choices:
        raise UsageError(
            f"{where}: {name} = {text[:40]!r}: one of {', '.join(map(str, action.choices))}"
        )
    if callable(action.type):
        try:
            action.type(text)
        except (argparse.ArgumentTypeError, ValueError) as exc:
            raise UsageError(
                f"{where}: {name} = {text[:40]!r}: {exc} (engine.train {flag})"
            ) from None


def _candidates(p: dict[str, Any]) -> list[Any]:
    if "value" in p:
        return [p["value"]]
    if "values" in p:
        return list(p["values"])
    return [p.get("min"), p.get("max")]


def load_spec(kind: str) -> SweepSpec:
    """Load and validate a search space (``--kind``: a name in engine/sweeps or a .json path).

    Raises UsageError naming the file and the problem.
    """
    path, where = _spec_source(kind)
    raw = _read_spec(path, where)
    _check_keys(where, raw, SPEC_KEYS)
    method = raw.get("method", "")
    if method and method not in METHODS:
        raise UsageError(
            f"{where}: method {str(method)[:40]!r} is not one this engine runs; use "
            f"{' or '.join(METHODS)} (or leave it out and pass --method)"
        )
    algo = raw.get("algo", "ppo")
    if algo not in ALGOS:
        raise UsageError(f"{where}: algo {str(algo)[:40]!r} is not one of {', '.join(ALGOS)}")
    metric = raw.get("metric", {"name": "eval/mean_reward", "goal": "maximize"})
    if not isinstance(metric, dict) or metric.get("goal") not in ("maximize", "minimize"):
        raise UsageError(f'{where}: metric must be {{"name": ..., "goal": maximize|minimize}}')
    params = raw.get("parameters")
    if not isinstance(params, dict) or not params:
        raise UsageError(f"{where}: 'parameters' must be a non-empty object")
    fixed = raw.get("fixed", {})
    if not isinstance(fixed, dict):
        raise UsageError(f"{where}: 'fixed' must be an object of engine.train settings")
    for name, p in params.items():
        _check_parameter(f"{where} parameter {name[:80]!r}", p)
    flags = _train_flags()
    for name, p in params.items():
        for value in _candidates(p):
            _check_setting(f"{where} parameter {name[:80]!r}", name, value, flags)
    for name, value in fixed.items():
        _check_setting(f"{where} fixed", name, value, flags)
    try:
        check_hparam_keys(algo, [k for k in [*params, *fixed] if k not in CONFIG_FIELDS])
        for name, p in params.items():
            if name not in CONFIG_FIELDS:  # every candidate value of an SB3 keyword
                candidates = p.get("values") or [p.get("value", p.get("min")), p.get("max")]
                for value in candidates:
                    if value is not None:
                        check_hparams(algo, {name: value})
    except UsageError as exc:
        raise UsageError(f"{where}: {exc}") from None
    return SweepSpec(
        kind=kind,
        algo=algo,
        metric_name=str(metric.get("name", "eval/mean_reward")),
        metric_goal=str(metric["goal"]),
        fixed=dict(fixed),
        parameters=dict(params),
        description=str(raw.get("description", "")),
        method=str(method),
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
            log(
                f"grid has {len(points)} points (< run cap {run_cap}): running all of them", "sweep"
            )
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
        if key in CONFIG_FIELDS:
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


def first_values(spec: SweepSpec) -> dict[str, Any]:
    out = {}
    for name, p in spec.parameters.items():
        if "value" in p:
            out[name] = p["value"]
        elif "values" in p:
            out[name] = p["values"][0]
        else:
            out[name] = p["min"]
    return out
