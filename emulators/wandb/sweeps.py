"""The server-side sweep controller: what ``agentHeartbeat`` hands an agent.

W&B runs the sweep's search on the server: an agent heartbeats with the runs it still
runs, and the answer is a list of commands (``run`` with a fresh run id and its
parameters, ``stop``, ``exit``). ``random``, ``grid`` and ``bayes`` (a Gaussian process
on the finished runs' metric, ``bayes.py``) are built, and ``early_terminate: hyperband``
stops running runs as W&B's rule does (``hyperband_stops``). ``run_cap`` bounds the runs
handed out; a stopped (FINISHED) sweep hands out no new run, a CANCELED one also stops
its running runs.
"""

from __future__ import annotations

import itertools
import json
import math
import random
import secrets
import string
import time
from typing import Any

import yaml

from emulators.wandb import bayes
from emulators.wandb.state import Record, State

METHODS = ("random", "grid", "bayes")
RUN_STATES_ACTIVE = ("running", "preempting", "pending")
GOALS = ("minimize", "maximize")
DISTRIBUTIONS = (
    "constant",
    "categorical",
    "uniform",
    "int_uniform",
    "q_uniform",
    "log_uniform",
    "log_uniform_values",
    "q_log_uniform_values",
    "normal",
    "log_normal",
)


class SweepConfigError(ValueError):
    """The sweep config is malformed; the message names the field."""


def parse_config(text: str) -> dict[str, Any]:
    try:
        # JSON first: PyYAML (YAML 1.1) reads JSON's 1e-05 as a string
        cfg = json.loads(text) if text.lstrip().startswith("{") else None
    except ValueError:
        cfg = None
    try:
        cfg = cfg if cfg is not None else (yaml.safe_load(text) if text else None)
    except yaml.YAMLError as exc:
        raise SweepConfigError(f"the sweep config is not YAML/JSON: {exc}") from None
    if not isinstance(cfg, dict):
        raise SweepConfigError("the sweep config must be a mapping")
    method = cfg.get("method")
    if method not in METHODS:
        raise SweepConfigError(f"method must be one of {', '.join(METHODS)}, got {method!r}")
    params = cfg.get("parameters")
    if not isinstance(params, dict) or not params:
        raise SweepConfigError("parameters must be a non-empty mapping of name -> spec")
    _check_metric(cfg)
    for name, spec in params.items():
        if not isinstance(spec, dict):
            raise SweepConfigError(f"parameters.{name} must be a mapping")
        _check_distribution(name, spec)
        if method == "grid" and "values" not in spec and "value" not in spec:
            raise SweepConfigError(
                f"parameters.{name}: a grid search needs `values` or `value` for every parameter"
            )
        try:  # one draw now, so a bad spec fails `wandb sweep`, not the first agent
            _sample(spec, random.Random(0))
        except (SweepConfigError, TypeError, ValueError, IndexError) as exc:
            raise SweepConfigError(f"parameters.{name}: {exc}") from None
    cap = cfg.get("run_cap")
    if cap is not None and (not isinstance(cap, int) or cap < 1):
        raise SweepConfigError(f"run_cap must be a whole number >= 1, got {cap!r}")
    return cfg


def _check_metric(cfg: dict[str, Any]) -> None:
    metric = cfg.get("metric")
    if metric is None:
        if cfg["method"] == "bayes":
            raise SweepConfigError(
                'bayesian search requires a "metric" section: metric: {name: <key the runs '
                "log>, goal: minimize|maximize}"
            )
        return
    if not isinstance(metric, dict) or not isinstance(metric.get("name"), str):
        raise SweepConfigError("metric.name is required: the key the runs log, e.g. loss")
    goal = metric.get("goal", "minimize")
    if goal not in GOALS:
        raise SweepConfigError(f"metric.goal must be minimize or maximize, got {goal!r}")
    early = cfg.get("early_terminate")
    if early is not None:
        if not isinstance(early, dict) or early.get("type") != "hyperband":
            raise SweepConfigError("early_terminate.type must be hyperband")
        eta = early.get("eta", 3)
        if isinstance(eta, bool) or not isinstance(eta, (int, float)) or eta <= 1:
            raise SweepConfigError(f"early_terminate.eta must be a number > 1, got {eta!r}")
        if "min_iter" in early:
            it = early["min_iter"]
            if isinstance(it, bool) or not isinstance(it, int) or it < 1:
                raise SweepConfigError(f"early_terminate.min_iter must be >= 1, got {it!r}")
        elif "max_iter" in early:
            it, steps = early["max_iter"], early.get("s", 0)
            if not isinstance(it, int) or not isinstance(steps, int) or it < 1 or steps < 1:
                raise SweepConfigError("early_terminate with max_iter needs s (whole numbers >= 1)")
        else:
            raise SweepConfigError("early_terminate: hyperband needs min_iter (or max_iter and s)")


def _check_distribution(name: str, spec: dict[str, Any]) -> None:
    """Every parameter needs a value, values, a distribution or bounds: W&B refuses an
    empty one rather than guess."""
    dist = spec.get("distribution")
    if dist is not None and dist not in DISTRIBUTIONS:
        raise SweepConfigError(
            f"invalid hyperparameter configuration: {name}: unknown distribution {dist!r} "
            f"(one of {', '.join(DISTRIBUTIONS)})"
        )
    known = {"value", "values", "min", "max", "mu", "sigma"}
    if dist is None and not known & set(spec):
        raise SweepConfigError(
            f"invalid hyperparameter configuration: {name}: give a value, values, min/max "
            "or a distribution"
        )


def _number(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise SweepConfigError(f"`{name}` must be a number for this distribution, got {value!r}")
    return float(value)


def _sample(spec: dict[str, Any], rng: random.Random) -> Any:
    if "value" in spec:
        return spec["value"]
    if "values" in spec:
        values = list(spec["values"])
        probs = spec.get("probabilities")
        return rng.choices(values, weights=probs)[0] if probs else rng.choice(values)
    dist = spec.get("distribution")
    if dist in ("normal", "log_normal"):
        x = rng.gauss(float(spec.get("mu", 0.0)), float(spec.get("sigma", 1.0)))
        return x if dist == "normal" else math.exp(x)
    raw_lo, raw_hi = spec.get("min"), spec.get("max")
    if dist is None:
        dist = "int_uniform" if isinstance(raw_lo, int) and isinstance(raw_hi, int) else "uniform"
    lo, hi = _number(raw_lo, "min"), _number(raw_hi, "max")
    q = spec.get("q", 1)
    if dist == "int_uniform":
        return rng.randint(int(lo), int(hi))
    if dist == "uniform":
        return rng.uniform(lo, hi)
    if dist == "q_uniform":
        return round(rng.uniform(lo, hi) / q) * q
    if dist == "log_uniform":  # min/max are exponents of e
        return math.exp(rng.uniform(lo, hi))
    if dist == "log_uniform_values":
        return math.exp(rng.uniform(math.log(lo), math.log(hi)))
    if dist == "q_log_uniform_values":
        return round(math.exp(rng.uniform(math.log(lo), math.log(hi))) / q) * q
    raise SweepConfigError(f"unsupported distribution {dist!r}")


def _grid(params: dict[str, Any]) -> list[dict[str, Any]]:
    names = sorted(params)
    axes = [
        list(params[n]["values"]) if "values" in params[n] else [params[n]["value"]] for n in names
    ]
    return [dict(zip(names, combo, strict=True)) for combo in itertools.product(*axes)]


def _run_id() -> str:
    alphabet = string.ascii_lowercase + string.digits
    return "".join(secrets.choice(alphabet) for _ in range(8))


def sweep_runs(state: State, sweep: Record) -> list[Record]:
    prefix = f"{sweep['entity']}/{sweep['project']}/"
    return [
        r
        for key, r in state.runs.items()
        if key.startswith(prefix) and r.get("sweep") == sweep["name"]
    ]


def expected_runs(sweep: Record) -> int | None:
    cfg = sweep["config"]
    cap = cfg.get("run_cap")
    if cfg["method"] == "grid":
        size = len(_grid(cfg["parameters"]))
        return min(size, cap) if cap else size
    return cap


def propose(state: State, sweep: Record) -> dict[str, Any] | None:
    """The next run's parameters, or None when the search is done (grid, run_cap)."""
    cfg = sweep["config"]
    handed = sweep["handed_out"]
    cap = expected_runs(sweep)
    if cap is not None and len(handed) >= cap:
        return None
    if cfg["method"] == "grid":
        grid = _grid(cfg["parameters"])
        return grid[len(handed)] if len(handed) < len(grid) else None
    rng = random.Random(f"{sweep['name']}:{len(handed)}")
    if cfg["method"] == "bayes":
        return bayes.suggest(cfg["parameters"], observations(state, sweep), goal(cfg), rng, _sample)
    return {n: _sample(spec, rng) for n, spec in cfg["parameters"].items()}


def goal(cfg: dict[str, Any]) -> str:
    return str((cfg.get("metric") or {}).get("goal") or "minimize")


def observations(state: State, sweep: Record) -> list[tuple[dict[str, Any], float]]:
    """(parameters, metric) of the sweep's runs that are over and logged the metric."""
    name = (sweep["config"].get("metric") or {}).get("name")
    out = []
    for item in sweep["handed_out"]:
        run = state.run(sweep["entity"], sweep["project"], item["run_id"])
        if run is None or run["state"] in RUN_STATES_ACTIVE:
            continue
        got = (run.get("summary") or {}).get(name)
        if isinstance(got, (int, float)) and not isinstance(got, bool):
            out.append((item["params"], float(got)))
    return out


def best_metric(state: State, sweep: Record) -> float | None:
    """The best metric value so far by the sweep's goal (the Sweep's ``bestLoss``)."""
    seen = [m for _, m in observations(state, sweep)]
    if not seen or not sweep["config"].get("metric"):
        return None
    return max(seen) if goal(sweep["config"]) == "maximize" else min(seen)


def hyperband_bands(early: dict[str, Any]) -> list[int]:
    """The iterations at which hyperband judges a run: ``min_iter * eta**k`` (or
    ``max_iter / eta**k`` for k = 1..s), as W&B's early_terminate documents."""
    eta = float(early.get("eta", 3))
    if "min_iter" in early:
        return [int(early["min_iter"] * eta**k) for k in range(12)]
    return sorted(int(early["max_iter"] / eta**k) for k in range(1, int(early["s"]) + 1))


def hyperband_stops(
    early: dict[str, Any],
    goal_name: str,
    histories: dict[str, list[float]],
    running: list[str],
) -> list[str]:
    """Running runs hyperband stops now.

    At each band b, every run that has logged the metric b times gives its best value so
    far; the threshold is the value at the 1/eta quantile of those (W&B's rule: only the
    best 1/eta go on). A running run whose latest band's value is worse is stopped."""
    eta = float(early.get("eta", 3))
    sign = 1.0 if goal_name == "minimize" else -1.0
    best = {rid: [sign * v for v in h] for rid, h in histories.items()}
    stops = []
    for rid in running:
        mine = best.get(rid) or []
        reached = [b for b in hyperband_bands(early) if 0 < b <= len(mine)]
        if not reached:
            continue
        band = reached[-1]
        values = sorted(min(h[:band]) for h in best.values() if len(h) >= band)
        if len(values) < 2:
            continue
        threshold = values[int(len(values) / eta)]
        if min(mine[:band]) > threshold:
            stops.append(rid)
    return stops


def _early_stops(state: State, sweep: Record, running: list[str]) -> list[str]:
    cfg = sweep["config"]
    early, metric = cfg.get("early_terminate"), cfg.get("metric")
    if not early or not metric or not running:
        return []
    histories: dict[str, list[float]] = {}
    for item in sweep["handed_out"]:
        run = state.run(sweep["entity"], sweep["project"], item["run_id"])
        if run is None:
            continue
        rows = (json.loads(line) for line in run["history"])
        histories[item["run_id"]] = [
            float(r[metric["name"]])
            for r in rows
            if isinstance(r.get(metric["name"]), (int, float))
        ]
    done = set(sweep.setdefault("stopped", []))
    stops = [
        rid for rid in hyperband_stops(early, goal(cfg), histories, running) if rid not in done
    ]
    sweep["stopped"].extend(stops)
    return stops


def heartbeat(state: State, agent: Record, run_state: dict[str, bool]) -> list[dict[str, Any]]:
    """Answer an agent's heartbeat with its commands (``agentHeartbeat.commands``)."""
    sweep = state.sweeps[agent["sweep"]]
    now = time.time()
    agent["heartbeat_at"] = now
    running = [rid for rid, alive in run_state.items() if alive]
    for rid in run_state:
        if rid not in agent["runs"]:
            agent["runs"].append(rid)
    if sweep["state"] == "CANCELED":
        return [{"type": "stop", "run_id": rid} for rid in running] or [{"type": "exit"}]
    if running:
        stops = _early_stops(state, sweep, running)
        # one run at a time per agent, as W&B's controller hands them out
        return [{"type": "stop", "run_id": rid} for rid in stops]
    if sweep["state"] != "RUNNING":
        return [{"type": "exit"}]
    requeued = _requeue(state, sweep, agent)
    if requeued is not None:
        return [requeued]
    params = propose(state, sweep)
    if params is None:
        runs = sweep_runs(state, sweep)
        if any(r["state"] == "preempting" for r in runs):
            # a run marked preempting may yet need an agent (its own may be dying): keep
            # this one polling rather than let the last agents exit before the re-queue
            return []
        if not any(r["state"] in RUN_STATES_ACTIVE for r in runs):
            sweep["state"] = "FINISHED"
        return [{"type": "exit"}]
    run_id = _run_id()
    sweep["handed_out"].append({"run_id": run_id, "params": params, "agent": agent["id"]})
    agent["runs"].append(run_id)
    cfg = sweep["config"]
    return [
        {
            "type": "run",
            "run_id": run_id,
            "program": cfg.get("program"),
            "args": {k: {"value": v} for k, v in params.items()},
        }
    ]


def _requeue(state: State, sweep: Record, agent: Record) -> dict[str, Any] | None:
    """A run marked preempting whose agent went quiet is handed out again (same id)."""
    for item in sweep["handed_out"]:
        run = state.run(sweep["entity"], sweep["project"], item["run_id"])
        if run is None or run["state"] != "preempting":
            continue
        owner = state.agents.get(item["agent"])
        quiet = owner is None or time.time() - owner["heartbeat_at"] > sweep["agent_timeout"]
        if owner is not None and owner["id"] != agent["id"] and not quiet:
            continue
        item["agent"] = agent["id"]
        run["state"] = "pending"
        return {
            "type": "resume",
            "run_id": item["run_id"],
            "program": sweep["config"].get("program"),
            "args": {k: {"value": v} for k, v in item["params"].items()},
        }
    return None
