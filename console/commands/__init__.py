"""The console's commands: one module each in this package, each with its ``COMMAND``.

A command (``kit.base.Command``) is the unit of behaviour: its typed arguments, the
capability it needs, what it does to the cluster, its confirmation text and its ``run``.
Every front end adapts the commands and keeps no registry of its own: the TUI's keys,
palette and help, the script's verbs and parser, the MCP server's tools and resources.
A new command is a new module here (and its test); nothing else names it.

The package is below every front end and above the services (``console-layers``); it never
imports a front end, Textual, or the wiring.
"""

from __future__ import annotations

import importlib
import pkgutil
from functools import cache
from typing import Any

from console.commands.kit.base import (
    Command,
    CommandFailed,
    Confirm,
    Effect,
    Front,
    GkeControl,
    PodControl,
    Session,
    Started,
    execute,
    execute_fleet,
)

__all__ = [
    "Command",
    "CommandFailed",
    "Confirm",
    "Effect",
    "Front",
    "GkeControl",
    "PodControl",
    "Session",
    "Started",
    "all_commands",
    "by_name",
    "by_words",
    "execute",
    "execute_fleet",
    "offered",
]


@cache
def all_commands() -> tuple[Command[Any], ...]:
    """Every command, in the order lists show them (``Command.order``)."""
    found: list[Command[Any]] = []
    for info in pkgutil.iter_modules(__path__):
        if info.ispkg:
            continue  # the kit: what commands are made of
        module = importlib.import_module(f"{__name__}.{info.name}")
        command = getattr(module, "COMMAND", None)
        if not isinstance(command, Command):
            raise TypeError(f"{module.__name__}: a command module without a COMMAND")
        found.append(command)
    found.sort(key=lambda c: c.order)
    names = [c.name for c in found]
    doubled = sorted({n for n in names if names.count(n) > 1})
    if doubled:
        raise TypeError(f"two commands named {doubled}")
    return tuple(found)


def by_name(name: str) -> Command[Any] | None:
    return _names().get(name)


def by_words(words: str) -> Command[Any] | None:
    """The command a line's first words name (``pod up``, ``stop-job``)."""
    return _words().get(words)


def offered(front: Front) -> tuple[Command[Any], ...]:
    """The commands ``front`` offers, in order."""
    return tuple(c for c in all_commands() if front in c.fronts)


@cache
def _names() -> dict[str, Command[Any]]:
    return {c.name: c for c in all_commands()}


@cache
def _words() -> dict[str, Command[Any]]:
    return {c.words: c for c in all_commands()}
