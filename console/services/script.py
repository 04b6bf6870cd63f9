"""`phantom --script FILE`: the console's actions without a screen (cron, CI, agents).

Language (one action per line; the whole script is checked before anything runs)::

    # comment                       blank lines and '#' comments are ignored
    pod up [--hosts N]              shell-style quoting (shlex); a line ending in '\\'
    submit single --train-args "--algo ppo --total-timesteps 2048"   continues on the next
    set continue-on-error on|off    directive: from here on a failed step does not stop
    ray-up --continue               per line: this step's failure does not stop the script
    finally                         directive: every later line runs even after a failure

The signatures of all actions live in ``ACTIONS`` (one table): the parser, the validator
and ``usage_text()`` all read it. Host arguments take an index (``2``), a name
(``<node_name>-w2``) or, on the local emulator, an IP (``127.0.0.12``); they are checked
against ``cluster.hosts`` (or the last ``pod up --hosts N``). ``last`` (and an omitted job
id) is the job of the latest ``submit``/``relaunch-sweep``, followed across watchdog
resubmissions. A relative ``--runtime-env`` file is resolved against the script's directory.

Output: stdout carries one JSON object per line (``step``, ``event``, ``summary``), flushed
per line; stderr carries diagnostics. Exit codes: 0 all steps ok; 1 a step failed;
2 invalid script or config (nothing was executed); 130 interrupted (SIGINT/SIGTERM), after
stopping the jobs this run submitted and bringing down a pod this run brought up.
Secrets are scrubbed from every line (``status.Scrubber``).

``pod up``/``pod down`` drive the local emulator through a ``PodControl`` (the services need
a running pod to exist at all, so they are built lazily after it); every other action is one
``ConsoleServices`` call.
"""

from __future__ import annotations

import asyncio
import contextlib
import difflib
import ipaddress
import json
import math
import re
import shlex
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TextIO

from console.config import Config, ConfigError, validate_runtime_env
from console.services.model import (
    ActionResult,
    Event,
    JobInfo,
    RecoveryStatus,
    RunCadence,
    Update,
    to_jsonable,
)
from console.services.status import Scrubber, ServicesFactory, collect_status, default_factory
from console.services.submit import SWEEP_BACKENDS, SWEEP_METHODS, SubmitSpec

if TYPE_CHECKING:
    from console.services.api import ConsoleServices

EXIT_OK, EXIT_FAILED, EXIT_INVALID, EXIT_INTERRUPTED = 0, 1, 2, 130
ACTOR = "script"
JOB_STATUSES = ("PENDING", "RUNNING", "SUCCEEDED", "FAILED", "STOPPED")
TERMINAL = frozenset({"SUCCEEDED", "FAILED", "STOPPED"})
MAX_EMULATED_HOSTS = 200  # 127.0.0.10 .. 127.0.0.209: the emulator's own limit
FIRST_LOCAL_OCTET = 10


# --------------------------------------------------------------------------------------------
# The signature table
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Arg:
    """A positional argument or a ``--flag`` of an action.

    ``kind`` picks the converter: int, seconds, str, choice, onoff, host, host_or_all,
    job, runtime_env, kind, bool (flag without value).
    """

    name: str  # positional: metavar; flag: "--name"
    kind: str
    metavar: str = ""
    help: str = ""
    choices: tuple[str, ...] = ()
    min: float | None = None
    max: float | None = None
    optional: bool = False
    variadic: bool = False
    default: Any = None

    @property
    def dest(self) -> str:
        """Key in a step's args: the flag without dashes, or the positional's name."""
        return self.name.lstrip("-").replace("-", "_")

    @property
    def is_flag(self) -> bool:
        return self.name.startswith("--")

    def usage(self) -> str:
        if self.is_flag:
            text = self.name if self.kind == "bool" else f"{self.name} {self.meta()}"
            return f"[{text}]"
        text = self.meta() + (" ..." if self.variadic else "")
        return f"[{text}]" if self.optional or self.variadic else text

    def meta(self) -> str:
        if self.metavar:
            return self.metavar
        if self.choices:
            return "|".join(self.choices)
        return self.dest.upper()


@dataclass(frozen=True)
class ActionDef:
    name: str
    summary: str
    positionals: tuple[Arg, ...] = ()
    flags: tuple[Arg, ...] = ()
    local_only: bool = False
    sets_job: bool = False  # defines what `last` refers to

    def usage_parts(self) -> list[str]:
        parts = [self.name, *(a.usage() for a in self.positionals)]
        return parts + [f.usage() for f in self.flags]

    def usage(self) -> str:
        return " ".join(self.usage_parts())

    def flag(self, name: str) -> Arg | None:
        return next((f for f in self.flags if f.name == name), None)


_TIMEOUT_HELP = "seconds (90, 1.5, 90s, 5m, 1h)"


def _timeout(default: str) -> Arg:
    return Arg("--timeout", "seconds", "S", f"give up after S {_TIMEOUT_HELP}; default {default}")


_JOB = Arg("job", "job", "ID|last", "a Ray submission id, or last (the default)", optional=True)

ACTIONS: dict[str, ActionDef] = {
    a.name: a
    for a in (
        ActionDef(
            "pod up",
            "start the local pod emulator and wait until READY (local only)",
            flags=(
                Arg("--hosts", "int", "N", "number of hosts", min=1, max=MAX_EMULATED_HOSTS),
                Arg("--ready-delay", "seconds", "S", "seconds a (re)created host stays CREATING"),
                Arg(
                    "--ssh-port",
                    "int",
                    "PORT",
                    "SSH port on every host (0: any free)",
                    min=0,
                    max=65535,
                ),
            ),
            local_only=True,
        ),
        ActionDef(
            "pod down",
            "stop the emulator and every process of its hosts (local only)",
            local_only=True,
        ),
        ActionDef(
            "wait-ready",
            "wait until the TPU node and every host are READY",
            flags=(_timeout("recovery.ready_timeout_s"),),
        ),
        ActionDef(
            "bootstrap",
            "run the bootstrap command on the hosts (default: all)",
            positionals=(Arg("hosts", "host", "HOST", variadic=True),),
        ),
        ActionDef("ray-up", "start the Ray head and join every worker (restarts if up)"),
        ActionDef("tunnel", "open the SSH tunnel to the dashboard and Ray client ports"),
        ActionDef(
            "submit",
            "submit a job (the seed's RAY_MODE); sets `last`",
            positionals=(Arg("mode", "choice", choices=("single", "distributed", "sweep")),),
            flags=(
                Arg("--train-args", "str", '"..."', "arguments of engine.train"),
                Arg(
                    "--runtime-env", "runtime_env", "FILE|JSON", "Ray runtime env (default: config)"
                ),
                Arg("--num-nodes", "int", "N", min=1),
                Arg("--tpu-per-task", "int", "N", min=0),
                Arg("--agents-per-node", "int", "N", min=1),
                Arg("--base-seed", "int", "N", min=0),
                Arg("--sweep-kind", "str", "K"),
                Arg("--sweep-method", "choice", choices=SWEEP_METHODS),
                Arg("--sweep-backend", "choice", choices=SWEEP_BACKENDS),
                Arg("--run-cap", "int", "N", min=1),
                Arg("--sweep-id", "str", "ID", "resume this sweep"),
                Arg("--submission-id", "str", "ID"),
            ),
            sets_job=True,
        ),
        ActionDef(
            "wait-job",
            "wait until the job reaches STATUS (fails early if it ends otherwise; RUNNING "
            "means started, so an already SUCCEEDED job counts)",
            positionals=(_JOB, Arg("status", "choice", choices=JOB_STATUSES)),
            flags=(_timeout("3600"),),
        ),
        ActionDef(
            "logs",
            "the job's log (last N lines in the step result)",
            positionals=(_JOB,),
            flags=(Arg("--tail", "int", "N", "lines to keep (default 100)", min=1),),
        ),
        ActionDef("stop-job", "stop a job", positionals=(_JOB,)),
        ActionDef(
            "preempt",
            "preempt a host or all of them (local only)",
            positionals=(Arg("host", "host_or_all", "HOST|all"),),
            local_only=True,
        ),
        ActionDef(
            "recreate",
            "recreate a host: bare sandbox, new host key (local only)",
            positionals=(Arg("host", "host", "HOST"),),
            local_only=True,
        ),
        ActionDef(
            "recover",
            "run the recovery loop now (or join the running one) and wait",
            flags=(_timeout("1800"),),
        ),
        ActionDef(
            "relaunch-sweep",
            "relaunch the sweep agents with the same sweep id; sets `last`",
            sets_job=True,
        ),
        ActionDef(
            "auto-recovery",
            "switch the watchdog's automatic recovery on or off",
            positionals=(Arg("enabled", "onoff", "on|off"),),
        ),
        ActionDef(
            "wait-event",
            "wait for an event of KIND (e.g. preempted, recovered, stalled) seen since the "
            "script started and not matched by an earlier wait-event",
            positionals=(Arg("kind", "kind", "KIND"),),
            flags=(Arg("--host", "host", "HOST"), _timeout("600")),
        ),
        ActionDef("status", "snapshot of pod, Ray, jobs and cadence (as `phantom status --json`)"),
        ActionDef("teardown", "`ray stop -f` everywhere and close the tunnel (VMs stay)"),
        ActionDef("sleep", "wait S seconds", positionals=(Arg("seconds", "seconds", "S"),)),
        ActionDef(
            "finally",
            "directive: the lines after it always run (cleanup), also after a failed step; "
            "each continues on error; there, teardown and pod down act only if this script "
            "started Ray / the pod",
        ),
        ActionDef(
            "set",
            "directive: set continue-on-error on|off (no step of its own)",
            positionals=(
                Arg("setting", "choice", choices=("continue-on-error",)),
                Arg("enabled", "onoff", "on|off"),
            ),
        ),
    )
}
# Every action accepts it: this line's failure does not stop the script.
CONTINUE_FLAG = Arg("--continue", "bool", help="a failure of this step does not stop the script")
_TWO_WORD = {"pod"}
_DEFAULT_TIMEOUTS = {"wait-job": 3600.0, "recover": 1800.0, "wait-event": 600.0}


def _wrap_units(units: list[str], width: int, first: str, rest: str) -> list[str]:
    """Wrap whole units (``[--flag VALUE]`` never splits across lines)."""
    lines: list[str] = []
    cur = first
    for u in units:
        if cur.strip() and len(cur) + 1 + len(u) > width:
            lines.append(cur)
            cur = rest + u
        else:
            cur = cur + (" " if cur.strip() else "") + u
    lines.append(cur)
    return lines


def usage_text() -> str:
    """The language reference, generated from ``ACTIONS`` (fits 80 columns)."""
    import textwrap

    lines = ["phantom --script FILE|-   one action per line; '#' comments; shell quoting", ""]
    for a in ACTIONS.values():
        lines += _wrap_units(a.usage_parts(), 78, "  ", "      ")
        lines += textwrap.wrap(a.summary, 78, initial_indent="      ", subsequent_indent="      ")
    lines += [
        "",
        "  any action: --continue   a failure of this step does not stop the script",
        "  HOST: index, <node_name>-w<i>, or (local) 127.0.0.(10+i)",
        "  S (seconds): 90, 1.5, 90s, 5m, 1h",
        "  exit: 0 ok, 1 a step failed, 2 invalid script/config (nothing run),",
        "        130 interrupted (after stopping what the script started)",
    ]
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# Parsing and static validation
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Step:
    line: int
    action: str
    args: Mapping[str, Any]
    continue_on_error: bool = False
    text: str = ""
    always: bool = False  # after `finally`: runs even when an earlier step failed


@dataclass(frozen=True)
class Script:
    name: str  # what diagnostics call it: the path as given, or <stdin>
    steps: tuple[Step, ...]


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


def parse_script(
    text: str, config: Config, *, name: str = "<script>", base_dir: Path | None = None
) -> Script:
    """Parse and validate the whole script; raise ScriptError with every problem found."""
    ctx = _Ctx(config=config, base_dir=base_dir or Path.cwd(), n_hosts=config.cluster.hosts)
    steps: list[Step] = []
    issues: list[ScriptIssue] = []
    for lineno, logical in _logical_lines(text):
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
            if tokens[0] in ("submit", "relaunch-sweep"):
                ctx.job_lines.append(lineno)  # so `last` below is not a second, bogus error
            continue
        if step is not None:
            steps.append(step)
    if issues:
        raise ScriptError(name, issues)
    return Script(name=name, steps=tuple(steps))


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


def _parse_line(lineno: int, tokens: list[str], ctx: _Ctx, text: str) -> Step | None:
    name, rest = tokens[0], tokens[1:]
    if name in _TWO_WORD:
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
    if adef.local_only and not ctx.config.is_local:
        raise _ArgError(
            f"{name}: only for the local emulator; this config drives provider "
            f"{ctx.config.cluster.provider!r} ({ctx.config.source})"
        )
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
    return Step(lineno, name, args, cont or ctx.continue_on_error or always, text, always)


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
            if flag.dest in args:
                raise _ArgError(f"{adef.name}: {flag_name} given twice")
            if eq:
                value = inline
            elif i + 1 < len(tokens):
                value = tokens[i + 1]
                i += 1
            else:
                raise _ArgError(
                    f"{adef.name}: {flag_name} needs a value {flag.meta()} (usage: {adef.usage()})"
                )
            args[flag.dest] = _convert(adef, flag, value, ctx)
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
        if not re.match(r"^[a-z][a-z0-9_]*$", value):
            raise _ArgError(f"{label} {value!r}: an event kind like preempted, recovered, stalled")
        return value
    if kind == "runtime_env":
        return _load_runtime_env(value, ctx.base_dir, adef.name)
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
            if ip.version == 4 and packed[:3] == b"\x7f\x00\x00":
                index = packed[3] - FIRST_LOCAL_OCTET
    last = n_hosts - 1
    if index is None or not 0 <= index < n_hosts:
        forms = f"an index 0..{last}, a name {node}-w0..{node}-w{last}"
        if config.is_local:
            forms += f", an IP 127.0.0.{FIRST_LOCAL_OCTET}..127.0.0.{FIRST_LOCAL_OCTET + last}"
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
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise _ArgError(
                f"{label}: cannot read {str(path)!r} ({exc.strerror or exc}); give a JSON "
                "object or a readable file"
            ) from None
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
    if adef.name == "submit":
        spec = build_spec(args, ctx.config)
        problems = spec.validate()
        if problems:
            raise _ArgError(
                "submit: " + "; ".join(f"{_flag_of(k)}: {v}" for k, v in problems.items())
            )


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


# --------------------------------------------------------------------------------------------
# Pod control (local emulator)
# --------------------------------------------------------------------------------------------


class PodControl(Protocol):
    async def is_up(self) -> bool: ...

    async def up(
        self, hosts: int, *, ready_delay: float | None, ssh_port: int | None
    ) -> dict[str, Any]:
        """Start the pod and wait until READY; a JSON-able summary."""

    async def down(self) -> bool:
        """Stop it, leaving no process behind; True if one was running."""


class EmulatorPodControl:
    """`pod up|down` through the emulator's own client (the only emulator-specific bit)."""

    def __init__(self, config: Config) -> None:
        self.config = config

    def _run_dir(self) -> Path:
        if self.config.cluster.run_dir:
            return Path(self.config.cluster.run_dir).expanduser()
        from console.emulator.layout import default_run_dir

        return default_run_dir()

    async def is_up(self) -> bool:
        from console.emulator import client

        return await client.async_pod_status(self._run_dir()) is not None

    async def up(
        self, hosts: int, *, ready_delay: float | None, ssh_port: int | None
    ) -> dict[str, Any]:
        from console.emulator import client

        kwargs: dict[str, Any] = {"hosts": hosts}
        if ready_delay is not None:
            kwargs["ready_delay"] = ready_delay
        # Any free port unless asked: a fixed one collides with other pods on this machine;
        # the services read the real port from the emulator's status.
        kwargs["ssh_port"] = 0 if ssh_port is None else ssh_port
        info = await client.async_start_pod(self._run_dir(), **kwargs)
        return {
            "node_name": info.node_name,
            "state": info.state,
            "tpu_api": info.tpu_api,
            "hosts": [{"name": h.name, "ip": h.ip, "ssh_port": h.ssh_port} for h in info.hosts],
            "run_dir": str(info.run_dir),
        }

    async def down(self) -> bool:
        from console.emulator import client

        return await client.async_stop_pod(self._run_dir())


# --------------------------------------------------------------------------------------------
# The runner
# --------------------------------------------------------------------------------------------


class StepFailure(Exception):
    """A step did not reach its goal; ``result`` goes into the step's JSON line."""

    def __init__(self, message: str, result: Mapping[str, Any] | None = None) -> None:
        super().__init__(message)
        self.result = dict(result or {})


class JsonLines:
    """Thread-safe writer: one scrubbed JSON object per line, flushed per line."""

    def __init__(self, out: TextIO, scrub: Scrubber) -> None:
        self._out = out
        self._scrub = scrub
        self._lock = threading.Lock()

    def emit(self, obj: Mapping[str, Any]) -> None:
        line = json.dumps(self._scrub(to_jsonable(obj)), ensure_ascii=False, default=str)
        with self._lock:
            self._out.write(line + "\n")
            self._out.flush()


class ScriptRunner:
    def __init__(
        self,
        script: Script,
        config: Config,
        *,
        services_factory: ServicesFactory,
        pod_control: PodControl,
        stdout: TextIO,
        stderr: TextIO,
        clock: Callable[[], float] = time.time,
        poll_interval_s: float | None = None,
    ) -> None:
        self.script = script
        self.config = config
        self._factory = services_factory
        self._pod = pod_control
        self._scrub = Scrubber(config)
        self._out = JsonLines(stdout, self._scrub)
        self._err = stderr
        self._clock = clock
        self._poll = poll_interval_s or max(0.2, min(2.0, config.recovery.poll_interval_s))
        self._services: ConsoleServices | None = None
        self._unsubscribe: Callable[[], None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None
        self._ev_lock = threading.Lock()
        self._seen: set[Any] = set()
        self._events: list[dict[str, Any]] = []
        self._consumed: set[int] = set()
        self._job_status: dict[str, str] = {}
        self._resubmitted: dict[str, str] = {}
        self._stalled_runs: set[str] = set()
        self._submitted: list[str] = []
        self._last_job: str | None = None
        self._pod_started = False
        self._ray_started = False
        self._interrupted: str | None = None
        self._config_error = False
        self._cleaning_up = False

    # -- diagnostics ----------------------------------------------------------------------
    def _diag(self, message: str) -> None:
        self._err.write(self._scrub.text(message) + "\n")
        self._err.flush()

    # -- events -----------------------------------------------------------------------------
    def _on_update(self, update: Update) -> None:
        """Bus callback (any thread): turn observations into deduplicated event lines."""
        if isinstance(update, Event):
            if update.kind == "action" and update.actor == ACTOR:
                return  # our own steps are already on stdout as step lines
            data = dict(update.data)
            obj = {"type": "event", **update.to_json()}
            status = data.get("new_status") or data.get("status")
            if update.kind == "job_state" and "job_id" in data and status:
                # Same key as transitions seen by our own polling: one line per transition.
                key: Any = ("job_state", data["job_id"], status)
                obj["status"] = status
                with self._ev_lock:
                    self._job_status[str(data["job_id"])] = str(status)
            elif update.kind == "stalled" and "run_id" in data:
                # One line per stall episode, whether the watchdog or the cadence feed says so.
                with self._ev_lock:
                    if str(data["run_id"]) in self._stalled_runs:
                        return
                    self._stalled_runs.add(str(data["run_id"]))
                key = (
                    ("id", update.id)
                    if update.id is not None
                    else (update.kind, update.host, update.at, update.message)
                )
            elif update.id is not None:
                key = ("id", update.id)
            else:
                key = (update.kind, update.host, update.at, update.message)
            if update.kind == "cadence_resumed" and "run_id" in data:
                with self._ev_lock:
                    self._stalled_runs.discard(str(data["run_id"]))
            if update.kind == "job_resubmitted":
                old, new = data.get("old_job_id"), data.get("new_job_id")
                if old and new:
                    self._resubmitted[str(old)] = str(new)
            self._record(key, obj)
        elif isinstance(update, JobInfo):
            self._observe_job(update)
        elif isinstance(update, RunCadence):
            with self._ev_lock:
                new_stall = update.stalled and update.run_id not in self._stalled_runs
                if new_stall:
                    self._stalled_runs.add(update.run_id)
                elif not update.stalled:
                    self._stalled_runs.discard(update.run_id)
            if new_stall:
                at = self._clock()
                self._record(
                    ("stalled", update.run_id, "cadence"),
                    {
                        "type": "event",
                        "kind": "stalled",
                        "host": "",
                        "at": at,
                        "message": f"run {update.run_id}: metrics stalled",
                        "run_id": update.run_id,
                        "seconds_since": update.seconds_since,
                        "median_interval_s": update.median_interval_s,
                    },
                )

    def _observe_job(self, info: JobInfo) -> None:
        with self._ev_lock:
            before = self._job_status.get(info.job_id)
            self._job_status[info.job_id] = info.status
        if before == info.status:
            return
        self._record(
            ("job_state", info.job_id, info.status),
            {
                "type": "event",
                "kind": "job_state",
                "host": "",
                "at": self._clock(),
                "message": f"job {info.job_id} {before or 'new'} -> {info.status}"
                + (f": {info.message}" if info.message and info.status in TERMINAL else ""),
                "job_id": info.job_id,
                "old_status": before,
                "new_status": info.status,
                "status": info.status,
            },
        )

    def _record(self, key: Any, obj: dict[str, Any]) -> None:
        with self._ev_lock:
            if key in self._seen:
                return
            self._seen.add(key)
            self._events.append(obj)
        self._out.emit(obj)
        self._poke()

    def _poke(self) -> None:
        loop, wake = self._loop, self._wake
        if loop is None or wake is None:
            return
        with contextlib.suppress(RuntimeError):  # loop already closed: nobody is waiting
            loop.call_soon_threadsafe(wake.set)

    async def _wait_wake(self, timeout: float) -> None:
        assert self._wake is not None
        self._check_interrupt()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await self._wake.wait()
        self._wake.clear()
        self._check_interrupt()

    def _check_interrupt(self) -> None:
        # Belt and braces: on 3.11 a cancel can be swallowed by a wait_for deep inside a
        # library when its inner future completes in the same loop turn.
        if self._interrupted is not None and not self._cleaning_up:
            raise asyncio.CancelledError()

    # -- services lifecycle ---------------------------------------------------------------
    async def _svc(self) -> ConsoleServices:
        if self._services is None:
            services = self._factory(self.config)
            self._unsubscribe = services.subscribe(self._on_update)
            try:
                await services.start()
            except BaseException:
                self._unsubscribe()
                self._unsubscribe = None
                with contextlib.suppress(Exception):
                    await services.stop()
                raise
            self._services = services
        return self._services

    async def _drop_services(self) -> None:
        services, self._services = self._services, None
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        if services is not None:
            try:
                await services.stop()
            except Exception as exc:
                self._diag(f"phantom: stopping services: {exc}")

    # -- run --------------------------------------------------------------------------------
    async def run(self) -> int:
        self._loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        task = asyncio.current_task()
        assert task is not None
        restore = self._install_signals(task)
        started = time.monotonic()
        results: list[dict[str, Any]] = []
        cleanup: dict[str, Any] = {}
        try:
            try:
                await self._run_steps(results)
            except asyncio.CancelledError:
                if self._interrupted is None:
                    raise
                while task.uncancel():
                    pass
                self._cleaning_up = True
                self._diag(f"phantom: {self._interrupted}: stopping what this script started")
                try:
                    cleanup = await self._cleanup()
                except asyncio.CancelledError:
                    while task.uncancel():
                        pass
                    cleanup = {"skipped": "interrupted again"}
                    self._diag("phantom: interrupted again: cleanup skipped")
        finally:
            restore()
            with contextlib.suppress(asyncio.CancelledError):
                await self._drop_services()
        failed = [r for r in results if not r["ok"]]
        if self._interrupted is not None:
            code = EXIT_INTERRUPTED
        elif self._config_error:
            code = EXIT_INVALID
        else:
            code = EXIT_FAILED if failed else EXIT_OK
        summary: dict[str, Any] = {
            "type": "summary",
            "ok": code == EXIT_OK,
            "exit_code": code,
            "steps_total": len(self.script.steps),
            "steps_run": len(results),
            "steps_ok": len(results) - len(failed),
            "steps_failed": len(failed),
            "failed": [
                {
                    "n": r["n"],
                    "line": r["line"],
                    "action": r["action"],
                    "error": r["result"].get("error", ""),
                }
                for r in failed
            ],
            "elapsed_s": round(time.monotonic() - started, 3),
            "interrupted": self._interrupted,
            "events": len(self._events),
        }
        if cleanup:
            summary["cleanup"] = cleanup
        self._out.emit(summary)
        return code

    def _install_signals(self, task: asyncio.Task[Any]) -> Callable[[], None]:
        loop = asyncio.get_running_loop()
        installed: list[tuple[signal.Signals, Any]] = []

        def on_signal(sig: signal.Signals) -> None:
            first = self._interrupted is None
            if first:
                self._interrupted = sig.name
            task.cancel()
            if not first:
                self._diag(f"phantom: {sig.name} again: abandoning cleanup")

        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                previous = signal.getsignal(sig)
                loop.add_signal_handler(sig, on_signal, sig)
                installed.append((sig, previous))
            except (ValueError, RuntimeError, NotImplementedError):
                pass  # not the main thread (embedded use): the caller handles signals

        def restore() -> None:
            # remove_signal_handler resets to the default; put back whoever was there before.
            for sig, previous in installed:
                loop.remove_signal_handler(sig)
                if previous is not None:
                    signal.signal(sig, previous)

        return restore

    async def _run_steps(self, results: list[dict[str, Any]]) -> None:
        total = len(self.script.steps)
        stop_after_failure = False
        for n, step in enumerate(self.script.steps, start=1):
            self._check_interrupt()
            if stop_after_failure and not step.always:
                continue
            self._diag(f"phantom: [{n}/{total}] line {step.line}: {step.text}")
            t0 = time.monotonic()
            ok = True
            try:
                result = await self._dispatch(step)
            except StepFailure as exc:
                ok, result = False, {**exc.result, "error": str(exc)}
            except asyncio.CancelledError:
                elapsed = time.monotonic() - t0
                self._emit_step(results, n, step, False, elapsed, {"error": "interrupted"})
                raise
            except ConfigError as exc:  # found only when the services are built
                ok, result = False, {"error": exc.render()}
                self._config_error = True
            except Exception as exc:  # a service error fails this step, not the runner
                ok, result = False, {"error": f"{type(exc).__name__}: {exc}"}
            self._emit_step(results, n, step, ok, time.monotonic() - t0, result)
            if not ok:
                self._diag(
                    f"{self.script.name}:{step.line}: {step.action} failed: {result['error']}"
                )
                if not step.continue_on_error or self._config_error:
                    stop_after_failure = True
                    skipped = sum(1 for s in self.script.steps[n:] if not s.always)
                    if skipped:
                        self._diag(
                            f"phantom: skipping the {skipped} remaining step(s) before `finally` "
                            "(`set continue-on-error on` or --continue goes on after a failure)"
                        )

    def _emit_step(
        self,
        results: list[dict[str, Any]],
        n: int,
        step: Step,
        ok: bool,
        elapsed: float,
        result: Mapping[str, Any],
    ) -> None:
        obj = {
            "type": "step",
            "n": n,
            "line": step.line,
            "action": step.action,
            "ok": ok,
            "elapsed_s": round(elapsed, 3),
            "result": to_jsonable(result),
        }
        results.append(obj)
        self._out.emit(obj)

    async def _cleanup(self) -> dict[str, Any]:
        """After an interrupt: stop the jobs this run submitted, then undo its `pod up`
        (or, on a pod it did not start, its `ray-up`)."""
        done: dict[str, Any] = {"stopped_jobs": [], "pod_down": False}
        if self._services is not None:
            for job_id in dict.fromkeys(self._follow(j) for j in self._submitted):
                try:
                    async with asyncio.timeout(30):
                        info = await self._services.job_status(job_id)
                    if info.status in TERMINAL:
                        continue
                    async with asyncio.timeout(60):
                        res = await self._services.stop_job(job_id, ACTOR)
                    if res.ok:
                        done["stopped_jobs"].append(job_id)
                    else:
                        self._diag(f"phantom: could not stop job {job_id}: {res.message}")
                except Exception as exc:
                    self._diag(f"phantom: could not stop job {job_id}: {exc}")
        if self._ray_started and not self._pod_started and self._services is not None:
            try:  # Ray this run started on a pod it did not: stop it, leave the pod
                async with asyncio.timeout(300):
                    res = await self._services.teardown(ACTOR)
                done["teardown"] = res.ok
            except Exception as exc:
                self._diag(f"phantom: teardown failed: {exc}")
        if self._pod_started:
            await self._drop_services()
            try:
                done["pod_down"] = await self._pod.down()
                self._pod_started = False
            except Exception as exc:
                self._diag(f"phantom: pod down failed: {exc}")
        return done

    # -- actions ------------------------------------------------------------------------------
    async def _dispatch(self, step: Step) -> dict[str, Any]:
        # Cleanup after `finally` only undoes what this run did: a `pod up` that failed
        # because someone else's pod is running must not lead to taking theirs down.
        if step.always and step.action == "pod down" and not self._pod_started:
            return {"skipped": "this script did not bring a pod up"}
        if step.always and step.action == "teardown" and not self._ray_started:
            return {"skipped": "this script did not start Ray"}
        handler = getattr(self, "_do_" + step.action.replace(" ", "_").replace("-", "_"))
        result: dict[str, Any] = await handler(step.args)
        return result

    @staticmethod
    def _action_result(res: ActionResult) -> dict[str, Any]:
        out: dict[str, Any] = to_jsonable(res)
        if not res.ok:
            reasons = [f"{h}: {r.error}" for h, r in res.per_host.items() if not r.ok and r.error]
            raise StepFailure(res.message or "; ".join(reasons) or f"{res.action} failed", out)
        return out

    async def _do_pod_up(self, args: Mapping[str, Any]) -> dict[str, Any]:
        hosts = args.get("hosts") or self.config.cluster.hosts
        if await self._pod.is_up():
            raise StepFailure(
                "a pod emulator is already running for this config; `phantom pod down` it "
                "first, or remove `pod up` from the script"
            )
        await self._drop_services()  # services built before the pod existed are stale
        result = await self._pod.up(
            hosts, ready_delay=args.get("ready_delay"), ssh_port=args.get("ssh_port")
        )
        self._pod_started = True
        return result

    async def _do_pod_down(self, args: Mapping[str, Any]) -> dict[str, Any]:
        await self._drop_services()
        was_running = await self._pod.down()
        self._pod_started = False
        return {"was_running": was_running}

    async def _do_wait_ready(self, args: Mapping[str, Any]) -> dict[str, Any]:
        timeout = args.get("timeout")
        timeout = self.config.recovery.ready_timeout_s if timeout is None else timeout
        svc = await self._svc()
        try:
            async with asyncio.timeout(timeout + 30):
                res = await svc.wait_ready(timeout, ACTOR)
        except TimeoutError:
            raise StepFailure(f"not READY within {timeout:g}s") from None
        return self._action_result(res)

    async def _do_bootstrap(self, args: Mapping[str, Any]) -> dict[str, Any]:
        svc = await self._svc()
        hosts = list(args.get("hosts") or []) or None
        return self._action_result(await svc.bootstrap(hosts, ACTOR))

    async def _do_ray_up(self, args: Mapping[str, Any]) -> dict[str, Any]:
        svc = await self._svc()
        self._ray_started = True  # also when it fails half-way: a partial Ray needs teardown
        return self._action_result(await svc.ray_up(ACTOR))

    async def _do_tunnel(self, args: Mapping[str, Any]) -> dict[str, Any]:
        return self._action_result(await (await self._svc()).open_tunnel(ACTOR))

    async def _do_teardown(self, args: Mapping[str, Any]) -> dict[str, Any]:
        return self._action_result(await (await self._svc()).teardown(ACTOR))

    async def _do_preempt(self, args: Mapping[str, Any]) -> dict[str, Any]:
        svc = await self._svc()
        return self._action_result(await svc.preempt(args["host"], ACTOR))

    async def _do_recreate(self, args: Mapping[str, Any]) -> dict[str, Any]:
        return self._action_result(await (await self._svc()).recreate(args["host"], ACTOR))

    def _set_last(self, info: JobInfo) -> None:
        self._last_job = info.job_id
        self._submitted.append(info.job_id)
        self._observe_job(info)

    async def _do_submit(self, args: Mapping[str, Any]) -> dict[str, Any]:
        svc = await self._svc()
        spec = build_spec(args, self.config)
        info = await svc.submit(spec, ACTOR)
        self._set_last(info)
        result = to_jsonable(info)
        result["runtime_env"] = spec.display_runtime_env()
        if info.status == "FAILED":
            raise StepFailure(f"job {info.job_id} FAILED at submit: {info.message}", result)
        return result

    async def _do_relaunch_sweep(self, args: Mapping[str, Any]) -> dict[str, Any]:
        info = await (await self._svc()).relaunch_sweep(ACTOR)
        self._set_last(info)
        return to_jsonable(info)

    def _follow(self, job_id: str) -> str:
        seen = {job_id}
        while job_id in self._resubmitted:
            job_id = self._resubmitted[job_id]
            if job_id in seen:
                break
            seen.add(job_id)
        return job_id

    def _job_ref(self, args: Mapping[str, Any]) -> str:
        ref = args.get("job") or "last"
        if ref != "last":
            return self._follow(ref)
        if self._last_job is None:
            raise StepFailure(
                "`last`: no job was submitted (the submit step failed or was skipped)"
            )
        return self._follow(self._last_job)

    async def _do_wait_job(self, args: Mapping[str, Any]) -> dict[str, Any]:
        svc = await self._svc()
        target = args["status"]
        timeout = args.get("timeout")
        timeout = _DEFAULT_TIMEOUTS["wait-job"] if timeout is None else timeout
        deadline = time.monotonic() + timeout
        job_id = self._job_ref(args)
        ref = args.get("job") or "last"
        first_id = self._last_job if ref == "last" else ref
        last_error = ""
        status = ""
        while True:
            job_id = self._follow(job_id)
            try:
                async with asyncio.timeout(max(5.0, self._poll * 5)):
                    info = await svc.job_status(job_id)
                self._observe_job(info)
                status, last_error = info.status, ""
                # "RUNNING" means "has started": a short job may be done before we look.
                if status == target or (target == "RUNNING" and status == "SUCCEEDED"):
                    out = to_jsonable(info)
                    if job_id != first_id:
                        out["followed_from"] = first_id
                    return out
                if status in TERMINAL and not svc.recovery_status().active:
                    raise StepFailure(
                        f"job {job_id} ended {status}, expected {target}"
                        + (f": {info.message}" if info.message else ""),
                        to_jsonable(info),
                    )
            except (StepFailure, asyncio.CancelledError):
                raise
            except Exception as exc:  # the head may be down mid-recovery: keep polling
                last_error = f"{type(exc).__name__}: {exc}"
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                why = f"; last error: {last_error}" if last_error else ""
                raise StepFailure(
                    f"job {job_id} not {target} within {timeout:g}s (status {status or '?'}){why}",
                    {"job_id": job_id, "status": status},
                )
            await self._wait_wake(min(self._poll, remaining))

    async def _do_logs(self, args: Mapping[str, Any]) -> dict[str, Any]:
        svc = await self._svc()
        job_id = self._job_ref(args)
        text = await svc.job_logs(job_id)
        lines = text.splitlines()
        tail = args.get("tail") or 100
        return {"job_id": job_id, "total_lines": len(lines), "lines": lines[-tail:]}

    async def _do_stop_job(self, args: Mapping[str, Any]) -> dict[str, Any]:
        svc = await self._svc()
        return self._action_result(await svc.stop_job(self._job_ref(args), ACTOR))

    async def _do_recover(self, args: Mapping[str, Any]) -> dict[str, Any]:
        svc = await self._svc()
        timeout = args.get("timeout")
        timeout = _DEFAULT_TIMEOUTS["recover"] if timeout is None else timeout
        status: RecoveryStatus = await svc.recover(ACTOR, timeout)
        out: dict[str, Any] = to_jsonable(status)
        if status.result == "ok":
            return out
        if not status.result:
            raise StepFailure(f"recovery still running after {timeout:g}s", out)
        raise StepFailure(f"recovery {status.result}", out)

    async def _do_auto_recovery(self, args: Mapping[str, Any]) -> dict[str, Any]:
        svc = await self._svc()
        svc.set_auto_recovery(bool(args["enabled"]), ACTOR)
        return {"auto": bool(args["enabled"])}

    async def _do_wait_event(self, args: Mapping[str, Any]) -> dict[str, Any]:
        await self._svc()  # events only flow while services run
        kind, host = args["kind"], args.get("host")
        timeout = args.get("timeout")
        timeout = _DEFAULT_TIMEOUTS["wait-event"] if timeout is None else timeout
        deadline = time.monotonic() + timeout
        while True:
            with self._ev_lock:
                for i, ev in enumerate(self._events):
                    if i in self._consumed or ev.get("kind") != kind:
                        continue
                    if host is not None and ev.get("host") != host:
                        continue
                    self._consumed.add(i)
                    return dict(ev)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                where = f" on {host}" if host else ""
                raise StepFailure(f"no {kind!r} event{where} within {timeout:g}s")
            await self._wait_wake(min(self._poll, remaining))

    async def _do_status(self, args: Mapping[str, Any]) -> dict[str, Any]:
        return await collect_status(await self._svc())

    async def _do_sleep(self, args: Mapping[str, Any]) -> dict[str, Any]:
        await asyncio.sleep(args["seconds"])
        return {"slept_s": args["seconds"]}


# --------------------------------------------------------------------------------------------
# Entry point
# --------------------------------------------------------------------------------------------


def read_script(path: str, stdin: TextIO | None = None) -> tuple[str, str, Path]:
    """(text, display name, base dir for relative files). OSError if unreadable."""
    if path == "-":
        return (stdin or sys.stdin).read(), "<stdin>", Path.cwd()
    p = Path(path)
    return p.read_text(encoding="utf-8"), path, p.resolve().parent


def script_main(
    path: str,
    config: Config,
    *,
    services_factory: ServicesFactory | None = None,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
    stdin: TextIO | None = None,
    pod_control: PodControl | None = None,
) -> int:
    """Run a script; returns the exit code (0 ok, 1 step failed, 2 invalid, 130 interrupted)."""
    out = sys.stdout if stdout is None else stdout
    err = sys.stderr if stderr is None else stderr
    scrub = Scrubber(config)
    try:
        text, name, base_dir = read_script(path, stdin)
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        print(scrub.text(f"phantom: cannot read script {path!r}: {reason}"), file=err)
        return EXIT_INVALID
    try:
        script = parse_script(text, config, name=name, base_dir=base_dir)
    except ScriptError as exc:
        for issue in exc.issues:
            print(scrub.text(issue.render(exc.name)), file=err)
        print(
            f"phantom: {len(exc.issues)} problem(s) in {exc.name}; nothing was run "
            "(`phantom --script-help` prints the language reference)",
            file=err,
        )
        return EXIT_INVALID

    def lazy_factory(cfg: Config) -> ConsoleServices:
        # Only a step that needs the cluster pays for importing it (grpc, asyncssh, ray).
        return default_factory()(cfg)

    runner = ScriptRunner(
        script,
        config,
        services_factory=services_factory or lazy_factory,
        pod_control=pod_control or EmulatorPodControl(config),
        stdout=out,
        stderr=err,
    )
    return asyncio.run(runner.run())


if __name__ == "__main__":
    print(usage_text())
