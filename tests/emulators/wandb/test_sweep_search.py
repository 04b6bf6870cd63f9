"""The sweep controller's searches: bayes proposes from a model of the finished runs,
honouring the goal and each distribution; hyperband stops what W&B's rule stops, through
``agentHeartbeat``'s answer. (benchmarks/sweep_bayes.py measures bayes against random.)"""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from emulators.wandb import bayes
from emulators.wandb import sweeps as S
from emulators.wandb.state import State


def _sweep(state: State, cfg: dict[str, Any]) -> dict[str, Any]:
    text = json.dumps(cfg)
    sweep = {
        "key": "e/p/s1",
        "entity": "e",
        "project": "p",
        "name": "s1",
        "config": S.parse_config(text),
        "config_text": text,
        "state": "RUNNING",
        "handed_out": [],
        "agent_timeout": 60.0,
    }
    state.sweeps["e/p/s1"] = sweep
    return sweep


def _agent(state: State) -> dict[str, Any]:
    agent = {"id": "a1", "sweep": "e/p/s1", "heartbeat_at": 0.0, "runs": []}
    state.agents["a1"] = agent
    return agent


def _finish(state: State, run_id: str, summary: dict[str, Any], history: list[dict]) -> None:
    run, _ = state.upsert_run("e", "p", run_id, {"sweep": "s1"})
    run["summary"] = summary
    run["history"] = [json.dumps({"_step": i, **row}) for i, row in enumerate(history)]
    run["state"] = "finished"


def _drive(state: State, agent: dict[str, Any], n: int, metric: Any) -> list[dict[str, Any]]:
    """n runs one after another through heartbeats, each finished with ``metric(params)``."""
    seen = []
    for _ in range(n):
        (cmd,) = S.heartbeat(state, agent, {})
        assert cmd["type"] == "run", cmd
        params = {k: v["value"] for k, v in cmd["args"].items()}
        _finish(state, cmd["run_id"], {"score": metric(params)}, [])
        seen.append(params)
    return seen


@pytest.mark.parametrize(("goal", "side"), [("maximize", 1), ("minimize", -1)])
def test_bayes_follows_the_goal(goal: str, side: int) -> None:
    """score = x: after the random start, a maximising sweep proposes near x = 1 and a
    minimising one near x = 0 (random search would average 0.5)."""
    state = State()
    _sweep(
        state,
        {
            "method": "bayes",
            "metric": {"name": "score", "goal": goal},
            "parameters": {"x": {"min": 0.0, "max": 1.0}},
        },
    )
    seen = _drive(state, _agent(state), 14, lambda p: p["x"])
    later = [p["x"] for p in seen[bayes.RANDOM_START + 2 :]]
    mean = sum(later) / len(later)
    assert (mean > 0.8) if side > 0 else (mean < 0.2), later


def test_bayes_honours_each_distribution() -> None:
    """Values proposed by the model stay in their bounds and keep their kind: ints,
    multiples of q, categories, a constant."""
    params = {
        "lr": {"distribution": "log_uniform_values", "min": 1e-5, "max": 1e-1},
        "width": {"distribution": "int_uniform", "min": 16, "max": 512},
        "clip": {"distribution": "q_uniform", "min": 0.0, "max": 2.0, "q": 0.25},
        "batch": {"distribution": "q_log_uniform_values", "min": 8, "max": 256, "q": 8},
        "opt": {"values": ["adam", "sgd", "rmsprop"]},
        "seed": {"value": 7},
        "decay": {"distribution": "uniform", "min": 0.9, "max": 0.999},
    }
    state = State()
    _sweep(state, {"method": "bayes", "metric": {"name": "score"}, "parameters": params})
    rng = random.Random(3)
    seen = _drive(state, _agent(state), 10, lambda p: rng.random() + (p["opt"] == "sgd"))
    for p in seen:
        assert 1e-5 <= p["lr"] <= 1e-1
        assert isinstance(p["width"], int) and 16 <= p["width"] <= 512
        assert p["clip"] / 0.25 == pytest.approx(round(p["clip"] / 0.25))
        assert p["batch"] % 8 == 0 and 8 <= p["batch"] <= 256
        assert p["opt"] in ("adam", "sgd", "rmsprop")
        assert p["seed"] == 7
        assert 0.9 <= p["decay"] <= 0.999
    # minimize (the default goal): the model learns that sgd costs +1
    assert [p["opt"] for p in seen[bayes.RANDOM_START + 1 :]].count("sgd") <= 1


def test_unit_mapping_round_trips() -> None:
    for spec, value in (
        ({"distribution": "log_uniform_values", "min": 1e-4, "max": 1.0}, 1e-2),
        ({"distribution": "log_uniform", "min": -5, "max": 0}, 0.05),
        ({"distribution": "int_uniform", "min": 1, "max": 9}, 4),
        ({"distribution": "normal", "mu": 0.0, "sigma": 2.0}, 1.5),
        ({"values": ["a", "b", "c"]}, "b"),
    ):
        got = bayes.from_unit(spec, bayes.to_unit(spec, value))
        assert got == pytest.approx(value) if not isinstance(value, str) else got == value


EARLY = {"type": "hyperband", "min_iter": 3, "eta": 3}


def test_hyperband_rule() -> None:
    """At band 3 (min_iter) only the best third goes on: a run worse than that is
    stopped, a run below min_iter is not judged, a good run keeps going."""
    done = {f"d{i}": [5.0, 4.0, 3.0 - i * 0.5, 2.0] for i in range(5)}  # at band 3: 3..1
    bad = {"bad": [5.0, 4.8, 4.6]}
    good = {"good": [5.0, 3.0, 0.5]}
    young = {"young": [9.0, 9.0]}
    histories = {**done, **bad, **good, **young}
    running = ["bad", "good", "young"]
    assert S.hyperband_stops(EARLY, "minimize", histories, running) == ["bad"]
    flipped = {k: [-v for v in h] for k, h in histories.items()}
    assert S.hyperband_stops(EARLY, "maximize", flipped, running) == ["bad"]
    assert S.hyperband_bands(EARLY)[:3] == [3, 9, 27]
    assert S.hyperband_bands({"type": "hyperband", "max_iter": 27, "s": 2, "eta": 3}) == [3, 9]


def test_heartbeat_stops_a_run_hyperband_would_stop_once() -> None:
    state = State()
    sweep = _sweep(
        state,
        {
            "method": "random",
            "metric": {"name": "loss", "goal": "minimize"},
            "early_terminate": EARLY,
            "parameters": {"x": {"min": 0.0, "max": 1.0}},
        },
    )
    agent = _agent(state)
    for i in range(3):
        (cmd,) = S.heartbeat(state, agent, {})
        _finish(state, cmd["run_id"], {"loss": 1.0}, [{"loss": 2.0 - i * 0.5}] * 4)
    (cmd,) = S.heartbeat(state, agent, {})
    rid = cmd["run_id"]
    run, _ = state.upsert_run("e", "p", rid, {"sweep": "s1"})  # the agent's wandb.init
    run["history"] = [json.dumps({"_step": 0, "loss": 3.0})]
    assert S.heartbeat(state, agent, {rid: True}) == []  # one row: not judged yet
    run["history"] = [json.dumps({"_step": i, "loss": 3.0}) for i in range(3)]
    assert S.heartbeat(state, agent, {rid: True}) == [{"type": "stop", "run_id": rid}]
    assert S.heartbeat(state, agent, {rid: True}) == []  # said once
    assert sweep["stopped"] == [rid]


@pytest.mark.parametrize(
    ("cfg", "names"),
    [
        ({"method": "bayes", "parameters": {"a": {"min": 0, "max": 1}}}, '"metric" section'),
        ({"method": "random", "parameters": {"a": {}}}, "configuration: a: give a value"),
        (
            {"method": "random", "parameters": {"a": {"distribution": "beta"}}},
            "unknown distribution 'beta'",
        ),
        (
            {
                "method": "bayes",
                "metric": {"name": "l"},
                "early_terminate": {"type": "hyperband"},
                "parameters": {"a": {"value": 1}},
            },
            "needs min_iter",
        ),
        (
            {
                "method": "bayes",
                "metric": {"name": "l"},
                "early_terminate": {"type": "hyperband", "min_iter": 3, "eta": 1},
                "parameters": {"a": {"value": 1}},
            },
            "eta must be a number > 1",
        ),
    ],
)
def test_bad_search_configs_name_the_field(cfg: dict[str, Any], names: str) -> None:
    with pytest.raises(S.SweepConfigError, match=names):
        S.parse_config(json.dumps(cfg))
