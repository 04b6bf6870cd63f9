"""Command palette (ctrl+p): the rare actions that do not deserve a key.

Its entries are generated from the commands the console runs (``console.commands``), where
the cluster's backend can do them, plus a few of the console's own (a screen, a form, a
link): a command that needs nothing selected is one entry; one that acts on a host is an
entry per host; one that needs a highlighted row (a job, a workload, a slice) lives on its
screen's keys. On a TPU VM pod that is teardown, the tunnel, re-bootstrap one host, the
dashboard URL and (on the local emulator) preempt or recreate a host; on GKE only what GKE
can do. A command that asks first still asks: the palette runs it as its key would.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, cast

from textual.command import CommandInput, CommandPalette, DiscoveryHit, Hit, Hits, Provider

from console.commands import Front, by_name, offered
from console.commands.kit.params import Kind
from console.services.capabilities import Capability

if TYPE_CHECKING:
    from console.tui.app import PhantomApp

# (title, help, callback, listed before anything is typed)
Command = tuple[str, str, Callable[[], object], bool]
# An argument a palette entry cannot fill: it is a row highlighted on a screen.
_ON_A_SCREEN = frozenset({Kind.JOB, Kind.NAME, Kind.SLICE})
_HOST = (Kind.HOST, Kind.HOST_OR_ALL)
_CLUSTERS_ORDER = 10  # a fleet's clusters: listed first


@dataclass(frozen=True)
class Own:
    """A palette entry of the console's own (not a command): the app's ``action_<name>``."""

    name: str
    title: str
    hint: str
    order: int  # among the commands' (``Command.order``)
    needs: Capability | None = None


OWN = (
    Own(
        "show_ledger",
        "Ledger: goodput and cost",
        "Where the pod's time and money went: goodput, badput by cause, spot vs on-demand",
        240,
    ),
    Own("submit_form", "Submit", "Open the form for new work on this cluster", 290),
    Own(
        "open_dashboard",
        "Open dashboard URL",
        "Open the Ray dashboard in a browser (also shown as a notification)",
        310,
        Capability.TUNNEL,
    ),
)


def needs_of_entry(name: str) -> Capability | None:
    """What the cluster must be able to do for the palette to offer ``name`` (a command's
    name or an entry of the console's own)."""
    command = by_name(name)
    if command is not None:
        return command.needs
    return next(o.needs for o in OWN if o.name == name)


class PhantomCommands(Provider):
    @property
    def phantom(self) -> PhantomApp:
        return cast("PhantomApp", self.app)

    def commands(self) -> list[Command]:
        """What this cluster can do, as palette entries, in the commands' order."""
        app = self.phantom
        caps = app.services.capabilities
        pod = app.state.pod
        hosts = [h.name for h in pod.hosts] if pod else []
        entries: list[tuple[int, Command]] = []
        for command in offered(Front.TUI):
            kinds = {a.kind for a in command.positionals}
            if command.refusal(caps) is not None or kinds & _ON_A_SCREEN:
                continue
            if not kinds & set(_HOST):
                run = partial(app.run_selected, command, {})
                entries.append((command.order, (command.title, command.help, run, True)))
                continue
            for name in hosts:  # a command that asks first appears when searched for
                title = command.title.replace("host", f"host {name}", 1)
                on_host = dict.fromkeys(_HOST, name)
                run = partial(app.run_selected, command, on_host)
                entry = (title, command.help, run, command.confirm is None)
                entries.append((command.order, entry))
        for own in OWN:
            if own.needs is None or own.needs in caps:
                action: Callable[[], Any] = getattr(app, f"action_{own.name}")
                entries.append((own.order, (own.title, own.hint, action, True)))
        current = app.services.settings.cluster.name
        for name, view in app.fleet_state.items():  # a fleet of several: each other cluster
            if name == current:
                continue
            ident = view.identity
            where = f"{ident.world}, {ident.location}" if ident.location else ident.world
            hint = f"Show {name} ({where}) on every screen"
            entries.append(
                (
                    _CLUSTERS_ORDER,
                    (f"Cluster {name}", hint, partial(app.choose_cluster, name), True),
                )
            )
        return [entry for _, entry in sorted(entries, key=lambda e: e[0])]

    async def discover(self) -> Hits:
        for title, help_text, callback, listed in self.commands():
            if not listed:
                continue
            yield DiscoveryHit(title, callback, help=help_text)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for title, help_text, callback, _ in self.commands():
            score = matcher.match(title)
            if score > 0:
                yield Hit(score, matcher.highlight(title), callback, text=title, help=help_text)


class SteadyPalette(CommandPalette):
    """Textual's command palette, its input's cursor steady when the console's is
    (``TuiSettings.cursor_blink``): a blinking cursor makes what a screenshot shows depend on
    the instant it is taken."""

    def __init__(self, *, cursor_blink: bool) -> None:
        super().__init__(id="--command-palette")
        self._cursor_blink = cursor_blink

    def on_mount(self) -> None:
        if not self._cursor_blink:
            self.query_one(CommandInput).cursor_blink = False
