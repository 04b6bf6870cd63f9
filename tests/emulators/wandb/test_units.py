"""The W&B emulator's parts that need no wandb client: the GraphQL reader, the sweep
controller, the state file across a restart and `phantom wandb up|status|down`."""

from __future__ import annotations

import json
import os
import threading
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from console.cli import main as phantom
from emulators.wandb import client, gql
from emulators.wandb import layout as L
from emulators.wandb import sweeps as S
from emulators.wandb.state import State
from tests.support.fixtures_wandb import (
    API_KEY,
    WandbEmu,
    set_delay,
    start_emulator,
    stop_emulator,
)
from tests.support.waiting import wait_until


def requests_seen(base_url: str) -> int:
    """The daemon's request count (this status request included)."""
    direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with direct.open(f"{base_url}/_phantom/status", timeout=10) as resp:
        return int(json.loads(resp.read())["requests"])


def test_gql_reads_fragments_aliases_variables_and_directives() -> None:
    doc = gql.parse(
        """
        query Q($e: String!, $n: Int = 2, $skip: Boolean!) {
          viewer { ...U  ent: entity @skip(if: $skip) }
          project(name: "p", entityName: $e) { runs(first: $n) { ... on Conn { count } } }
        }
        fragment U on User { username }
        """
    )
    root = {
        "query": {
            "viewer": {"username": "u", "entity": "e"},
            "project": lambda a: {"runs": lambda b: {"count": (a["entityName"], b["first"])}},
        }
    }
    assert gql.execute(doc, root, {"e": "lab", "skip": True}) == {
        "viewer": {"username": "u"},
        "project": {"runs": {"count": ["lab", 2]}},
    }


def test_gql_unknown_field_is_null_and_bad_text_is_a_syntax_error() -> None:
    doc = gql.parse("{ viewer { id newFieldOfAFutureClient } }")
    assert gql.execute(doc, {"query": {"viewer": {"id": "1"}}}, None) == {
        "viewer": {"id": "1", "newFieldOfAFutureClient": None}
    }
    with pytest.raises(gql.GraphQLSyntaxError):
        gql.parse("{ viewer { id ")


def _sweep(state: State, text: str) -> dict:
    cfg = S.parse_config(text)
    sweep = {
        "key": "e/p/s1",
        "entity": "e",
        "project": "p",
        "name": "s1",
        "config": cfg,
        "config_text": text,
        "state": "RUNNING",
        "handed_out": [],
        "agent_timeout": 60.0,
    }
    state.sweeps["e/p/s1"] = sweep
    return sweep


def test_grid_controller_hands_out_each_point_once_up_to_run_cap() -> None:
    state = State()
    sweep = _sweep(
        state,
        "method: grid\nrun_cap: 3\nprogram: t.py\n"
        "parameters: {lr: {values: [1, 2]}, bs: {values: [8, 16]}}",
    )
    agent = {"id": "a1", "sweep": "e/p/s1", "heartbeat_at": 0.0, "runs": []}
    state.agents["a1"] = agent
    handed = []
    for _ in range(4):
        (cmd,) = S.heartbeat(state, agent, {})
        if cmd["type"] != "run":
            break
        handed.append({k: v["value"] for k, v in cmd["args"].items()})
        assert cmd["program"] == "t.py"
    assert handed == [{"bs": 8, "lr": 1}, {"bs": 8, "lr": 2}, {"bs": 16, "lr": 1}]
    assert cmd == {"type": "exit"}
    assert sweep["state"] == "FINISHED"


def test_random_controller_samples_within_bounds_and_cancel_stops_runs() -> None:
    state = State()
    sweep = _sweep(
        state,
        "method: random\nparameters:\n  lr: {distribution: log_uniform_values, min: 0.001, max: 0.1}"
        "\n  layers: {min: 1, max: 4}",
    )
    agent = {"id": "a1", "sweep": "e/p/s1", "heartbeat_at": 0.0, "runs": []}
    state.agents["a1"] = agent
    (cmd,) = S.heartbeat(state, agent, {})
    args = {k: v["value"] for k, v in cmd["args"].items()}
    assert 0.001 <= args["lr"] <= 0.1
    assert args["layers"] in (1, 2, 3, 4)
    assert S.heartbeat(state, agent, {cmd["run_id"]: True}) == []  # one run at a time
    sweep["state"] = "CANCELED"
    assert S.heartbeat(state, agent, {cmd["run_id"]: True}) == [
        {"type": "stop", "run_id": cmd["run_id"]}
    ]


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("method: annealing\nparameters: {a: {value: 1}}", "method must be one of"),
        ("method: grid\nparameters: {a: {min: 1, max: 2}}", "parameters.a"),
        ("method: random\nparameters: {a: {min: x, max: 2}}", "parameters.a: `min`"),
        ("method: random\nrun_cap: 0\nparameters: {a: {value: 1}}", "run_cap"),
        ("method: [", "not YAML"),
    ],
)
def test_malformed_sweep_config_names_the_field(text: str, names: str) -> None:
    with pytest.raises(S.SweepConfigError, match=names):
        S.parse_config(text)


def test_restart_keeps_runs_and_sweeps(tmp_path: Path) -> None:
    run_dir = tmp_path / "emu"
    info = start_emulator(run_dir)
    try:
        emu = WandbEmu(info, trap=None)  # type: ignore[arg-type]
        emu.graphql(
            'mutation { upsertBucket(input: {name: "r1", modelName: "p", entityName: "e",'
            ' config: "{\\"a\\": {\\"value\\": 1}}"}) { inserted } }'
        )
    finally:
        stop_emulator(run_dir, info)
    again = start_emulator(run_dir)
    try:
        data = WandbEmu(again, trap=None).graphql(  # type: ignore[arg-type]
            '{ project(name: "p", entityName: "e") { run(name: "r1") { name config } } }'
        )
        assert data["project"]["run"] == {"name": "r1", "config": '{"a": {"value": 1}}'}
    finally:
        stop_emulator(run_dir, again)


def test_a_stop_lets_go_of_answers_held_back_and_exits_on_sigterm(tmp_path: Path) -> None:
    """`down` while a slow server holds a GraphQL answer: the daemon lets the answer go (503)
    and exits on its SIGTERM (its info file removed), not by the SIGKILL the stop falls back
    to after its timeout."""
    run_dir = tmp_path / "emu"
    info = start_emulator(run_dir)
    emu = WandbEmu(info, trap=None)  # type: ignore[arg-type]
    answer: list[object] = []
    try:
        set_delay(info.base_url, API_KEY, 600.0)
        polls = [requests_seen(info.base_url)]

        def held() -> None:
            try:
                emu.graphql("{ viewer { username } }")
            except urllib.error.HTTPError as exc:
                answer.append(exc.code)

        asker = threading.Thread(target=held, daemon=True)
        asker.start()
        # each poll is one request itself: one more than the polls means the GraphQL one came
        wait_until(
            lambda: (
                polls.append(requests_seen(info.base_url)) or polls[-1] > polls[0] + len(polls) - 1
            ),
            30,
            "the held GraphQL request",
        )
    finally:
        stop_emulator(run_dir, info)
    asker.join(30)
    assert answer == [503]
    assert not L.RunLayout(run_dir).info_file.exists(), "the daemon was SIGKILLed"


def test_phantom_wandb_up_status_down(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The key is named, never printed; `down` leaves no daemon; a second `down` says so."""
    run_dir = tmp_path / "emu"
    monkeypatch.setenv("PHANTOM_WANDB_API_KEY", API_KEY)
    try:
        assert phantom(["wandb", "up", "--run-dir", str(run_dir), "--json"]) == 0
        up = json.loads(capsys.readouterr().out)
        assert up["base_url"].startswith("http://127.0.0.1:")
        assert up["api_key_env"] == "PHANTOM_WANDB_API_KEY"
        assert phantom(["wandb", "status", "--run-dir", str(run_dir)]) == 0
        out = capsys.readouterr()
        assert "from $PHANTOM_WANDB_API_KEY" in out.out
        assert API_KEY not in out.out + out.err
        assert API_KEY not in (run_dir / "daemon.log").read_text()
        assert API_KEY.encode() not in Path(f"/proc/{up['pid']}/cmdline").read_bytes()
    finally:
        assert phantom(["wandb", "down", "--run-dir", str(run_dir)]) == 0
    assert not client.pid_alive(up["pid"])
    assert phantom(["wandb", "status", "--run-dir", str(run_dir)]) == 1
    assert "start one with `phantom wandb up`" in capsys.readouterr().err
    assert phantom(["wandb", "up", "--port", "70000"]) == 2
    assert "must be 0..65535" in capsys.readouterr().err
    assert not os.path.exists(run_dir / "api_key")  # the key came from the env var


def test_a_preempted_run_whose_agent_went_quiet_is_handed_out_again() -> None:
    """Same run id and parameters, as a `resume` command, to the next agent that asks."""
    state = State()
    sweep = _sweep(state, "method: random\nparameters: {lr: {values: [0.1, 0.2]}}")
    sweep["agent_timeout"] = 60.0
    first = {"id": "a1", "sweep": "e/p/s1", "heartbeat_at": 0.0, "runs": []}
    second = {"id": "a2", "sweep": "e/p/s1", "heartbeat_at": 0.0, "runs": []}
    state.agents.update(a1=first, a2=second)
    (cmd,) = S.heartbeat(state, first, {})
    run, _ = state.upsert_run("e", "p", cmd["run_id"], {"sweep": "s1"})
    state.stream(run, {"files": {}, "preempting": True})
    assert S.heartbeat(state, second, {})[0]["type"] == "run"  # a1 is not quiet yet
    first["heartbeat_at"] -= 61.0  # a1 heartbeated last more than agent_timeout ago
    (again,) = S.heartbeat(state, second, {})
    assert again == {**cmd, "type": "resume"}
    assert sweep["handed_out"][0]["agent"] == "a2"


def test_a_run_marked_preempting_stays_so_through_later_config_updates() -> None:
    """The engine's agent marks the run preempting, then its trainer updates the run's config
    (another UpsertBucket) and streams history without the flag: still preempting, so the
    run is re-queued if its agent dies (it was not, on the pod: no run ever came back)."""
    state = State()
    run, _ = state.upsert_run("e", "p", "r1", {"sweep": "s1", "config": "{}"})
    state.stream(run, {"files": {}, "preempting": True})
    run, inserted = state.upsert_run("e", "p", "r1", {"config": '{"lr": {"value": 0.1}}'})
    assert not inserted and run["state"] == "preempting"
    state.stream(run, {"files": {"wandb-history.jsonl": {"offset": 0, "content": ["{}"]}}})
    assert run["state"] == "preempting"
    state.stream(run, {"files": {}, "complete": True, "exitcode": 0})
    assert run["state"] == "finished"


def test_at_the_run_cap_an_agent_waits_while_a_run_marked_preempting_may_need_it() -> None:
    """Told `exit` there, the last agents of a sweep would leave before a dead agent's run
    is re-queued, and the run would never finish (seen with two agents, a worker lost)."""
    state = State()
    sweep = _sweep(state, "method: random\nrun_cap: 1\nparameters: {lr: {values: [0.1]}}")
    sweep["agent_timeout"] = 60.0
    first = {"id": "a1", "sweep": "e/p/s1", "heartbeat_at": 0.0, "runs": []}
    second = {"id": "a2", "sweep": "e/p/s1", "heartbeat_at": 0.0, "runs": []}
    state.agents.update(a1=first, a2=second)
    (cmd,) = S.heartbeat(state, first, {})
    run, _ = state.upsert_run("e", "p", cmd["run_id"], {"sweep": "s1"})
    state.stream(run, {"files": {}, "preempting": True})
    assert S.heartbeat(state, second, {}) == []  # the cap is reached, a1's run may die
    first["heartbeat_at"] -= 61.0
    (again,) = S.heartbeat(state, second, {})
    assert again["type"] == "resume" and again["run_id"] == cmd["run_id"]
    state.stream(run, {"files": {}, "complete": True, "exitcode": 0})
    assert S.heartbeat(state, second, {}) == [{"type": "exit"}]
    assert sweep["state"] == "FINISHED"


def test_a_run_gone_quiet_shows_crashed_or_preempted_until_it_resumes() -> None:
    from emulators.wandb.schema import Schema

    state = State()
    schema = Schema(state, lambda: "http://127.0.0.1:1", crash_after=300.0)
    run, _ = state.upsert_run("e", "p", "r1", {"config": "{}"})
    other, _ = state.upsert_run("e", "p", "r2", {"config": "{}"})
    state.stream(other, {"files": {}, "preempting": True})
    assert schema.shown_state(run) == "running"
    run["heartbeat_at"] -= 301.0
    other["heartbeat_at"] -= 301.0
    assert (schema.shown_state(run), schema.shown_state(other)) == ("crashed", "preempted")
    state.upsert_run("e", "p", "r1", {"config": "{}"})  # wandb.init(resume=...) again
    assert schema.shown_state(run) == "running"


def test_unknown_root_fields_are_named() -> None:
    doc = gql.parse("mutation M { createArtifact { x } deleteRun(input: {}) { ok } }")
    assert gql.unknown_roots(doc, {"mutation": {"createArtifact": {}}}) == ["mutation.deleteRun"]


def test_history_is_appended_to_its_own_file_and_read_back(tmp_path: Path) -> None:
    """state.json holds no history rows (its size does not grow with them); a resume that
    re-sends rows from an earlier offset rewrites that run's file."""
    state = State(path=tmp_path / "state.json")
    run, _ = state.upsert_run("e", "p", "r1", {"config": "{}"})
    rows = [json.dumps({"_step": i}) for i in range(6)]
    for start in (0, 3):
        state.stream(
            run,
            {
                "files": {
                    "wandb-history.jsonl": {"offset": start, "content": rows[start : start + 3]}
                }
            },
        )
    state.stream(
        run, {"files": {"wandb-history.jsonl": {"offset": 5, "content": ['{"_step": 5, "x": 1}']}}}
    )
    state.save()
    assert "_step" not in (tmp_path / "state.json").read_text()
    again = State.load(tmp_path / "state.json")
    assert again.runs["e/p/r1"]["history"] == [*rows[:5], '{"_step": 5, "x": 1}']
