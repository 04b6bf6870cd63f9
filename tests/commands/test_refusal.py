"""One capability check for every front end: for each command and each kind of cluster, the
script parser refuses exactly what the console's keys and palette do not offer (and what the
MCP server refuses, through the same ``Command.refusal``), with the same words.

(Moved here from tests/services/test_action_table.py, which walked the action table.)
"""

from __future__ import annotations

import shlex
from typing import Any

import pytest

from console.commands import Command, Front, all_commands
from console.config import Config, parse_config
from console.script.parse import ScriptError, parse_script
from console.wiring import capabilities_for, unbuilt_services
from tests.support.fake_services import FakeServices
from tests.support.tui import make_app, settle

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
    "slice": "0",
    "seconds": "1",
    "kind": "preempted",
    "int": "1",
}


def _line(command: Command[Any]) -> str:
    words = [command.words]
    for arg in command.positionals:
        if arg.required:
            words.append(arg.choices[0] if arg.choices else SAMPLE[arg.kind])
    return shlex.join(words)


@pytest.mark.parametrize("cluster", CLUSTERS)
@pytest.mark.parametrize("command", all_commands(), ids=lambda c: c.name)
def test_every_front_end_refuses_the_same_commands(cluster: str, command: Command[Any]) -> None:
    config = CLUSTERS[cluster]
    why = command.refusal(capabilities_for(config))
    if Front.SCRIPT not in command.fronts:
        return
    try:
        parse_script(_line(command), unbuilt_services(config))
        script_refusal = None
    except ScriptError as exc:
        script_refusal = next((i.message for i in exc.issues if "only for" in i.message), None)
    if why is None:
        assert script_refusal is None, script_refusal
    else:
        assert script_refusal is not None and script_refusal.startswith(why)


@pytest.mark.parametrize("scenario", ["healthy", "gke"])
async def test_the_keys_offer_exactly_what_the_command_allows(scenario: str) -> None:
    fake = FakeServices(scenario)
    app = make_app(fake)
    async with app.run_test(size=(120, 34)) as pilot:
        await settle(pilot)
        for command in all_commands():
            if Front.TUI in command.fronts:
                allowed = command.refusal(fake.capabilities) is None
                assert app.check_action("run", (command.name,)) is allowed, command.name
