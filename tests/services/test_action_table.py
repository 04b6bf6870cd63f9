"""One capability check for every front end: for each row of the action table and each kind
of cluster, the script parser refuses exactly what the TUI's keys and palette do not offer
(and what the MCP server refuses, through the same ``refusal_for``), with the same words.
Also: every row's arguments make a valid JSON schema object."""

from __future__ import annotations

import shlex

import pytest

from console.config import Config, parse_config
from console.script.parse import ScriptError, parse_script
from console.services.action_table import (
    ACTIONS,
    BY_NAME,
    BY_SCRIPT,
    BY_TUI,
    Action,
    Arg,
    Front,
    can,
    refusal_for,
)
from console.wiring import capabilities_for

CLUSTERS = {
    "local": Config(),
    "gcp": parse_config(
        {"cluster": {"provider": "gcp", "project": "p", "zone": "us-central2-b"}}, source="gcp"
    ),
    "gke-emulator": parse_config({"cluster": {"provider": "gke"}}, source="gke"),
}
SAMPLE = {
    "host": "1",
    "host_or_all": "all",
    "onoff": "on",
    "job": "raysubmit_1",
    "name": "w1",
    "str": "0",
    "seconds": "1",
    "kind": "preempted",
    "int": "1",
}


def _line(action: Action) -> str:
    words = [action.script or ""]
    for arg in action.positionals:
        if arg.required:
            words.append(arg.choices[0] if arg.choices else SAMPLE[arg.kind])
    return shlex.join(words)


@pytest.mark.parametrize("cluster", CLUSTERS)
@pytest.mark.parametrize("action", ACTIONS, ids=lambda a: a.name)
def test_every_front_end_refuses_the_same_actions(cluster: str, action: Action) -> None:
    config = CLUSTERS[cluster]
    caps = capabilities_for(config)
    why = refusal_for(action, caps)
    if action.tui:  # keys, footer, help and palette all ask `can`
        assert can(action.tui, caps) is (why is None)
    if action.script:
        try:
            parse_script(_line(action), config)
            script_refusal = None
        except ScriptError as exc:
            script_refusal = next((i.message for i in exc.issues if "only for" in i.message), None)
        if why is None:
            assert script_refusal is None, script_refusal
        else:
            assert script_refusal is not None and script_refusal.startswith(why)


def test_the_script_and_the_tui_recover_are_one_row() -> None:
    assert BY_SCRIPT["recover"] is BY_TUI["recover"] is BY_NAME["recover"]
    assert BY_SCRIPT["auto-recovery"] is BY_TUI["toggle_auto"]
    assert BY_NAME["recover"].needs is not None


def test_each_row_says_what_it_does_and_where() -> None:
    assert len({a.name for a in ACTIONS}) == len(ACTIONS)
    for a in ACTIONS:
        assert a.description and a.fronts and a.providers, a.name
        if Front.PALETTE in a.fronts:
            assert a.tui and a.label, a.name


@pytest.mark.parametrize("action", ACTIONS, ids=lambda a: a.name)
def test_every_input_schema_is_an_object_of_typed_properties(action: Action) -> None:
    schema = action.input_schema()
    assert schema["type"] == "object" and schema["additionalProperties"] is False
    for arg in action.args:
        prop = schema["properties"][arg.dest]
        assert prop["type"] in ("integer", "number", "string", "boolean", "object", "array")
        assert (arg.dest in schema.get("required", [])) is arg.required


def test_a_schema_keeps_bounds_and_choices() -> None:
    prop = Arg("--n", "int", min=1, max=5).json_schema()
    assert prop == {"type": "integer", "minimum": 1, "maximum": 5}
    assert Arg("m", "choice", choices=("a", "b")).json_schema()["enum"] == ["a", "b"]
