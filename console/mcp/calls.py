"""One MCP tool call, from the agent's JSON to an ``ActionResult`` (ok, refused or failed,
the same result every front end gets): the tool must be a command the server offers, its
arguments must match the command's schema, the cluster must be able to (``refusal``, the
check every front end makes) and the operator must have allowed it (``Policy``). The JSON
then binds to the command's typed arguments (hosts resolved, event kinds and spec files
checked, its own cross-argument check) and the command runs (``execute``) with ``mcp`` as
the actor the journal names; a failure keeps its typed reason. Every call is journaled,
refused ones too. The resources are the commands that stand as documents, read the same way.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import jsonschema

from console.commands import (
    Command,
    CommandFailed,
    Front,
    GkeControl,
    PodControl,
    Started,
    all_commands,
    by_name,
    execute,
    offered,
)
from console.commands.kit.bind import BadArgument, Where, from_json
from console.commands.kit.feed import EventFeed
from console.commands.kit.params import Kind
from console.commands.kit.told import failure_sentence
from console.mcp.policy import Policy
from console.secrets import Scrubber
from console.services.model import ActionResult, JobInfo, Reason

if TYPE_CHECKING:
    from console.services.api import ConsoleServices, ServiceSettings

ACTOR = "mcp"
Args = Mapping[str, Any]


class McpSession:
    """What a command uses of its front end, for an agent's calls: the server's one set of
    services, and the last job an agent's call made (``last``)."""

    actor = ACTOR

    def __init__(self, services: ConsoleServices) -> None:
        self._services = services
        self.feed = EventFeed(lambda _obj: None, time.time)
        self.started: set[Started] = set()
        self.pod: PodControl | None = None  # the server drives a running cluster
        self.gke: GkeControl | None = None
        self.last_job: str | None = None

    @property
    def settings(self) -> ServiceSettings:
        return self._services.settings

    @property
    def poll_s(self) -> float:
        return self._services.settings.polling.client_s

    async def services(self) -> ConsoleServices:
        return self._services

    async def drop_services(self) -> None:
        return None

    async def wait(self, timeout: float) -> None:
        await asyncio.sleep(timeout)

    def made(self, info: JobInfo) -> None:
        self.last_job = info.job_id

    def tell(self, text: str) -> None:
        return None  # the agent reads the result

    def job_ref(self, ref: str | None) -> str:
        if not ref or ref == "last":
            if self.last_job is None:
                raise CommandFailed("no job given and none submitted through this server: give job")
            ref = self.last_job
        return self._services.successor(ref)


@dataclass(frozen=True)
class Document:
    """A command that stands as a document: an MCP resource."""

    uri: str
    name: str
    description: str
    command: Command[Any]


def documents() -> tuple[Document, ...]:
    return tuple(
        Document(f"phantom://{c.name}", c.name, c.document, c)
        for c in all_commands()
        if c.document and Front.MCP in c.fronts
    )


def _schema_problem(command: Command[Any], args: Args) -> str | None:
    """The first way ``args`` misses the command's schema, naming the argument."""
    validator = jsonschema.Draft202012Validator(command.input_schema())
    for error in sorted(validator.iter_errors(dict(args)), key=lambda e: list(e.path)):
        where = ".".join(str(p) for p in error.path)
        if error.validator == "required" or not where:
            return f"{command.name}: {error.message}"
        return f"{command.name}: argument {where!r}: {error.message}"
    return None


class Calls:
    """The server's dispatcher: ``await calls.call(name, arguments)`` -> ``ActionResult``."""

    def __init__(
        self,
        services: ConsoleServices,
        policy: Policy,
        scrub: Scrubber,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.services = services
        self.policy = policy
        self.scrub = scrub
        self.session = McpSession(services)
        self._clock = clock

    def tools(self) -> tuple[Command[Any], ...]:
        return offered(Front.MCP)

    async def call(self, name: str, arguments: Args | None) -> ActionResult:
        t0 = self._clock()
        args = dict(arguments or {})
        outcome = await self._outcome(name, args)
        await self._journal(name, args, outcome, self._clock() - t0)
        return outcome

    async def read(self, document: Document) -> dict[str, Any]:
        """A document's body: the command's result, or why there is none."""
        command = document.command
        result = await execute(command, self.session, command.make({}))
        return dict(result.data) if result.ok else {"error": failure_sentence(result)}

    async def _outcome(self, name: str, args: dict[str, Any]) -> ActionResult:
        command = by_name(name)
        if command is None or Front.MCP not in command.fronts:
            tools = ", ".join(c.name for c in self.tools())
            return ActionResult.refused(
                name, Reason.UNKNOWN_ACTION, f"unknown tool {name!r}; tools: {tools}"
            )
        why = command.refusal(self.services.capabilities)
        if why is not None:
            where = self.services.settings.cluster.provider
            return ActionResult.refused(
                name, Reason.UNSUPPORTED, f"{why}; this server drives provider {where!r}"
            )
        problem = _schema_problem(command, args)
        if problem is not None:
            return ActionResult.refused(name, Reason.BAD_INPUT, problem)
        why = self.policy.refusal(command)
        if why is not None:
            return ActionResult.refused(name, Reason.NOT_ALLOWED, why)
        try:
            typed = self._bind(command, args)
        except BadArgument as exc:
            return ActionResult.refused(name, Reason.BAD_INPUT, str(exc))
        result = await execute(command, self.session, typed)
        if result.ok:
            return ActionResult.done(name, f"{name}: ok", result.data)
        return ActionResult(
            name, False, message=failure_sentence(result), data=result.data, reason=result.reason
        )

    def _bind(self, command: Command[Any], args: Args) -> Any:
        """The agent's JSON (it matched the schema) as the command's typed arguments."""
        settings = self.services.settings
        where = Where(settings, base_dir=Path.cwd(), hosts=settings.cluster.hosts)
        values: dict[str, Any] = {}
        for arg in command.params:
            if arg.dest in args:
                label = f"{command.words}: {arg.name if arg.is_flag else arg.meta()}"
                values[arg.dest] = from_json(label, arg, args[arg.dest], where)
            elif arg.kind == Kind.JOB and self.session.last_job is None:
                raise BadArgument(
                    f"{command.name}: no job given and none submitted through this server: give job"
                )
        typed = command.make(values)
        problem = command.check(typed, where) if command.check is not None else ""
        if problem:
            raise BadArgument(problem)
        return typed

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
