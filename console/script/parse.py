"""Parsing and static validation of a script: the whole script is checked before anything
runs, and every problem is reported with its line (``ScriptError``), not just the first.

A relative ``--runtime-env`` or ``--spec`` file is resolved against the script's directory;
host references are checked against ``cluster.hosts`` (or the last ``pod up --hosts N``);
``last`` must follow a line that submits; a submit line's spec is validated as a submit
would be, and so is a ``workload create`` line's ``WorkloadSpec``, including (where this
machine can tell, ``path_exists``) that its checkpoint exists.
"""

from __future__ import annotations

import difflib
import ipaddress
import json
import math
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from console.config import Config
from console.config.names import ENV_NAME_RE, NAME_RE
from console.config.runtime_env import validate_runtime_env
from console.config.validate import Invalid, read_text_file
from console.script import door
from console.script.language import (
    ACTIONS,
    CONTINUE_FLAG,
    FIRST_LOCAL_OCTET,
    TWO_WORD,
    ActionDef,
    Arg,
)
from console.script.language import (
    LOCAL_HOSTS_PER_BLOCK as HOSTS_PER_BLOCK,
)
from console.script.workload_args import PathExists, load_spec_file, shown, workload_problems
from console.services.action_table import refusal_for
from console.services.jobs.spec import SubmitSpec
from console.wiring import capabilities_for
from console.wiring.where import cluster_in_use

# shlex is pure Python: a megabyte line would take seconds to reject. No action needs more.
MAX_LINE_CHARS = 16_384


@dataclass(frozen=True)
class ScriptLine:
    line: int
    action: str
    args: Mapping[str, Any]
    continue_on_error: bool = False
    text: str = ""
    always: bool = False  # after `finally`: runs even when an earlier step failed


@dataclass(frozen=True)
class Script:
    name: str  # what diagnostics call it: the path as given, or <stdin>
    lines: tuple[ScriptLine, ...]


@dataclass(frozen=True)
class ScriptIssue:
    line: int
    message: str

    def render(self, name: str) -> str:
        return f"{name}:{self.line}: {self.message}"


class ScriptError(Exception):
    def __init__(self, name: str, issues: Sequence[ScriptIssue]) -> None:
        self.name = name
        self.issues = list(issues)
        super().__init__("\n".join(i.render(name) for i in self.issues))


class _ArgError(ValueError):
    pass


@dataclass
class _Ctx:
    config: Config
    base_dir: Path
    n_hosts: int
    job_lines: list[int] = field(default_factory=list)
    continue_on_error: bool = False
    finally_line: int | None = None
    path_exists: PathExists | None = None
    produced: set[str] = field(default_factory=set)  # checkpoints an earlier convert line makes


def parse_script(
    text: str,
    config: Config,
    *,
    name: str = "<script>",
    base_dir: Path | None = None,
    path_exists: PathExists | None = None,
) -> Script:
    """Parse and validate the whole script; raise ScriptError with every problem found.

    ``path_exists(uri)`` tells whether a checkpoint exists (None: cannot tell here)."""
    ctx = _Ctx(
        config=config,
        base_dir=base_dir or Path.cwd(),
        n_hosts=config.cluster.hosts,
        path_exists=path_exists,
    )
    steps: list[ScriptLine] = []
    issues: list[ScriptIssue] = []
    if "\x00" in text:
        raise ScriptError(name, [ScriptIssue(1, "binary content (NUL bytes): not a script")])
    for lineno, logical in _logical_lines(text):
        if len(logical) > MAX_LINE_CHARS:
            issues.append(
                ScriptIssue(
                    lineno,
                    f"line is {len(logical):,} characters; a script line is at most "
                    f"{MAX_LINE_CHARS:,} (put long arguments in a --runtime-env file)",
                )
            )
            continue
        try:
            tokens = shlex.split(logical, comments=True, posix=True)
        except ValueError as exc:
            issues.append(ScriptIssue(lineno, f"bad quoting: {exc} (close the quote)"))
            continue
        if not tokens:
            continue
        try:
            step = _parse_line(lineno, tokens, ctx, shlex.join(tokens))
        except _ArgError as exc:
            issues.append(ScriptIssue(lineno, str(exc)))
            if tokens[0] in ("submit", "relaunch-sweep") or tokens[:2] == ["workload", "create"]:
                ctx.job_lines.append(lineno)  # so `last` below is not a second, bogus error
            continue
        if step is not None:
            steps.append(step)
    if issues:
        raise ScriptError(name, issues)
    return Script(name=name, lines=tuple(steps))


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """Join backslash-continued lines; each keeps the number of its first physical line."""
    out: list[tuple[int, str]] = []
    buf: list[str] = []
    start = 0
    for i, raw in enumerate(text.splitlines(), start=1):
        if not buf:
            start = i
        stripped = raw.rstrip()
        if stripped.endswith("\\") and not stripped.lstrip().startswith("#"):
            buf.append(stripped[:-1])
            continue
        buf.append(raw)
        out.append((start, " ".join(buf)))
        buf = []
    if buf:
        out.append((start, " ".join(buf)))
    return out


def _parse_line(lineno: int, tokens: list[str], ctx: _Ctx, text: str) -> ScriptLine | None:
    name, rest = tokens[0], tokens[1:]
    if name in TWO_WORD:
        sub = rest[0] if rest else ""
        full = f"{name} {sub}".strip()
        if full not in ACTIONS:
            choices = [a for a in ACTIONS if a.startswith(name + " ")]
            raise _ArgError(
                f"{name}: needs one of {', '.join(c.split(' ', 1)[1] for c in choices)} "
                f"(usage: {' | '.join(ACTIONS[c].usage() for c in choices)})"
            )
        name, rest = full, rest[1:]
    adef = ACTIONS.get(name)
    if adef is None:
        raise _ArgError(_unknown_action(name))
    _check_provider(adef, ctx.config)
    args, cont = _bind(adef, rest, ctx)
    if name == "set":
        ctx.continue_on_error = args["enabled"]
        return None
    if name == "finally":
        if ctx.finally_line is not None:
            raise _ArgError(f"finally: already started on line {ctx.finally_line}")
        ctx.finally_line = lineno
        return None
    _check_semantics(adef, args, lineno, ctx)
    if adef.sets_job:
        ctx.job_lines.append(lineno)
    always = ctx.finally_line is not None
    return ScriptLine(lineno, name, args, cont or ctx.continue_on_error or always, text, always)


def _check_provider(adef: ActionDef, config: Config) -> None:
    """An action the configured cluster cannot do (what its backend declares) is refused:
    another kind of cluster's verbs, and emulator verbs on a real one."""
    if adef.row is None:  # a directive: every cluster
        return
    why = refusal_for(adef.row, capabilities_for(config))
    if why is None:
        return
    raise _ArgError(f"{why}; this config ({config.source}) drives {cluster_in_use(config)}")


def _unknown_action(name: str) -> str:
    names = sorted({a.split(" ")[0] for a in ACTIONS} | set(ACTIONS))
    close = difflib.get_close_matches(name, names, n=1, cutoff=0.5)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return f"unknown action {name!r}{hint} (actions: {', '.join(sorted(ACTIONS))})"


def _bind(adef: ActionDef, tokens: list[str], ctx: _Ctx) -> tuple[dict[str, Any], bool]:
    """Match tokens to the signature; convert and range-check every value."""
    positionals: list[str] = []
    args: dict[str, Any] = {}
    cont = False
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        if tok.startswith("--") and len(tok) > 2:
            flag_name, eq, inline = tok.partition("=")
            if flag_name == CONTINUE_FLAG.name:
                if eq:
                    raise _ArgError(f"{adef.name}: --continue takes no value")
                cont = True
                i += 1
                continue
            flag = adef.flag(flag_name)
            if flag is None:
                raise _ArgError(_unknown_flag(adef, flag_name))
            if flag.dest in args and not flag.repeat:
                raise _ArgError(f"{adef.name}: {flag_name} given twice")
            if flag.kind == "bool":
                if eq:
                    raise _ArgError(f"{adef.name}: {flag_name} takes no value")
                args[flag.dest] = True
                i += 1
                continue
            if eq:
                value = inline
            elif i + 1 < len(tokens):
                value = tokens[i + 1]
                i += 1
            else:
                raise _ArgError(
                    f"{adef.name}: {flag_name} needs a value {flag.meta()} (usage: {adef.usage()})"
                )
            converted = _convert(adef, flag, value, ctx)
            if flag.repeat:
                args.setdefault(flag.dest, []).append(converted)
            else:
                args[flag.dest] = converted
            i += 1
            continue
        positionals.append(tok)
        i += 1
    _bind_positionals(adef, positionals, args, ctx)
    return args, cont


def _bind_positionals(adef: ActionDef, given: list[str], args: dict[str, Any], ctx: _Ctx) -> None:
    specs = adef.positionals
    required = [p for p in specs if not (p.optional or p.variadic)]
    variadic = next((p for p in specs if p.variadic), None)
    if len(given) < len(required):
        missing = required[len(given)]
        raise _ArgError(f"{adef.name}: missing argument {missing.meta()} (usage: {adef.usage()})")
    n_optional = sum(1 for p in specs if p.optional)
    if variadic is None and len(given) > len(required) + n_optional:
        extra = given[len(required) + n_optional :]
        raise _ArgError(
            f"{adef.name}: unexpected argument(s) {' '.join(map(shlex.quote, extra))} "
            f"(usage: {adef.usage()})"
        )
    # Optional positionals are filled left to right with whatever the required ones leave.
    spare = len(given) - len(required)
    it = iter(given)
    for p in specs:
        if p.variadic:
            args[p.dest] = [_convert(adef, p, v, ctx) for v in it]
        elif p.optional:
            if spare > 0:
                args[p.dest] = _convert(adef, p, next(it), ctx)
                spare -= 1
            else:
                args[p.dest] = p.default
        else:
            token = next(it)
            if n_optional and len(given) == len(required) and not token.isupper():
                # `wait-job last`: the job was given, the STATUS after it is what's missing
                try:
                    args[p.dest] = _convert(adef, p, token, ctx)
                except _ArgError:
                    raise _ArgError(
                        f"{adef.name}: missing argument {p.meta()} after {token!r} "
                        f"(usage: {adef.usage()})"
                    ) from None
            else:
                args[p.dest] = _convert(adef, p, token, ctx)


def _unknown_flag(adef: ActionDef, flag: str) -> str:
    known = [f.name for f in adef.flags] + [CONTINUE_FLAG.name]
    close = difflib.get_close_matches(flag, known, n=1, cutoff=0.5)
    hint = f"; did you mean {close[0]}?" if close else ""
    return f"{adef.name}: unknown flag {flag}{hint} (usage: {adef.usage()})"


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


def _convert(adef: ActionDef, arg: Arg, value: str, ctx: _Ctx) -> Any:
    label = f"{adef.name}: {arg.name if arg.is_flag else arg.meta()}"
    kind = arg.kind
    if kind == "str":
        return value
    if kind == "int":
        try:
            n = int(value, 10)
        except ValueError:
            raise _ArgError(f"{label} {value!r}: must be an integer") from None
        if arg.min is not None and n < arg.min:
            raise _ArgError(f"{label} {n}: must be at least {int(arg.min)}")
        if arg.max is not None and n > arg.max:
            raise _ArgError(f"{label} {n}: must be at most {int(arg.max)}")
        return n
    if kind == "seconds":
        try:
            return parse_seconds(value)
        except ValueError as exc:
            raise _ArgError(f"{label} {exc}") from None
    if kind == "choice":
        if value not in arg.choices:
            close = difflib.get_close_matches(value, arg.choices, n=1, cutoff=0.5)
            hint = f"; did you mean {close[0]}?" if close else ""
            raise _ArgError(f"{label} {value!r}: use one of {', '.join(arg.choices)}{hint}")
        return value
    if kind == "onoff":
        lowered = value.lower()
        if lowered not in ("on", "off", "true", "false", "yes", "no"):
            raise _ArgError(f"{label} {value!r}: use on or off")
        return lowered in ("on", "true", "yes")
    if kind in ("host", "host_or_all"):
        if kind == "host_or_all" and value == "all":
            return "all"
        return resolve_host(value, ctx.config, ctx.n_hosts, allow_all=kind == "host_or_all")
    if kind == "job":
        return value
    if kind == "kind":
        try:
            return door.event_kind(label, value)
        except Invalid as exc:
            raise _ArgError(str(exc)) from None
    if kind == "runtime_env":
        return _load_runtime_env(value, ctx.base_dir, adef.name)
    if kind == "env":
        key, eq, val = value.partition("=")
        if not eq or not ENV_NAME_RE.match(key):
            raise _ArgError(f"{label} {shown(value)}: use NAME=VALUE (a secret as NAME=$VAR)")
        return (key, val)
    if kind == "name":
        if not NAME_RE.match(value):
            raise _ArgError(
                f"{label} {value!r}: a workload name: lower-case letters, digits and '-', "
                "starting with a letter"
            )
        return value
    if kind == "path":
        try:
            return load_spec_file(value, ctx.base_dir, label)
        except ValueError as exc:
            raise _ArgError(str(exc)) from None
    raise AssertionError(f"unhandled kind {kind}")  # a bug in ACTIONS, not in the script


def resolve_host(ref: str, config: Config, n_hosts: int, *, allow_all: bool = False) -> str:
    """A host reference -> the canonical host name ``<node_name>-w<i>``; _ArgError if unknown."""
    node = config.cluster.node_name
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
            if not config.is_local:
                return ref  # GCP internal IPs are only known at run time; services check them
            packed = ip.packed
            offset = packed[3] - FIRST_LOCAL_OCTET
            if ip.version == 4 and packed[:2] == b"\x7f\x00" and 0 <= offset < HOSTS_PER_BLOCK:
                index = packed[2] * HOSTS_PER_BLOCK + offset
    last = n_hosts - 1
    if index is None or not 0 <= index < n_hosts:
        forms = f"an index 0..{last}, a name {node}-w0..{node}-w{last}"
        if config.is_local:
            forms += f", an IP 127.0.0.{FIRST_LOCAL_OCTET}.. (127.0.<i // 200>.<10 + i % 200>)"
        if allow_all:
            forms += ", or all"
        raise _ArgError(f"unknown host {ref!r}: the pod has {n_hosts} host(s); use {forms}")
    return f"{node}-w{index}"


def _load_runtime_env(value: str, base_dir: Path, action: str) -> dict[str, Any]:
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
            raise _ArgError(f"{exc}; give a JSON object or a readable file") from None
        source = str(path)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise _ArgError(
            f"{label}: {source} is not valid JSON ({exc.msg} at line {exc.lineno} "
            f"column {exc.colno})"
        ) from None
    try:
        return validate_runtime_env(data, key="--runtime-env")
    except ValueError as exc:
        raise _ArgError(f"{action}: {exc}") from None


def _check_semantics(adef: ActionDef, args: dict[str, Any], lineno: int, ctx: _Ctx) -> None:
    """Cross-argument and cross-line checks: `last`, submit spec, pod size."""
    if adef.name == "pod up" and args.get("hosts") is not None:
        ctx.n_hosts = int(args["hosts"])
    if "job" in args:
        ref = args["job"] or "last"
        args["job"] = ref
        if ref == "last" and not ctx.job_lines:
            raise _ArgError(
                f"{adef.name}: `last` refers to the job of an earlier submit or relaunch-sweep "
                "line, and there is none before this line; give a job id or submit first"
            )
    if adef.name == "workload create":
        problem = workload_problems(args, ctx.config, ctx.path_exists, ctx.produced)
        if problem:
            raise _ArgError(problem)
    if adef.name == "submit":
        spec = build_spec(args, ctx.config)
        problems = spec.validate()
        if problems:
            raise _ArgError(
                "submit: " + "; ".join(f"{_flag_of(k)}: {v}" for k, v in problems.items())
            )
        if spec.mode != "sweep":  # engine.train parses them on the cluster: check them here
            try:
                door.train_args("submit: --train-args", spec.train_args)
            except Invalid as exc:
                raise _ArgError(str(exc)) from None


def _flag_of(spec_field: str) -> str:
    return "MODE" if spec_field == "mode" else "--" + spec_field.replace("_", "-")


def build_spec(args: Mapping[str, Any], config: Config) -> SubmitSpec:
    fields = {
        k: args[k]
        for k in (
            "train_args",
            "num_nodes",
            "tpu_per_task",
            "agents_per_node",
            "base_seed",
            "sweep_kind",
            "sweep_method",
            "sweep_backend",
            "run_cap",
            "sweep_id",
            "sweep_args",
            "submission_id",
        )
        if args.get(k) is not None
    }
    env = args.get("runtime_env")
    return SubmitSpec(
        mode=args["mode"],
        runtime_env=dict(config.runtime_env) if env is None else env,
        **fields,
    )
