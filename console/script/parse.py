"""Parsing and static validation of a script: the whole script is checked before anything
runs, and every problem is reported with its line (``ScriptError``), not just the first.

A line's words bind to its command's arguments (``console.commands.kit.bind``: every value
checked by its kind); a relative ``--runtime-env`` or ``--spec`` file is resolved against the
script's directory; host references are checked against ``cluster.hosts`` (or the last
``pod up --hosts N``); ``last`` must follow a line that submits; and each command's own
cross-argument check runs (a submit's spec, a ``workload create``'s ``WorkloadSpec``,
including, where this machine can tell, ``path_exists``, that its checkpoint exists).

Over a fleet each line is checked against the cluster it acts on (``use NAME`` or its own
``--cluster NAME``): that cluster's capabilities, hosts and checkpoints; ``last`` refers to
an earlier submit on the same cluster. A name not in the config, or a line that touches a
cluster when a fleet of several has none chosen, is a problem of its line; but a read with
one answer for the fleet (``Command.fleet``: ``ledger``) then reads every cluster.
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
from console.commands.kit.clusters import named, unchosen
from console.script.language import ACTIONS, CLUSTER_FLAG, CONTINUE_FLAG, TWO_WORD, Arg, Verb
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
    cluster: str = ""  # the cluster it acts on ("": a line that touches none, or all)
    fleet: bool = False  # it reads every cluster at once (``Command.fleet``: the ledger)


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
class _Target:
    """What the check knows of one cluster: its services (not built), where its lines'
    arguments bind, and its lines that submit (what `last` may refer to)."""

    services: UnbuiltServices
    where: Where
    job_lines: list[int] = field(default_factory=list)


@dataclass
class _Ctx:
    targets: dict[str, _Target]
    source: str  # what names the clusters (the config), for messages
    chosen: str | None  # the cluster of the lines from here on (None: none chosen)
    bad_use: bool = False  # a `use` named no cluster: the lines after it are not checked
    line_cluster: str | None = None  # the cluster of the line being checked
    continue_on_error: bool = False
    finally_line: int | None = None

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self.targets)

    @property
    def any_where(self) -> Where:
        """Where a line that touches no cluster binds (a directive's, `sleep`'s words)."""
        return next(iter(self.targets.values())).where


Clusters = Mapping[str, UnbuiltServices]


def parse_script(
    text: str,
    services: UnbuiltServices | Clusters,
    *,
    name: str = "<script>",
    base_dir: Path | None = None,
    path_exists: PathExists | Mapping[str, PathExists | None] | None = None,
    cluster: str | None = None,
    source: str = "the config",
) -> Script:
    """Parse and validate the whole script; raise ScriptError with every problem found.

    ``services``: the ones the script will run against, not built yet (their settings and
    capabilities): one cluster's, or a fleet's by cluster name (``source`` names the config
    they come from, ``cluster`` the one chosen before the first ``use``; a fleet of one has
    its one chosen). ``path_exists(uri)`` tells whether a checkpoint exists (None: cannot
    tell here), for every cluster or by name."""
    if isinstance(services, UnbuiltServices):  # a lone cluster: by the name it goes by
        identity = services.settings.cluster
        fleet = {identity.name or identity.node_name: services}
    else:
        fleet = dict(services)
    targets: dict[str, _Target] = {}
    for cluster_name, unbuilt in fleet.items():
        probe = path_exists.get(cluster_name) if isinstance(path_exists, Mapping) else path_exists
        where = Where(
            unbuilt.settings,
            base_dir=base_dir or Path.cwd(),
            hosts=unbuilt.settings.cluster.hosts,
            path_exists=probe,
        )
        targets[cluster_name] = _Target(unbuilt, where)
    if cluster is not None:
        try:
            named("--cluster", cluster, tuple(targets), source)
        except _ArgError as exc:
            raise ScriptError(name, [ScriptIssue(0, str(exc))]) from None
    chosen = cluster if cluster is not None else next(iter(targets)) if len(targets) == 1 else None
    ctx = _Ctx(targets=targets, source=source, chosen=chosen)
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
        ctx.line_cluster = None
        try:
            step = _parse_line(lineno, tokens, ctx, shlex.join(tokens))
        except _ArgError as exc:
            issues.append(ScriptIssue(lineno, str(exc)))
            if tokens[0] in ("submit", "relaunch-sweep") or tokens[:2] == ["workload", "create"]:
                # so `last` below is not a second, bogus error
                on = [ctx.line_cluster] if ctx.line_cluster is not None else list(ctx.targets)
                for cluster_name in on:
                    ctx.targets[cluster_name].job_lines.append(lineno)
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
    rest, given = _own_cluster(adef, rest)
    command = adef.command
    if command is None or not command.on_cluster:  # a directive, `sleep`: no cluster
        if given is not None:
            raise _ArgError(f"{adef.name}: --cluster: {adef.name} acts on no cluster")
        args, cont = _bind(adef, rest, ctx.any_where)
        if name == "use":
            ctx.bad_use = False
            ctx.chosen = None
            try:
                ctx.chosen = named("use", args["cluster"], ctx.names, ctx.source)
            except _ArgError:
                ctx.bad_use = True  # one problem: the lines after it are not checked
                raise
            return None
        if name == "set":
            ctx.continue_on_error = args["enabled"]
            return None
        if name == "finally":
            if ctx.finally_line is not None:
                raise _ArgError(f"finally: already started on line {ctx.finally_line}")
            ctx.finally_line = lineno
            return None
        cluster = ""  # `sleep`: its words bind, and its check runs, as on the first cluster
        target = next(iter(ctx.targets.values()))
    else:
        if given is not None:
            cluster = named(f"{adef.name}: --cluster", given, ctx.names, ctx.source)
        elif ctx.chosen is not None:
            cluster = ctx.chosen
        elif ctx.bad_use:
            return None  # after a `use` that named no cluster (its line says so)
        elif command is not None and command.fleet is not None:
            # a read with one answer for the fleet (the ledger: each cluster's and the total)
            args, cont = _bind(adef, rest, ctx.any_where)
            cont = cont or ctx.continue_on_error or ctx.finally_line is not None
            always = ctx.finally_line is not None
            return ScriptLine(lineno, name, args, cont, text, always, command, fleet=True)
        else:
            raise _ArgError(
                unchosen(
                    adef.name,
                    ctx.names,
                    ctx.source,
                    "put `use NAME` before this line, or give the line --cluster NAME",
                )
            )
        ctx.line_cluster = cluster
        target = ctx.targets[cluster]
        _check_provider(adef, target.services)
        args, cont = _bind(adef, rest, target.where)
    _check_semantics(adef, args, lineno, target)
    if adef.sets_job:
        target.job_lines.append(lineno)
    always = ctx.finally_line is not None
    cont = cont or ctx.continue_on_error or always
    return ScriptLine(lineno, name, args, cont, text, always, adef.command, cluster)


def _own_cluster(adef: Verb, tokens: list[str]) -> tuple[list[str], str | None]:
    """The line's words without its ``--cluster NAME`` (or ``--cluster=NAME``), and NAME."""
    flag = CLUSTER_FLAG.name
    rest: list[str] = []
    given: str | None = None
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        head, eq, inline = tok.partition("=")
        if head != flag:
            rest.append(tok)
            i += 1
            continue
        if given is not None:
            raise _ArgError(f"{adef.name}: {flag} given twice")
        if eq:
            value = inline
        elif i + 1 < len(tokens):
            value = tokens[i + 1]
            i += 1
        else:
            value = ""
        if not value:
            raise _ArgError(f"{adef.name}: {flag} needs a value NAME (a [[clusters]] name)")
        given = value
        i += 1
    return rest, given


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


def _bind(adef: Verb, tokens: list[str], where: Where) -> tuple[dict[str, Any], bool]:
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
            converted = _convert(adef, flag, value, where)
            if flag.repeat:
                args.setdefault(flag.dest, []).append(converted)
            else:
                args[flag.dest] = converted
            i += 1
            continue
        positionals.append(tok)
        i += 1
    _bind_positionals(adef, positionals, args, where)
    return args, cont


def _bind_positionals(adef: Verb, given: list[str], args: dict[str, Any], where: Where) -> None:
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
            args[p.dest] = [_convert(adef, p, v, where) for v in it]
        elif p.optional:
            if spare > 0:
                args[p.dest] = _convert(adef, p, next(it), where)
                spare -= 1
            else:
                args[p.dest] = None
        else:
            token = next(it)
            if n_optional and len(given) == len(required) and not token.isupper():
                # `wait-job last`: the job was given, the STATUS after it is what's missing
                try:
                    args[p.dest] = _convert(adef, p, token, where)
                except _ArgError:
                    raise _ArgError(
                        f"{adef.name}: missing argument {p.meta()} after {token!r} "
                        f"(usage: {adef.usage()})"
                    ) from None
            else:
                args[p.dest] = _convert(adef, p, token, where)


def _unknown_flag(adef: Verb, flag: str) -> str:
    known = [f.name for f in adef.flags] + [CONTINUE_FLAG.name, CLUSTER_FLAG.name]
    close = difflib.get_close_matches(flag, known, n=1, cutoff=0.5)
    hint = f"; did you mean {close[0]}?" if close else ""
    return f"{adef.name}: unknown flag {flag}{hint} (usage: {adef.usage()})"


def _convert(adef: Verb, arg: Arg, value: str, where: Where) -> Any:
    label = f"{adef.name}: {arg.name if arg.is_flag else arg.meta()}"
    return from_text(label, arg, value, where)


def _check_semantics(adef: Verb, args: dict[str, Any], lineno: int, target: _Target) -> None:
    """Cross-argument and cross-line checks on the line's cluster: `last`, the pod's size,
    the command's own."""
    if adef.name == "pod up" and args.get("hosts") is not None:
        target.where.hosts = int(args["hosts"])
    if "job" in args:
        ref = args["job"] or "last"
        args["job"] = ref
        if ref == "last" and not target.job_lines:
            raise _ArgError(
                f"{adef.name}: `last` refers to the job of an earlier submit or relaunch-sweep "
                "line on this cluster, and there is none before this line; give a job id or "
                "submit first"
            )
    command = adef.command
    if command is not None and command.check is not None:
        problem = command.check(command.make(args), target.where)
        if problem:
            raise _ArgError(problem)
