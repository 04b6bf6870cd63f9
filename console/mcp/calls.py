"""One MCP tool call, from the agent's JSON to an ``ActionResult`` (ok, refused or failed,
the same result every front end gets): the tool must be a row of the table that names MCP,
its arguments must match the row's schema, the cluster must be able to (``refusal_for``,
the check every front end makes) and the operator must have allowed it (``Policy``). A row
with a script verb then runs as that script line would: the script's parser checks it
(hosts, specs, runtime envs) and the script's handler runs it, with ``mcp`` as the actor
the journal names. Every call is journaled, refused ones too."""

from __future__ import annotations

import asyncio
import json
import shlex
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

import jsonschema

from console.config import Config
from console.mcp.policy import Policy
from console.mcp.reads import READS
from console.script.feed import EventFeed
from console.script.handlers import HANDLERS, StepFailure
from console.script.parse import ScriptError, parse_script
from console.script.told import error_sentence
from console.secrets import Scrubber
from console.services.action_table import (
    BY_NAME,
    Action,
    Front,
    refusal_for,
)
from console.services.model import ActionResult, JobInfo, Reason
from console.wiring.settings import polling

if TYPE_CHECKING:
    from console.services.api import ConsoleServices

ACTOR = "mcp"
Args = Mapping[str, Any]


class _NoEmulatorControl:
    """MCP offers no `pod up|down` / `gke up|down`: the server drives a running cluster."""

    async def is_up(self) -> bool:
        return True

    async def up(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        raise StepFailure("not offered over MCP")

    async def down(self) -> bool:
        raise StepFailure("not offered over MCP")


class McpRun:
    """What a script handler uses of its run (``script.handlers.Run``), for an agent's calls:
    the server's one set of services, and the last job an agent's call made (``last``)."""

    actor = ACTOR

    def __init__(self, config: Config, services: ConsoleServices) -> None:
        self.config = config
        self._services = services
        self.pod: Any = _NoEmulatorControl()
        self.gke: Any = _NoEmulatorControl()
        self.feed = EventFeed(lambda _obj: None, time.time)
        self.poll_s = polling(config).client_s
        self.last_job: str | None = None
        self.pod_started = self.gke_started = self.ray_started = False

    async def services(self) -> ConsoleServices:
        return self._services

    async def drop_services(self) -> None:
        return None

    async def wait(self, timeout: float) -> None:
        await asyncio.sleep(timeout)

    def set_last(self, info: JobInfo) -> None:
        self.last_job = info.job_id

    def job_ref(self, args: Args) -> str:
        ref = args.get("job") or "last"
        if ref == "last":
            if self.last_job is None:
                raise StepFailure("no job given and none submitted through this server: give job")
            ref = self.last_job
        return self._services.successor(ref)


def script_line(row: Action, args: Args) -> str:
    """The script line an agent's arguments stand for (the parser checks it as it would)."""
    assert row.script is not None
    words = row.script.split()
    for arg in row.positionals:
        value = args.get(arg.dest)
        if value is None:
            continue
        words += [_word(arg.kind, v) for v in value] if arg.variadic else [_word(arg.kind, value)]
    for flag in row.flags:
        value = args.get(flag.dest)
        if value is None:
            continue
        if flag.kind == "bool":
            words += [flag.name] if value else []
            continue
        for one in value if flag.repeat else [value]:
            words += [flag.name, _word(flag.kind, one)]
    return shlex.join(words)


def _word(kind: str, value: Any) -> str:
    if kind == "onoff":
        return "on" if value else "off"
    if kind == "runtime_env":
        return json.dumps(value)
    return str(value)


def _schema_problem(row: Action, args: Args) -> str | None:
    """The first way ``args`` misses the row's schema, naming the argument."""
    validator = jsonschema.Draft202012Validator(row.input_schema())
    for error in sorted(validator.iter_errors(dict(args)), key=lambda e: list(e.path)):
        where = ".".join(str(p) for p in error.path)
        if error.validator == "required" or not where:
            return f"{row.name}: {error.message}"
        return f"{row.name}: argument {where!r}: {error.message}"
    return None


class Calls:
    """The server's dispatcher: ``await calls.call(name, arguments)`` -> ``ActionResult``."""

    def __init__(
        self,
        config: Config,
        services: ConsoleServices,
        policy: Policy,
        scrub: Scrubber,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config
        self.services = services
        self.policy = policy
        self.scrub = scrub
        self.run = McpRun(config, services)
        self._clock = clock

    def tools(self) -> list[Action]:
        return [a for a in BY_NAME.values() if Front.MCP in a.fronts]

    async def call(self, name: str, arguments: Args | None) -> ActionResult:
        t0 = self._clock()
        args = dict(arguments or {})
        outcome = await self._outcome(name, args)
        await self._journal(name, args, outcome, self._clock() - t0)
        return outcome

    async def _outcome(self, name: str, args: dict[str, Any]) -> ActionResult:
        row = BY_NAME.get(name)
        if row is None or Front.MCP not in row.fronts:
            tools = ", ".join(a.name for a in self.tools())
            return ActionResult.refused(
                name, Reason.UNKNOWN_ACTION, f"unknown tool {name!r}; tools: {tools}"
            )
        why = refusal_for(row, self.services.capabilities)
        if why is not None:
            where = self.config.cluster.provider
            return ActionResult.refused(
                name, Reason.UNSUPPORTED, f"{why}; this server drives provider {where!r}"
            )
        problem = _schema_problem(row, args)
        if problem is not None:
            return ActionResult.refused(name, Reason.BAD_INPUT, problem)
        why = self.policy.refusal(row)
        if why is not None:
            return ActionResult.refused(name, Reason.NOT_ALLOWED, why)
        try:
            data = await self._run(row, args)
        except _BadLine as exc:
            return ActionResult.refused(name, Reason.BAD_INPUT, str(exc))
        except StepFailure as exc:
            return ActionResult.failed(name, Reason.STEP_FAILED, str(exc), exc.result)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a service error fails this call, never the server
            return ActionResult.failed(name, Reason.ERROR, error_sentence(exc))
        return ActionResult.done(name, f"{name}: ok", data)

    async def _run(self, row: Action, args: dict[str, Any]) -> dict[str, Any]:
        if row.script is None:
            read: Callable[[ConsoleServices, Args], Awaitable[dict[str, Any]]] = READS[row.name]
            return await read(self.services, args)
        has_job = any(a.dest == "job" for a in row.positionals)
        if has_job and not args.get("job") and self.run.last_job:
            args = {**args, "job": self.run.last_job}
        try:
            script = parse_script(script_line(row, args), self.config, name="<mcp>")
        except ScriptError as exc:
            raise _BadLine("; ".join(i.message for i in exc.issues)) from None
        (step,) = script.lines
        return await HANDLERS[step.action](self.run, step.args)

    async def _journal(self, name: str, args: Args, outcome: ActionResult, elapsed: float) -> None:
        """One journal row per call, as a TUI action is journaled: who (mcp), the tool, its
        arguments (secrets masked), the outcome. A journal that fails does not fail the call."""
        shown = self.scrub.data(dict(args))
        result = ActionResult(
            action=f"mcp:{name}",
            ok=outcome.ok,
            elapsed_s=elapsed,
            message=self.scrub.text(f"mcp {name}: {outcome.verdict} ({outcome.reason})"),
            data={
                "tool": name,
                "args": shown,
                "outcome": str(outcome.verdict),
                "reason": str(outcome.reason),
            },
        )
        try:
            await self.services.journal_call(result, ACTOR)
        except Exception:  # the record is not the action: the agent still gets its answer
            return


class _BadLine(ValueError):
    pass
