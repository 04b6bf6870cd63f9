"""How the console runs a command: the ``Session`` it runs in, its arguments from what the
screen has selected, its confirmation, and what it tells the person at the keys.

A key or a palette entry names a command (``app.run('recover')``); the app binds its
arguments from the screen it was pressed on (``selection``: the highlighted job, the
workload, the slice, the host; a yes/no is the watchdog's auto recovery, flipped), asks the
command's confirmation where it has one, and runs it in a worker through the one executor.
What it does is the command's; this module only adapts it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from console.commands import Command, CommandFailed, GkeControl, PodControl, Started
from console.commands.kit.feed import EventFeed
from console.commands.kit.params import Kind
from console.commands.kit.told import result_text
from console.screens.keys import SELECTED, UNSELECTED
from console.services.model import ActionResult, JobInfo, Reason

if TYPE_CHECKING:
    from console.services.api import ConsoleServices, ServiceSettings
    from console.tui.app import PhantomApp

ACTOR = "user"


class TuiSession:
    """What a command uses of the console: its services, a person acting, the jobs made."""

    actor = ACTOR

    def __init__(self, app: PhantomApp) -> None:
        self.app = app
        self.feed = EventFeed(lambda _obj: None, time.time)
        self.started: set[Started] = set()
        self.pod: PodControl | None = None
        self.gke: GkeControl | None = None
        self.last_job: str | None = None

    @property
    def settings(self) -> ServiceSettings:
        return self.app.services.settings

    @property
    def poll_s(self) -> float:
        return self.app.services.settings.polling.client_s

    async def services(self) -> ConsoleServices:
        return self.app.services

    async def drop_services(self) -> None:
        return None

    async def wait(self, timeout: float) -> None:
        await asyncio.sleep(timeout)

    def job_ref(self, ref: str | None) -> str:
        if not ref:
            raise CommandFailed("no job selected")
        return ref

    def made(self, info: JobInfo) -> None:
        self.last_job = info.job_id
        self.app.state.set_job(info)
        self.app._sync_screen()

    def tell(self, text: str) -> None:
        self.app.notify(text)


def selected_args(
    app: PhantomApp, command: Command[Any], selection: Mapping[Kind, str]
) -> Any | None:
    """The command's arguments from what is selected (None, and a note saying what to
    highlight, when it needs a row that is not there)."""
    values: dict[str, Any] = {}
    for arg in command.positionals:
        if arg.kind == Kind.ONOFF:  # the one switch a key flips: automatic recovery
            values[arg.dest] = not app.state.recovery.auto
        elif arg.kind in SELECTED:
            value = selection.get(arg.kind)
            if value is None:
                app.notify(UNSELECTED[arg.kind], severity="warning")
                return None
            values[arg.dest] = (value,) if arg.variadic else value
    return command.make(values)


def tell_result(app: PhantomApp, command: Command[Any], result: ActionResult) -> None:
    """What became of a command, for the person who ran it: a read that went well shows on
    its screen and says nothing; an error names the command."""
    label = command.title or command.name
    if result.reason is Reason.ERROR:
        app.notify(f"{label} failed: {result.message}", title=label, severity="error", timeout=10)
        return
    if result.ok and not command.acts:
        return
    text = command.told(result) if command.told is not None else result_text(result)
    app.notify(text, severity="information" if result.ok else "error")
