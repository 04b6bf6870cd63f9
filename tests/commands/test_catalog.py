"""Every command has the one shape: a module of its own named as the command, frozen typed
arguments made of ``arg`` fields, a line for people, an effect, a place in the lists, the
front ends that offer it; names and words are unique; every schema is an object of typed
properties; and the package never reaches a front end, Textual or the wiring."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from typing import Any

import pytest

from console.commands import Command, Effect, Front, all_commands, by_name, by_words
from console.commands.kit.params import Arg, Kind, NoArgs, arg, args_of
from tests.support import REPO

COMMANDS = all_commands()


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c.name)
def test_each_command_has_the_one_shape(command: Command[Any]) -> None:
    module = sys.modules[command.run.__module__]
    assert module.__name__ == f"console.commands.{command.name}"
    assert module.COMMAND is command
    assert command.summary and command.fronts and isinstance(command.effect, Effect)
    params = dataclasses.fields(command.args)
    assert command.args.__dataclass_params__.frozen  # type: ignore[attr-defined]
    assert len(params) == len(command.params)  # every field is an argument
    if Front.TUI in command.fronts:
        assert command.title, "the palette and keys need a title"


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c.name)
def test_every_input_schema_is_an_object_of_typed_properties(command: Command[Any]) -> None:
    schema = command.input_schema()
    assert schema["type"] == "object" and schema["additionalProperties"] is False
    for a in command.params:
        prop = schema["properties"][a.dest]
        assert prop["type"] in ("integer", "number", "string", "boolean", "object", "array")
        assert (a.dest in schema.get("required", [])) is a.required


def test_names_words_and_places_are_unique() -> None:
    assert len({c.name for c in COMMANDS}) == len(COMMANDS)
    assert len({c.words for c in COMMANDS}) == len(COMMANDS)
    assert [c.order for c in COMMANDS] == sorted({c.order for c in COMMANDS})
    assert by_name("recover") is by_words("recover") and by_words("ray-up") is by_name("ray_up")


def test_an_argument_is_a_typed_field_and_its_schema_keeps_bounds_and_choices() -> None:
    @dataclasses.dataclass(frozen=True, kw_only=True)
    class Args:
        n: int | None = arg(Kind.INT, flag=True, min=1, max=5)

    (n,) = args_of(Args)
    assert n.name == "--n" and n.json_schema() == {"type": "integer", "minimum": 1, "maximum": 5}
    assert Arg("m", Kind.CHOICE, choices=("a", "b")).json_schema()["enum"] == ["a", "b"]
    assert args_of(NoArgs) == ()
    assert Args().n is None


def test_typed_arguments_are_made_from_bound_values() -> None:
    bootstrap = by_name("bootstrap")
    assert bootstrap is not None
    made = bootstrap.make({"hosts": ["pod-w0", "pod-w1"]})
    assert made.hosts == ("pod-w0", "pod-w1") and bootstrap.make({}).hosts == ()


def test_the_commands_never_reach_a_front_end_textual_or_the_wiring() -> None:
    probe = (
        "import sys, console.commands as c; c.all_commands(); "
        "bad = sorted(m for m in sys.modules if m.startswith(('textual', 'console.tui', "
        "'console.screens', 'console.script', 'console.mcp', 'console.wiring')));"
        "print(bad); raise SystemExit(1 if bad else 0)"
    )
    got = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True)
    assert got.returncode == 0, got.stdout + got.stderr
