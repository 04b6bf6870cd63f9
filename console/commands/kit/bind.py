"""An argument's value, checked and converted by its kind, from text or from JSON.

``from_text`` takes a word of a line (a script's: ``90s``, ``on``, ``2``); ``from_json``
takes an agent's JSON value that already matched the argument's schema. Both end in the
same domain checks: a host reference becomes the host's name, an event kind must be one of
the journal's, a runtime env and a spec file are read and validated, ``NAME=VALUE`` is split.
``Where`` is what binding needs to know: the cluster (its settings), how many hosts it has,
where relative files are, and whether a checkpoint exists. Every problem is a
``BadArgument`` naming the argument and the fix.
"""

from __future__ import annotations

import difflib
import ipaddress
import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from console.commands.kit import door
from console.commands.kit.params import Arg, Kind
from console.commands.kit.workload_args import load_spec_file, shown
from console.config.names import ENV_NAME_RE, NAME_RE
from console.config.runtime_env import validate_runtime_env
from console.config.validate import Invalid, read_text_file

if TYPE_CHECKING:
    from console.services.api import ServiceSettings

PathExists = Callable[[str], "bool | None"]
# Emulated host i in its first zone: 127.0.<i // 200>.<10 + i % 200>.
FIRST_LOCAL_OCTET = 10
LOCAL_HOSTS_PER_BLOCK = 200


class BadArgument(ValueError):
    """A value an argument cannot take; the message names it and the fix."""


@dataclass
class Where:
    """What binding an argument needs to know."""

    settings: ServiceSettings
    base_dir: Path  # where a relative file is
    hosts: int  # the pod's hosts (a script's `pod up --hosts N` changes it)
    path_exists: PathExists | None = None  # whether a checkpoint exists (None: cannot tell)
    produced: set[str] = field(default_factory=set)  # checkpoints an earlier step makes

    @property
    def local(self) -> bool:
        return self.settings.cluster.provider == "local"


def from_text(label: str, arg: Arg, value: str, where: Where) -> Any:
    """A word of a line as ``arg``'s value (``label``: "verb: ARG", for messages)."""
    kind = arg.kind
    if kind in (Kind.STR, Kind.JOB, Kind.SLICE, Kind.CLUSTER):  # a cluster: ``kit.clusters``
        return value
    if kind == Kind.INT:
        try:
            n = int(value, 10)
        except ValueError:
            raise BadArgument(f"{label} {value!r}: must be an integer") from None
        _bounds(label, arg, n)
        return n
    if kind == Kind.SECONDS:
        try:
            return parse_seconds(value)
        except ValueError as exc:
            raise BadArgument(f"{label} {exc}") from None
    if kind == Kind.CHOICE:
        if value not in arg.choices:
            close = difflib.get_close_matches(value, arg.choices, n=1, cutoff=0.5)
            hint = f"; did you mean {close[0]}?" if close else ""
            raise BadArgument(f"{label} {value!r}: use one of {', '.join(arg.choices)}{hint}")
        return value
    if kind == Kind.ONOFF:
        lowered = value.lower()
        if lowered not in ("on", "off", "true", "false", "yes", "no"):
            raise BadArgument(f"{label} {value!r}: use on or off")
        return lowered in ("on", "true", "yes")
    if kind == Kind.RUNTIME_ENV:
        return load_runtime_env(value, where.base_dir, label.partition(":")[0])
    return _domain(label, arg, value, where)


def from_json(label: str, arg: Arg, value: Any, where: Where) -> Any:
    """An agent's JSON value (it matched ``arg``'s schema) as ``arg``'s value."""
    if arg.variadic or arg.repeat:
        return tuple(_one_json(label, arg, v, where) for v in value)
    return _one_json(label, arg, value, where)


def _one_json(label: str, arg: Arg, value: Any, where: Where) -> Any:
    kind = arg.kind
    if kind == Kind.RUNTIME_ENV:
        try:
            return validate_runtime_env(value, key="--runtime-env")
        except ValueError as exc:
            raise BadArgument(f"{label.partition(':')[0]}: {exc}") from None
    if kind == Kind.SECONDS:
        if not math.isfinite(value):
            raise BadArgument(f"{label} {value!r}: must be a finite duration")
        return float(value)
    if kind in (
        Kind.INT,
        Kind.ONOFF,
        Kind.FLAG,
        Kind.CHOICE,
        Kind.STR,
        Kind.JOB,
        Kind.SLICE,
        Kind.CLUSTER,
    ):
        return value  # the schema checked type, range and choices
    return _domain(label, arg, str(value), where)


def _bounds(label: str, arg: Arg, n: int) -> None:
    if arg.min is not None and n < arg.min:
        raise BadArgument(f"{label} {n}: must be at least {int(arg.min)}")
    if arg.max is not None and n > arg.max:
        raise BadArgument(f"{label} {n}: must be at most {int(arg.max)}")


def _domain(label: str, arg: Arg, value: str, where: Where) -> Any:
    """The kinds whose domain lives elsewhere than in their type."""
    kind = arg.kind
    if kind in (Kind.HOST, Kind.HOST_OR_ALL):
        if kind == Kind.HOST_OR_ALL and value == "all":
            return "all"
        return resolve_host(value, where, allow_all=kind == Kind.HOST_OR_ALL)
    if kind == Kind.EVENT:
        try:
            return door.event_kind(label, value)
        except Invalid as exc:
            raise BadArgument(str(exc)) from None
    if kind == Kind.ENV:
        key, eq, val = value.partition("=")
        if not eq or not ENV_NAME_RE.match(key):
            raise BadArgument(f"{label} {shown(value)}: use NAME=VALUE (a secret as NAME=$VAR)")
        return (key, val)
    if kind == Kind.NAME:
        if not NAME_RE.match(value):
            raise BadArgument(
                f"{label} {value!r}: a workload name: lower-case letters, digits and '-', "
                "starting with a letter"
            )
        return value
    if kind == Kind.PATH:
        try:
            return load_spec_file(value, where.base_dir, label)
        except ValueError as exc:
            raise BadArgument(str(exc)) from None
    raise AssertionError(f"unhandled kind {kind}")  # a bug in a command's Args, not the input


_SECONDS_RE = re.compile(r"^([-+]?(?:\d+(?:\.\d*)?|\.\d+))(ms|s|m|h)?$")
_UNIT = {None: 1.0, "ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_seconds(text: str) -> float:
    m = _SECONDS_RE.match(text.strip())
    if not m:
        raise ValueError(f"{text!r} is not a duration; use seconds like 90, 1.5, 90s, 5m or 1h")
    value = float(m.group(1)) * _UNIT[m.group(2)]
    if not math.isfinite(value):
        raise ValueError(f"{text!r}: must be a finite duration")
    if value < 0:
        raise ValueError(f"{text}: must be 0 or more seconds (a negative timeout never waits)")
    return value


def resolve_host(ref: str, where: Where, *, allow_all: bool = False) -> str:
    """A host reference -> the canonical host name ``<node_name>-w<i>``; BadArgument if
    unknown."""
    node = where.settings.cluster.node_name
    n_hosts = where.hosts
    index: int | None = None
    if ref.isdigit():
        index = int(ref)
    elif ref.startswith(node + "-w") and ref[len(node) + 2 :].isdigit():
        index = int(ref[len(node) + 2 :])
    else:
        try:
            ip = ipaddress.ip_address(ref)
        except ValueError:
            ip = None
        if ip is not None:
            if not where.local:
                return ref  # GCP internal IPs are only known at run time; services check them
            packed = ip.packed
            offset = packed[3] - FIRST_LOCAL_OCTET
            if (
                ip.version == 4
                and packed[:2] == b"\x7f\x00"
                and 0 <= offset < LOCAL_HOSTS_PER_BLOCK
            ):
                index = packed[2] * LOCAL_HOSTS_PER_BLOCK + offset
    last = n_hosts - 1
    if index is None or not 0 <= index < n_hosts:
        forms = f"an index 0..{last}, a name {node}-w0..{node}-w{last}"
        if where.local:
            forms += f", an IP 127.0.0.{FIRST_LOCAL_OCTET}.. (127.0.<i // 200>.<10 + i % 200>)"
        if allow_all:
            forms += ", or all"
        raise BadArgument(f"unknown host {ref!r}: the pod has {n_hosts} host(s); use {forms}")
    return f"{node}-w{index}"


def load_runtime_env(value: str, base_dir: Path, action: str) -> dict[str, Any]:
    """A runtime env from JSON text or a file of it (relative to ``base_dir``), validated."""
    label = f"{action}: --runtime-env"
    text = value.strip()
    source = "the value"
    if not text.startswith("{"):
        path = Path(text).expanduser()
        if not path.is_absolute():
            path = base_dir / path
        try:  # the door's reader: a binary or huge file is named, not a traceback
            text = read_text_file(label, path)
        except Invalid as exc:
            raise BadArgument(f"{exc}; give a JSON object or a readable file") from None
        source = str(path)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BadArgument(
            f"{label}: {source} is not valid JSON ({exc.msg} at line {exc.lineno} "
            f"column {exc.colno})"
        ) from None
    try:
        return validate_runtime_env(data, key="--runtime-env")
    except ValueError as exc:
        raise BadArgument(f"{action}: {exc}") from None
