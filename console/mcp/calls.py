"""One MCP tool call, from the agent's JSON to an ``ActionResult`` (ok, refused or failed,
the same result every front end gets): the tool must be a command the server offers, its
arguments must match the command's schema, the cluster must be able to (``refusal``, the
check every front end makes) and the operator must have allowed it (``Policy``). The JSON
then binds to the command's typed arguments (hosts resolved, event kinds and spec files
checked, its own cross-argument check) and the command runs (``execute``) with ``mcp`` as
the actor the journal names; a failure keeps its typed reason. Every call is journaled,
refused ones too. The resources are the commands that stand as documents, read the same way.

Over a fleet every tool and resource of a command that touches a cluster takes ``cluster``
(``kit.clusters.CLUSTER``, in the command's schema): a fleet of one needs none; on a fleet
of several a read without one reads every cluster side by side (``{"clusters": [...]}``, one
entry per cluster, each naming it; the ledger's is one answer, each cluster's and the
fleet's total: ``Command.fleet``), while an act without one is refused naming the
clusters. Each cluster has its own session (its ``last``) and journal; a call is journaled
on the clusters it concerned.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence
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
    execute_fleet,
    offered,
)
from console.commands.kit.bind import BadArgument, Where, from_json
from console.commands.kit.clusters import CLUSTER, named, unchosen
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


@dataclass(frozen=True)
class Answer:
    """A call's outcome, and the cluster it ran on (None: every cluster, or none)."""

    result: ActionResult
    cluster: str | None = None


class Calls:
    """The server's dispatcher: ``await calls.call(name, arguments)`` -> ``ActionResult``.

    ``services``: one cluster's, or a fleet's by cluster name (in the fleet's order;
    ``source`` names the config they come from)."""

    def __init__(
        self,
        services: ConsoleServices | Mapping[str, ConsoleServices],
        policy: Policy,
        scrub: Scrubber,
        clock: Callable[[], float] = time.monotonic,
        source: str = "the config",
    ) -> None:
        self.clusters: dict[str, ConsoleServices] = (
            dict(services)
            if isinstance(services, Mapping)
            else {services.settings.cluster.name or services.settings.cluster.node_name: services}
        )
        self.policy = policy
        self.scrub = scrub
        self.source = source
        self.sessions = {n: McpSession(s) for n, s in self.clusters.items()}
        self._clock = clock

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self.clusters)

    def tools(self) -> tuple[Command[Any], ...]:
        return offered(Front.MCP)

    async def call(self, name: str, arguments: Args | None) -> ActionResult:
        return (await self.answer(name, arguments)).result

    async def answer(self, name: str, arguments: Args | None) -> Answer:
        """The call's outcome and the cluster it ran on; journaled on each cluster it
        concerned."""
        t0 = self._clock()
        args = dict(arguments or {})
        answer, concerned = await self._outcome(name, args)
        elapsed = self._clock() - t0
        for cluster in concerned:
            await self._journal(cluster, name, args, answer.result, elapsed)
        return answer

    def pick(self, command: Command[Any], given: str | None) -> list[str]:
        """The clusters a call of ``command`` runs on: the one ``given`` (it must be there),
        a fleet of one's, or for a read on a fleet of several every cluster. An act with none
        given on a fleet of several: ``BadArgument`` naming the clusters."""
        if given is not None:
            return [named(f"{command.name}: argument 'cluster'", given, self.names, self.source)]
        if len(self.names) == 1 or not command.on_cluster:
            return [self.names[0]]
        if command.acts:
            fix = 'give "cluster": one of them (reads without one read every cluster)'
            raise BadArgument(unchosen(command.name, self.names, self.source, fix))
        return list(self.names)

    async def read(self, document: Document, cluster: str | None = None) -> dict[str, Any]:
        """A document's body: the command's result, or why there is none; on a fleet of
        several with no ``cluster``, every cluster's (``{"clusters": [...]}``). An unknown
        ``cluster``: ``BadArgument`` naming the clusters."""
        targets = self.pick(document.command, cluster)

        async def one(name: str) -> dict[str, Any]:
            command = document.command
            result = await execute(command, self.sessions[name], command.make({}))
            return dict(result.data) if result.ok else {"error": failure_sentence(result)}

        if len(targets) == 1:
            return await one(targets[0])
        command = document.command
        if command.fleet is not None:  # one body for the fleet (the ledger and its total)
            sessions = {n: self.sessions[n] for n in targets}
            result = await execute_fleet(command, sessions, command.make({}))
            return dict(result.data) if result.ok else {"error": failure_sentence(result)}
        bodies = await asyncio.gather(*(one(n) for n in targets))
        return {"clusters": [{"cluster": n, **b} for n, b in zip(targets, bodies, strict=True)]}

    async def _outcome(self, name: str, args: dict[str, Any]) -> tuple[Answer, Sequence[str]]:
        command = by_name(name)
        if command is None or Front.MCP not in command.fronts:
            tools = ", ".join(c.name for c in self.tools())
            refused = ActionResult.refused(
                name, Reason.UNKNOWN_ACTION, f"unknown tool {name!r}; tools: {tools}"
            )
            return Answer(refused), self.names
        given = args.get(CLUSTER.dest) if command.on_cluster else None
        if given is not None and not isinstance(given, str):
            problem = _schema_problem(command, args) or f"{name}: argument 'cluster': a name"
            return Answer(ActionResult.refused(name, Reason.BAD_INPUT, problem)), self.names
        try:
            targets = self.pick(command, given)
        except BadArgument as exc:
            return Answer(ActionResult.refused(name, Reason.BAD_INPUT, str(exc))), self.names
        if len(targets) == 1:
            return Answer(await self._one(command, targets[0], args), targets[0]), targets
        if command.fleet is not None:  # one answer for the fleet (the ledger and its total)
            return Answer(await self._fleet(command, targets, args)), targets
        results = await asyncio.gather(*(self._one(command, n, args) for n in targets))
        return Answer(_fleet_result(name, targets, results)), targets

    async def _one(self, command: Command[Any], cluster: str, args: dict[str, Any]) -> ActionResult:
        """The call on one cluster."""
        services = self.clusters[cluster]
        why = command.refusal(services.capabilities)
        if why is not None:
            where = services.settings.cluster.words
            return ActionResult.refused(
                command.name, Reason.UNSUPPORTED, f"{why}; {where} is not one"
            )
        session = self.sessions[cluster]
        typed = self._checked(command, args, session)
        if isinstance(typed, ActionResult):
            return typed
        return _answered(command.name, await execute(command, session, typed), "ok")

    async def _fleet(
        self, command: Command[Any], clusters: Sequence[str], args: dict[str, Any]
    ) -> ActionResult:
        """A read with one answer for the fleet (``Command.fleet``): checked as a call on one
        cluster is, its arguments bound on the first (a read's take no cluster's values)."""
        sessions = {n: self.sessions[n] for n in clusters}
        typed = self._checked(command, args, sessions[clusters[0]])
        if isinstance(typed, ActionResult):
            return typed
        result = await execute_fleet(command, sessions, typed)
        return _answered(command.name, result, f"ok on {len(clusters)} clusters")

    def _checked(self, command: Command[Any], args: Args, session: McpSession) -> Any:
        """The call's typed arguments, or its refusal (the schema, the policy, the binding)."""
        name = command.name
        problem = _schema_problem(command, args)
        if problem is not None:
            return ActionResult.refused(name, Reason.BAD_INPUT, problem)
        why = self.policy.refusal(command)
        if why is not None:
            return ActionResult.refused(name, Reason.NOT_ALLOWED, why)
        try:
            return self._bind(command, args, session)
        except BadArgument as exc:
            return ActionResult.refused(name, Reason.BAD_INPUT, str(exc))

    def _bind(self, command: Command[Any], args: Args, session: McpSession) -> Any:
        """The agent's JSON (it matched the schema) as the command's typed arguments, bound
        on the cluster of ``session``."""
        settings = session.settings
        where = Where(settings, base_dir=Path.cwd(), hosts=settings.cluster.hosts)
        values: dict[str, Any] = {}
        for arg in command.params:
            if arg.dest in args:
                label = f"{command.words}: {arg.name if arg.is_flag else arg.meta()}"
                values[arg.dest] = from_json(label, arg, args[arg.dest], where)
            elif arg.kind == Kind.JOB and session.last_job is None:
                raise BadArgument(
                    f"{command.name}: no job given and none submitted through this server: give job"
                )
        typed = command.make(values)
        problem = command.check(typed, where) if command.check is not None else ""
        if problem:
            raise BadArgument(problem)
        return typed

    async def _journal(
        self, cluster: str, name: str, args: Args, outcome: ActionResult, elapsed: float
    ) -> None:
        """One journal row per call on each cluster it concerned, as a TUI action is
        journaled: who (mcp), the tool, its arguments (secrets masked), the outcome. A
        journal that fails does not fail the call."""
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
            await self.clusters[cluster].journal_call(result, ACTOR)
        except Exception:  # the record is not the action: the agent still gets its answer
            return


def _answered(name: str, result: Any, ok: str) -> ActionResult:
    """An executed command's result as the tool's answer."""
    if result.ok:
        return ActionResult.done(name, f"{name}: {ok}", result.data)
    return ActionResult(
        name, False, message=failure_sentence(result), data=result.data, reason=result.reason
    )


def _fleet_result(
    name: str, clusters: Sequence[str], results: Sequence[ActionResult]
) -> ActionResult:
    """A read of every cluster: one entry per cluster (its outcome, reason, message and
    result); ok when every cluster answered, else failed naming those that did not."""
    entries = [
        {
            "cluster": cluster,
            "outcome": str(r.verdict),
            "reason": str(r.reason),
            "message": r.message,
            "result": dict(r.data),
        }
        for cluster, r in zip(clusters, results, strict=True)
    ]
    data = {"clusters": entries}
    failed = [c for c, r in zip(clusters, results, strict=True) if not r.ok]
    if not failed:
        return ActionResult.done(name, f"{name}: ok on {len(clusters)} clusters", data)
    return ActionResult.failed(
        name,
        Reason.STEP_FAILED,
        f"{name}: {len(failed)} of {len(clusters)} clusters did not answer: {', '.join(failed)} "
        "(each entry says why)",
        data,
    )
