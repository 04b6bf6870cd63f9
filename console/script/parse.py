"""Parsing and static validation of a script: the whole script is checked before anything
runs, and every problem is reported with its line (``ScriptError``), not just the first.

A line's words bind to its command's arguments (``console.commands.kit.bind``: every value
checked by its kind); a relative ``--runtime-env`` or ``--spec`` file is resolved against the
script's directory; host references are checked against ``cluster.hosts`` (or the last
``pod up --hosts N``); ``last`` must follow a line that submits; and each command's own
cross-argument check runs (a submit's spec, a ``workload create``'s ``WorkloadSpec``,
including, where this machine can tell, ``path_exists``, that its checkpoint exists).
"""

from __future__ import annotations

import difflib
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from console.commands import Command
from console.commands.kit.bind import BadArgument, PathExists, Where, from_text, parse_seconds
from console.script.language import ACTIONS, CONTINUE_FLAG, TWO_WORD, Arg, Verb
from console.services.api import UnbuiltServices

__all__ = ["ScriptError", "ScriptLine", "parse_script", "parse_seconds"]

# shlex is pure Python: a megabyte line would take seconds to reject. No action needs more.
MAX_LINE_CHARS = 16_384


@dataclass(frozen=True)
class ScriptLine:
    line: int
    action: str  # the verb
    args: Mapping[str, Any]  # the values bound (what the line gave, checked)
    continue_on_error: bool = False
    text: str = ""
    always: bool = False  # after `finally`: runs even when an earlier step failed
    command: Command[Any] | None = None


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


_ArgError = BadArgument


@dataclass
class _Ctx:
    services: UnbuiltServices
    where: Where
    job_lines: list[int] = field(default_factory=list)
    continue_on_error: bool = False
    finally_line: int | None = None


def parse_script(
    text: str,
    services: UnbuiltServices,
    *,
    name: str = "<script>",
    base_dir: Path | None = None,
    path_exists: PathExists | None = None,
) -> Script:
    """Parse and validate the whole script; raise ScriptError with every problem found.

    ``services``: the ones the script will run against, not built yet (their settings and
    capabilities). ``path_exists(uri)`` tells whether a checkpoint exists (None: cannot tell
    here)."""
    settings = services.settings
    where = Where(
        settings,
        base_dir=base_dir or Path.cwd(),
        hosts=settings.cluster.hosts,
        path_exists=path_exists,
    )
    ctx = _Ctx(services=services, where=where)
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
    _check_provider(adef, ctx.services)
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
    cont = cont or ctx.continue_on_error or always
    return ScriptLine(lineno, name, args, cont, text, always, adef.command)


def _check_provider(adef: Verb, services: UnbuiltServices) -> None:
    """An action the configured cluster cannot do (what its backend declares) is refused:
    another kind of cluster's verbs, and emulator verbs on a real one."""
    if adef.command is None:  # a directive: every cluster
        return
    why = adef.command.refusal(services.capabilities)
    if why is None:
        return
    raise _ArgError(f"{why}; {services.drives()}")


def _unknown_action(name: str) -> str:
    names = sorted({a.split(" ")[0] for a in ACTIONS} | set(ACTIONS))
    close = difflib.get_close_matches(name, names, n=1, cutoff=0.5)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return f"unknown action {name!r}{hint} (actions: {', '.join(sorted(ACTIONS))})"


def _bind(adef: Verb, tokens: list[str], ctx: _Ctx) -> tuple[dict[str, Any], bool]:
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


def _bind_positionals(adef: Verb, given: list[str], args: dict[str, Any], ctx: _Ctx) -> None:
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
                args[p.dest] = None
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


def _unknown_flag(adef: Verb, flag: str) -> str:
    known = [f.name for f in adef.flags] + [CONTINUE_FLAG.name]
    close = difflib.get_close_matches(flag, known, n=1, cutoff=0.5)
    hint = f"; did you mean {close[0]}?" if close else ""
    return f"{adef.name}: unknown flag {flag}{hint} (usage: {adef.usage()})"


def _convert(adef: Verb, arg: Arg, value: str, ctx: _Ctx) -> Any:
    label = f"{adef.name}: {arg.name if arg.is_flag else arg.meta()}"
    return from_text(label, arg, value, ctx.where)


def _check_semantics(adef: Verb, args: dict[str, Any], lineno: int, ctx: _Ctx) -> None:
    """Cross-argument and cross-line checks: `last`, the pod's size, the command's own."""
    if adef.name == "pod up" and args.get("hosts") is not None:
        ctx.where.hosts = int(args["hosts"])
    if "job" in args:
        ref = args["job"] or "last"
        args["job"] = ref
        if ref == "last" and not ctx.job_lines:
            raise _ArgError(
                f"{adef.name}: `last` refers to the job of an earlier submit or relaunch-sweep "
                "line, and there is none before this line; give a job id or submit first"
            )
    command = adef.command
    if command is not None and command.check is not None:
        problem = command.check(command.make(args), ctx.where)
        if problem:
            raise _ArgError(problem)
