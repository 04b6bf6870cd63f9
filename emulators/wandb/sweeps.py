"""The server-side sweep controller: what ``agentHeartbeat`` hands an agent.

W&B runs the sweep's search on the server: an agent heartbeats with the runs it still
runs, and the answer is a list of commands (``run`` with a fresh run id and its
parameters, ``stop``, ``exit``). Here ``random`` and ``grid`` are built; ``bayes`` is
accepted but proposes like ``random`` (no Gaussian-process model of the metric), which
``README.md`` says. ``run_cap`` bounds the runs handed out; a stopped (FINISHED) sweep
hands out no new run, a CANCELED one also stops its running runs.
"""

from __future__ import annotations

import itertools
import math
import random
import secrets
import string
import time
from typing import Any

import yaml

from emulators.wandb.state import Record, State

METHODS = ("random", "grid", "bayes")
RUN_STATES_ACTIVE = ("running", "preempting", "pending")


class SweepConfigError(ValueError):
    """The sweep config is malformed; the message names the field."""


def parse_config(text: str) -> dict[str, Any]:
    try:
        cfg = yaml.safe_load(text) if text else None
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
    for name, spec in params.items():
        if not isinstance(spec, dict):
            raise SweepConfigError(f"parameters.{name} must be a mapping")
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
    return {n: _sample(spec, rng) for n, spec in cfg["parameters"].items()}


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
        return []  # one run at a time per agent, as W&B's controller hands them out
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
