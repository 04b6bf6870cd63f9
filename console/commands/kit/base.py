"""What a command is, what it may use of the front end that runs it, and the one executor.

A ``Command`` says once: its name (an MCP tool's), a line for people and agents, its typed
arguments (``Args``, see ``params``), what it does to the cluster (``Effect``), the
capability it needs, the front ends that offer it, its confirmation text and its ``run``.
A front end adapts it and nothing more: it binds arguments its own way (a script line, an
agent's JSON, the row a screen has highlighted), asks ``refusal`` whether this cluster can,
and calls ``execute``, which runs the command and turns every way it can end into one
``ActionResult`` with a typed ``Reason``.

``Session`` is what ``run`` may use of the front end: the services (a script builds them
at its first step that needs the cluster), who acts, the jobs it made (``last``), what it
heard from the services, what it started, and a way to wait.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar, cast

from console.commands.kit.clusters import CLUSTER
from console.commands.kit.params import Arg, args_of, input_schema
from console.commands.kit.told import error_sentence
from console.config import ConfigError
from console.services.capabilities import Capability, refusal
from console.services.jobs.spec import SpecError
from console.services.model import ActionResult, JobInfo, PodSnapshot, Reason, to_jsonable

if TYPE_CHECKING:
    from console.commands.kit.bind import Where
    from console.commands.kit.feed import EventFeed
    from console.services.api import ConsoleServices, ServiceSettings

A = TypeVar("A")

ASKS = "(asks to confirm)"  # a confirming command's help ends so (``Command.help``)


class Effect(StrEnum):
    """What a command does to the cluster: an agent may read unless allowed more."""

    READS = "reads"
    ACTS = "acts"
    DESTROYS = "destroys"  # stops or deletes what runs: its own allow on MCP


class Front(StrEnum):
    """Who offers a command."""

    TUI = "tui"  # the console's screens: a key, the palette (the TUI's keymap says which)
    SCRIPT = "script"  # a verb of `phantom --script`
    MCP = "mcp"  # a tool of `phantom mcp`


class Started(StrEnum):
    """What a session brought up, so that an interrupt takes down only that."""

    POD = "pod"
    GKE = "gke"
    RAY = "ray"


class CommandFailed(Exception):
    """A command did not reach its goal; ``data`` is its partial result."""

    def __init__(
        self,
        message: str,
        data: Mapping[str, Any] | None = None,
        reason: Reason = Reason.STEP_FAILED,
    ) -> None:
        super().__init__(message)
        self.data = dict(data or {})
        self.reason = reason


class EmulatorControl(Protocol):
    """An emulator's own client, for the commands that bring one up or down."""

    async def is_up(self) -> bool: ...

    async def down(self) -> bool:
        """Stop it and every process it runs; True if one was running."""


class PodControl(EmulatorControl, Protocol):
    """``pod up`` / ``pod down`` (the local pod emulator)."""

    async def up(
        self, hosts: int, *, ready_delay: float | None, ssh_port: int | None
    ) -> dict[str, Any]:
        """Start the pod and wait until READY; a JSON-able summary."""


class GkeControl(EmulatorControl, Protocol):
    """``gke up`` / ``gke down`` (the local GKE emulator)."""

    async def up(self, slices: int | None, quota_stall: bool = False) -> dict[str, Any]:
        """Start the emulator (its API answering); a JSON-able summary."""


class Session(Protocol):
    """What a command may use of the front end that runs it."""

    actor: str  # who the journal says acted: "user", "script", "mcp"
    last_job: str | None  # the newest job this session made (what `last` is)
    feed: EventFeed  # what the session heard: events, job states, resubmissions
    started: set[Started]
    pod: PodControl | None  # the emulators' clients (a script's; None elsewhere)
    gke: GkeControl | None

    @property
    def settings(self) -> ServiceSettings:
        """The services' settings, known before the services are built."""

    @property
    def poll_s(self) -> float:
        """Between reads while a command waits for a state."""

    async def services(self) -> ConsoleServices: ...

    async def drop_services(self) -> None:
        """Stop the services (an emulator going up or down makes them stale)."""

    async def wait(self, timeout: float) -> None:
        """Until the session hears something new, or ``timeout`` seconds."""

    def job_ref(self, ref: str | None) -> str:
        """The job ``ref`` names: an id, or ``last``/None (the newest this session made),
        followed through resubmissions. Raises ``CommandFailed`` when there is none."""

    def made(self, info: JobInfo) -> None:
        """A job this command made (``last`` from now on)."""

    def tell(self, text: str) -> None:
        """A line for the person watching, while the command runs (none for a script)."""


@dataclass(frozen=True)
class Confirm:
    """What a command asks before it runs where a person presses a key."""

    title: str
    body: str
    label: str  # the button that goes ahead


@dataclass(frozen=True)
class Command(Generic[A]):
    """One command. ``args`` is its frozen ``Args`` dataclass; ``run`` its behaviour."""

    name: str  # the canonical name: an MCP tool's, a keymap's
    summary: str  # one line for people and agents (the script reference's)
    args: type[A]
    run: Callable[[Session, A], Awaitable[ActionResult]]
    effect: Effect
    order: int  # where it stands in every list (the script reference, the palette, tools)
    needs: Capability | None = None  # None: every cluster
    fronts: frozenset[Front] = frozenset()
    verb: str | None = None  # its words in a line (script); default: the name, dashed
    title: str = ""  # a short name for people (the palette's title)
    hint: str = ""  # a longer line for people (default: the summary); one per command
    confirm: Callable[[A, PodSnapshot | None], Confirm | None] | None = None
    check: Callable[[A, Where], str] | None = None  # cross-argument problems, bound already
    told: Callable[[ActionResult], str] | None = None  # the result for people (TUI)
    sets_job: bool = False  # `last` refers to what it made
    document: str = ""  # a read that stands as a document (an MCP resource): what it holds
    on_cluster: bool = True  # it touches a cluster: on a fleet, it takes ``kit.clusters.CLUSTER``
    # A read that has one answer for a whole fleet (the ledger: each cluster's and their
    # total), run where a fleet of several is read with no cluster named (an agent's read, a
    # script's line before any `use`); None: a fleet's read is one entry per cluster.
    fleet: Callable[[Mapping[str, Session], A], Awaitable[ActionResult]] | None = None

    @property
    def acts(self) -> bool:
        return self.effect is not Effect.READS

    @property
    def params(self) -> tuple[Arg, ...]:
        return args_of(cast("type", self.args))

    @property
    def positionals(self) -> tuple[Arg, ...]:
        return tuple(a for a in self.params if not a.is_flag)

    @property
    def flags(self) -> tuple[Arg, ...]:
        return tuple(a for a in self.params if a.is_flag)

    @property
    def words(self) -> str:
        """Its words in a line: the verb, or the name with dashes."""
        return self.verb or self.name.replace("_", "-")

    @property
    def help(self) -> str:
        """What it does for people (the palette's line, every key's tooltip): the hint, or
        the summary; a command that confirms says so here, from ``confirm``, never in words
        of its own."""
        text = self.hint or self.summary
        return f"{text} {ASKS}" if self.confirm is not None else text

    def input_schema(self) -> dict[str, Any]:
        """Its arguments as a JSON schema (an MCP tool's), with the cluster it acts on
        (``kit.clusters.CLUSTER``) when it touches one."""
        schema = input_schema(cast("type", self.args))
        if self.on_cluster:
            schema["properties"][CLUSTER.dest] = CLUSTER.json_schema()
        return schema

    def offered_on(self, front: Front) -> bool:
        return front in self.fronts

    def refusal(self, capabilities: Iterable[Capability]) -> str | None:
        """Why a cluster with ``capabilities`` cannot run it (None: it can): the one check
        every front end makes."""
        if self.needs is None or self.needs in set(capabilities):
            return None
        return refusal(self.words, self.needs)

    def make(self, values: Mapping[str, Any]) -> A:
        """Its typed arguments from bound values (one left out takes its default; a list of
        values becomes a tuple)."""
        fixed: dict[str, Any] = {}
        for a in self.params:
            if a.dest in values:
                value = values[a.dest]
                fixed[a.dest] = tuple(value) if isinstance(value, list) else value
        return self.args(**fixed)


def relay(res: ActionResult) -> ActionResult:
    """A service's result as a command's: the same result, its JSON as the payload (what a
    script's step and an agent's tool call show)."""
    return replace(res, data=to_jsonable(res))


async def execute(command: Command[A], session: Session, args: A) -> ActionResult:
    """Run ``command``; every way it ends is an ``ActionResult`` with a typed reason: its own,
    a failure it reported (``CommandFailed``), bad input only the cluster could judge
    (``SpecError``: nothing was made), a config found wrong only when the services were built,
    or an error the services raised (its sentence)."""
    return await _ended(command.name, command.run(session, args))


async def execute_fleet(
    command: Command[A], sessions: Mapping[str, Session], args: A
) -> ActionResult:
    """Run ``command``'s fleet form (``Command.fleet``) over every cluster's session, by
    name; it ends as ``execute`` does."""
    assert command.fleet is not None, command.name
    return await _ended(command.name, command.fleet(sessions, args))


async def _ended(name: str, running: Awaitable[ActionResult]) -> ActionResult:
    try:
        return await running
    except CommandFailed as exc:
        return ActionResult.failed(name, exc.reason, str(exc), exc.data)
    except SpecError as exc:
        return ActionResult.refused(
            name, Reason.BAD_INPUT, f"invalid input: {exc}", {"problems": exc.problems}
        )
    except ConfigError as exc:
        return ActionResult.refused(name, Reason.BAD_CONFIG, exc.render())
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # a service error fails this command, never the front end
        return ActionResult.failed(name, Reason.ERROR, error_sentence(exc))
