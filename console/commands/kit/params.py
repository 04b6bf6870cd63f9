"""A command's arguments: a frozen dataclass whose fields say what each one is.

A command's ``Args`` is a ``kw_only`` frozen dataclass; each field is made by ``arg(...)`` and
carries an ``Arg`` in its metadata: its kind (which converter checks a value), its metavar
and help, its bounds and choices, whether it is a ``--flag`` or a positional. Everything a
front end shows or checks of the arguments derives from those fields, in their order
(positionals first, then flags): a script line's usage and parser (``console.script``), an
MCP tool's ``inputSchema`` (``Arg.json_schema``), the palette's per-host entries. The typed
instance is what ``run`` receives.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from functools import cache
from typing import Any

from console.services.model import JobStatus


class Kind(StrEnum):
    """What an argument's value is (its converter; ``bind.from_text``/``from_json``)."""

    INT = "int"
    SECONDS = "seconds"  # 90, 1.5, 90s, 5m, 1h in text; a number in JSON
    STR = "str"
    SLICE = "slice"  # a TPU slice: its index or node pool name (checked by the services)
    CHOICE = "choice"
    ONOFF = "onoff"  # on|off in text; a boolean in JSON
    FLAG = "bool"  # a --flag without value
    HOST = "host"  # an index, <node_name>-w<i> or (local) an IP: the host's name
    HOST_OR_ALL = "host_or_all"
    JOB = "job"  # a job id, or last (the session's newest)
    EVENT = "kind"  # one of the journal's event kinds
    RUNTIME_ENV = "runtime_env"  # a Ray runtime env: JSON, or a file of it
    ENV = "env"  # NAME=VALUE (a secret as NAME=$VAR)
    NAME = "name"  # a workload name (a Kubernetes name)
    PATH = "path"  # a spec file (TOML, JSON or YAML), read when bound
    CLUSTER = "cluster"  # a cluster of the fleet, by its name (``kit.clusters``)


# A kind -> its JSON schema (before bounds, choices and help).
_SCHEMA: dict[str, dict[str, Any]] = {
    Kind.INT: {"type": "integer"},
    Kind.SECONDS: {"type": "number", "minimum": 0},
    Kind.STR: {"type": "string"},
    Kind.SLICE: {"type": "string"},
    Kind.CHOICE: {"type": "string"},
    Kind.ONOFF: {"type": "boolean"},
    Kind.FLAG: {"type": "boolean"},
    Kind.HOST: {"type": "string"},
    Kind.HOST_OR_ALL: {"type": "string"},
    Kind.JOB: {"type": "string"},
    Kind.EVENT: {"type": "string"},
    Kind.RUNTIME_ENV: {"type": "object"},
    Kind.ENV: {"type": "string", "pattern": "^[A-Za-z_][A-Za-z0-9_]*=.*$"},
    Kind.NAME: {"type": "string", "pattern": "^[a-z][-a-z0-9]*$"},
    Kind.PATH: {"type": "string"},
    Kind.CLUSTER: {"type": "string"},
}
_ARG = "phantom.arg"  # the field metadata key


@dataclass(frozen=True)
class Arg:
    """One argument: a positional (``name`` is its field's) or a ``--flag``."""

    name: str  # positional: the field's name; flag: "--the-field-name"
    kind: Kind
    metavar: str = ""
    help: str = ""
    choices: tuple[str, ...] = ()
    min: float | None = None
    max: float | None = None
    optional: bool = False
    variadic: bool = False
    repeat: bool = False

    @property
    def dest(self) -> str:
        """The field's name: the flag without dashes, or the positional's name."""
        return self.name.lstrip("-").replace("-", "_")

    @property
    def is_flag(self) -> bool:
        return self.name.startswith("--")

    @property
    def required(self) -> bool:
        return not (self.is_flag or self.optional or self.variadic)

    def usage(self) -> str:
        if self.is_flag:
            text = self.name if self.kind == Kind.FLAG else f"{self.name} {self.meta()}"
            return f"[{text}]" + ("..." if self.repeat else "")
        text = self.meta() + (" ..." if self.variadic else "")
        return f"[{text}]" if self.optional or self.variadic else text

    def meta(self) -> str:
        if self.metavar:
            return self.metavar
        if self.choices:
            return "|".join(self.choices)
        return self.dest.upper()

    def json_schema(self) -> dict[str, Any]:
        one = dict(_SCHEMA[self.kind])
        if self.choices:
            one["enum"] = list(self.choices)
        if self.min is not None:
            one["minimum"] = self.min
        if self.max is not None:
            one["maximum"] = self.max
        if self.help:
            one["description"] = self.help
        if self.variadic or self.repeat:
            return {
                "type": "array",
                "items": one,
                **({"description": self.help} if self.help else {}),
            }
        return one


def arg(
    kind: Kind,
    metavar: str = "",
    help: str = "",  # noqa: A002 (the argument's help line, as argparse names it)
    *,
    flag: bool = False,
    choices: Iterable[str] = (),
    min: float | None = None,  # noqa: A002
    max: float | None = None,  # noqa: A002
    optional: bool = False,
    variadic: bool = False,
    repeat: bool = False,
    default: Any = dataclasses.MISSING,
) -> Any:
    """A field of a command's ``Args``. A required positional has no default; every other
    argument defaults to None (a list: empty; a ``--flag``: False) unless ``default``."""
    spec = Arg(
        "",  # named from the field (``args_of``)
        kind,
        metavar,
        help,
        tuple(choices),
        min,
        max,
        optional,
        variadic,
        repeat,
    )
    if default is dataclasses.MISSING and (flag or optional or variadic):
        default = False if kind == Kind.FLAG else () if variadic or repeat else None
    meta = {_ARG: (spec, flag)}
    if default is dataclasses.MISSING:
        return dataclasses.field(metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


@cache
def args_of(args_type: type) -> tuple[Arg, ...]:
    """The arguments of an ``Args`` dataclass: its positionals, then its flags, each in
    field order."""
    positionals: list[Arg] = []
    flags: list[Arg] = []
    for f in dataclasses.fields(args_type):
        if _ARG not in f.metadata:
            continue
        spec, flag = f.metadata[_ARG]
        if flag:
            flags.append(dataclasses.replace(spec, name="--" + f.name.replace("_", "-")))
        else:
            positionals.append(dataclasses.replace(spec, name=f.name))
    return (*positionals, *flags)


@dataclass(frozen=True, kw_only=True)
class NoArgs:
    """The arguments of a command that takes none."""


def input_schema(args_type: type) -> dict[str, Any]:
    """The arguments as a JSON schema object (an MCP tool's ``inputSchema``)."""
    args = args_of(args_type)
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {a.dest: a.json_schema() for a in args},
        "additionalProperties": False,
    }
    required = [a.dest for a in args if a.required]
    if required:
        schema["required"] = required
    return schema


# -- what several commands' arguments share ------------------------------------------------------

JOB_STATUSES = tuple(
    str(s)
    for s in (
        JobStatus.PENDING,
        JobStatus.RUNNING,
        JobStatus.SUCCEEDED,
        JobStatus.FAILED,
        JobStatus.PREEMPTED,
        JobStatus.STOPPED,
    )
)
WORKLOAD_STATES = (*JOB_STATUSES, "COMPLETED")  # COMPLETED: the JobSet's word for SUCCEEDED
MAX_EMULATED_HOSTS = 1024  # the emulator's own limit (a v4-4096 slice has 1,024 hosts)
TIMEOUT_HELP = "seconds (90, 1.5, 90s, 5m, 1h)"


def timeout(default: str) -> Any:
    """``--timeout S``: how long a waiting command waits (``default`` is said in its help)."""
    return arg(Kind.SECONDS, "S", f"give up after S {TIMEOUT_HELP}; default {default}", flag=True)


def job(
    metavar: str = "ID|last",
    help: str = "a Ray submission id, or last (the default)",  # noqa: A002
) -> Any:
    """The job a command is about: an id, or (left out) the session's newest."""
    return arg(Kind.JOB, metavar, help, optional=True)
