"""The console's keys: its default keymap, the user's ``[keys]`` over it, and the bindings.

Keys are the TUI's data. ``DEFAULT`` lists every key of every screen (``app``: everywhere):
a key runs a command (``console.commands``, by its name: the binding asks the app to
``run`` it) or one of the console's own actions (moving between screens, filtering, a
form). A screen's ``BINDINGS`` are ``bindings(its section)``; footer and help read them.

The user's keymap (``[keys]`` in the config) names a command (every key that runs it) or a
key by its id (``jobs.refresh``) and gives it other keys; a command of the console's with no
key of its own gets one everywhere. A name that is neither, or a key that would then do two
things on one screen, is a config error naming both (``UserKeymap.check``). Textual applies
the result by binding id (``App.set_keymap``); the help screen shows the same keys.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from textual.binding import Binding
from textual.keys import _normalize_key_list  # the normalization Textual's keymap applies

from console.commands import Command, Front, all_commands, by_name
from console.commands.kit.params import Kind
from console.services.capabilities import Capability

SCREENS_GROUP = Binding.Group("screens", compact=True)
MAIN_SCREENS = ("overview", "jobs", "cadence", "events", "recovery", "workloads", "ledger")
FLEET = "fleet"  # the fleet's screen: a row per cluster (a config of several only)


@dataclass(frozen=True)
class Key:
    """One key of one screen (``app``: every screen)."""

    screen: str
    key: str
    name: str  # a command's name, or the console's own action
    label: str = ""  # the footer's word where it is shorter than a command's title
    tooltip: str = ""  # the help line of the console's own; a command's is its ``help``
    show: bool = True  # in the footer
    action: str = ""  # the console's own: its Textual action (a command: run it)
    id: str = ""  # default: "<screen>.<name>"
    priority: bool = False
    group: Binding.Group | None = None
    needs: Capability | None = None  # the console's own: what the cluster must be able to do

    @property
    def binding_id(self) -> str:
        return self.id or f"{self.screen}.{self.name}"

    @property
    def command(self) -> Command[Any] | None:
        return None if self.action else by_name(self.name)

    def binding(self) -> Binding:
        command = self.command
        label = self.label or (command.title if command else self.name)
        tooltip = command.help if command else self.tooltip
        return Binding(
            self.key,
            self.action or f"app.run('{self.name}')",
            label,
            show=self.show,
            id=self.binding_id,
            tooltip=tooltip,
            priority=self.priority,
            group=self.group,  # type: ignore[arg-type]
        )


def _screen(
    n: str,
    mode: str,
    label: str,
    show: bool = True,
    tip: str = "",
    needs: Capability | None = None,
) -> Key:
    return Key(
        "app",
        n,
        f"screen.{mode}",
        label,
        tip or f"Show the {label} screen",
        show=show,
        action=f"switch_mode('{mode}')",
        id=f"app.screen.{mode}",
        group=SCREENS_GROUP if show else None,
        needs=needs,
    )


def _filter(screen: str, tip: str, clear_tip: str = "Clear the filter") -> tuple[Key, Key]:
    return (
        Key(screen, "slash", "filter", "Filter", tip, action="filter"),
        Key(screen, "escape", "clear_filter", "Clear filter", clear_tip, action="clear_filter"),
    )


def _refresh(screen: str, tip: str, label: str = "Refresh", show: bool = False) -> Key:
    own = {"jobs": "refresh_jobs", "cadence": "refresh_cadence", "events": "refresh_events"}
    own |= {"ledger": "refresh_ledger", "recovery": "refresh_recovery"}
    return Key(screen, "ctrl+r", "refresh", label, tip, show=show, action=f"app.{own[screen]}")


_FLEET_FILTER = _filter(
    FLEET,
    "Show only clusters whose row contains the text (name, zone, accelerator, STALLED…)",
    "Clear the filter and show every cluster",
)
_OVERVIEW_FILTER = _filter(
    "overview",
    "Show only hosts whose row contains the text (name, IP, PREEMPTED, DEAD…)",
    "Clear the filter and show every host",
)
_JOBS_FILTER = _filter("jobs", "Show only jobs whose id, status or entrypoint contains the text")
_CADENCE_FILTER = _filter("cadence", "Show only runs whose name or state contains the text")
_EVENTS_FILTER = _filter(
    "events", "Show only events whose kind, host, actor or message contains the text"
)
_WORKLOADS_FILTER = _filter(
    "workloads",
    "Show only workloads whose row contains the text",
    "Clear the filter and show every workload",
)

# Every key of the console, screen by screen, in the footer's order.
DEFAULT: tuple[Key, ...] = (
    _screen("0", FLEET, "Fleet", tip="Show the Fleet screen: a row per cluster"),
    _screen("1", "overview", "Overview"),
    _screen("2", "jobs", "Jobs"),
    _screen("3", "cadence", "Cadence"),
    _screen("4", "events", "Events"),
    _screen("5", "recovery", "Recovery"),
    _screen("6", "workloads", "Workloads", needs=Capability.WORKLOADS),
    # Off the footer: its "12345 screens" (GKE: 123456, a fleet's 0123456) fits 80 columns
    # beside q, ?, s; the help screen, the palette and the Ledger's own tab name it.
    _screen("7", "ledger", "Ledger", False, "Show the Ledger screen: goodput, badput by cause and cost"),
    Key("app", "C", "switch_cluster", "Cluster",
        "Switch to the fleet's next cluster (the palette names each; the Fleet screen's enter "
        "opens the highlighted one)", action="next_cluster", id="app.cluster"),
    Key("app", "question_mark", "help", "Help", "Every key of every screen", action="help", id="app.help"),
    Key("app", "q", "quit", "Quit", "Leave the console (the pod keeps running)", action="quit", id="app.quit"),
    Key("app", "s", "submit_form", "Submit",
        "Open the job submission form (single, distributed or sweep); on GKE, the new-workload "
        "form (a JobSet)", action="submit_form", id="app.submit"),
    _FLEET_FILTER[0],
    _FLEET_FILTER[1],
    _OVERVIEW_FILTER[0],
    Key("overview", "r", "recover", "Recover"),
    Key("overview", "u", "bring_up"),
    Key("overview", "ctrl+r", "refresh", "Refresh", show=False),
    _OVERVIEW_FILTER[1],
    _JOBS_FILTER[0],
    Key("jobs", "x", "stop_job"),
    _refresh("jobs", "List jobs from the Ray head now"),
    _JOBS_FILTER[1],
    _CADENCE_FILTER[0],
    _refresh("cadence", "Re-read the cadence of every run now"),
    _CADENCE_FILTER[1],
    _EVENTS_FILTER[0],
    Key("events", "a", "raw", "All rows",
        "Show every journal row instead of one row per incident (again: incidents)",
        action="toggle_raw"),
    _refresh("events", "Reload the journal from the services", "Reload"),
    _EVENTS_FILTER[1],
    Key("recovery", "r", "recover"),
    Key("recovery", "a", "auto_recovery", "Toggle auto"),
    _refresh("recovery", "Re-read the watchdog's status"),
    _WORKLOADS_FILTER[0],
    Key("workloads", "l", "logs", "Logs",
        "Follow the highlighted pod's log, or a workload's (its coordinator's)",
        action="logs", needs=Capability.WORKLOADS),
    Key("workloads", "x", "workload_delete", "Delete"),
    Key("workloads", "p", "preempt_slice", "Preempt"),
    Key("workloads", "ctrl+r", "refresh", "Refresh", show=False),
    _WORKLOADS_FILTER[1],
    _refresh("ledger", "Read the journal again and recount goodput and cost", show=True),
    Key("host", "escape,q", "close", "Close", "Back to the overview", action="close"),
    Key("host", "b", "bootstrap", "Re-bootstrap"),
    Key("host", "p", "preempt", "Preempt"),
    Key("host", "c", "recreate", "Recreate"),
    Key("log", "escape", "back", "Back", "Close the log and go back to the job list", action="back"),
    Key("log", "f", "pause", "Pause",
        "Freeze the view; lines keep arriving in the buffer and are counted", action="pause"),
    Key("log", "f", "follow", "Follow",
        "Resume following: show the lines that arrived while paused", action="follow"),
    Key("log", "slash", "search", "Search", "Find text in the log", action="search"),
    Key("log", "n", "next_match", "Next match", "Next match of the search", show=False,
        action="next_match", id="log.next"),
    Key("log", "N", "prev_match", "Prev", "Previous match of the search", show=False,
        action="prev_match", id="log.prev"),
    Key("log", "G,end", "jump_end", "End", "Jump to the newest line and follow again",
        action="jump_end", id="log.end"),
    Key("log", "ctrl+r", "reconnect", "Reconnect", "Re-open the log stream (after it closed early)",
        show=False, action="reconnect"),
    Key("submit", "ctrl+s", "send", "Submit",
        "Validate and submit; on a problem the form stays open with the field marked",
        action="submit", priority=True),
    Key("submit", "escape", "cancel", "Cancel", "Close without submitting", action="cancel"),
    Key("workload_form", "ctrl+s", "create", "Create",
        "Validate and create; on a problem the form stays open with the field marked",
        action="submit", priority=True),
    Key("workload_form", "escape", "cancel", "Cancel", "Close, creating nothing", action="cancel"),
    Key("confirm", "y", "yes", "Yes, do it", "Confirm the action", action="confirm"),
    Key("confirm", "n,escape", "no", "No", "Cancel: nothing is changed", action="cancel"),
    Key("help", "escape,q,question_mark", "close", "Close", "Close help", action="close"),
)  # fmt: skip


def bindings(screen: str, keys: Iterable[Key] = DEFAULT) -> list[Binding]:
    """A screen's (or the app's) Textual bindings, in the keymap's order."""
    return [k.binding() for k in keys if k.screen == screen]


BY_ID: dict[str, Key] = {k.binding_id: k for k in DEFAULT}
SCREEN_KEYS: dict[str, Key] = {
    k.name.removeprefix("screen."): k for k in DEFAULT if k.name.startswith("screen.")
}


def screens_of(capabilities: Iterable[Capability], *, fleet: bool = False) -> tuple[str, ...]:
    """The main screens a cluster with ``capabilities`` has, in the keys' order (what its
    tab line and footer offer); ``fleet``: the config has several clusters (the Fleet
    screen's tab, first)."""
    caps = set(capabilities)
    return tuple(
        mode
        for mode, key in SCREEN_KEYS.items()
        if (mode != FLEET or fleet) and (key.needs is None or key.needs in caps)
    )


def needs_of(binding: Binding) -> Capability | None:
    """What the cluster must be able to do for ``binding`` to be offered (its command's
    capability, or the console's own action's)."""
    key = BY_ID.get(binding.id or "")
    if key is None:  # a key the user's keymap added: it runs a command
        command = command_of(binding)
        return command.needs if command is not None else None
    command = key.command
    return command.needs if command is not None else key.needs


def command_of(binding: Binding) -> Command[Any] | None:
    """The command a binding runs (None: one of the console's own actions)."""
    if not binding.action.startswith("app.run('"):
        return None
    return by_name(binding.action.removeprefix("app.run('").removesuffix("')"))


def offered(binding: Binding, capabilities: Iterable[Capability]) -> bool:
    """Whether a cluster with ``capabilities`` offers what ``binding`` does."""
    needs = needs_of(binding)
    return needs is None or needs in set(capabilities)


# What a key's command takes from the screen it is pressed on, by its argument's kind, and
# what the console says when nothing of that kind is selected there.
SELECTED = (Kind.JOB, Kind.NAME, Kind.SLICE, Kind.HOST, Kind.HOST_OR_ALL)
UNSELECTED: dict[Kind, str] = {
    Kind.JOB: "No job highlighted.",
    Kind.NAME: "No workload highlighted.",
    Kind.SLICE: "Highlight a scheduled pod: its node pool is the slice.",
    Kind.HOST: "No host selected.",
    Kind.HOST_OR_ALL: "No host selected.",
}


class KeymapError(ValueError):
    """The user's keymap names what is not there, or makes a key do two things."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


@dataclass(frozen=True)
class UserKeymap:
    """``[keys]`` over the default keymap: ids -> keys (Textual's keymap), and the keys it
    adds for commands with none of their own."""

    keymap: Mapping[str, str] = field(default_factory=dict)
    added: tuple[Key, ...] = ()

    @classmethod
    def check(cls, user: Mapping[str, str]) -> UserKeymap:
        """The user's keymap, checked: every name a command of the console's or a key's id,
        and no key doing two things on one screen (``KeymapError`` naming both)."""
        problems: list[str] = []
        keymap: dict[str, str] = {}
        added: list[Key] = []
        tui = {c.name for c in all_commands() if Front.TUI in c.fronts}
        for name, keys in user.items():
            normal = _normalize_key_list(keys)
            ids = [k.binding_id for k in DEFAULT if not k.action and k.name == name]
            if name in BY_ID:
                keymap[name] = normal
            elif ids:
                keymap.update(dict.fromkeys(ids, normal))
            elif name in tui:
                added.append(Key("app", normal, name))
            else:
                problems.append(_unknown(name, keys, tui))
        mine = UserKeymap(keymap, tuple(added))
        problems += mine._clashes(set(keymap) | {k.binding_id for k in added}, user)
        if problems:
            raise KeymapError(problems)
        return mine

    def effective(self) -> list[Key]:
        """Every key with the user's keymap applied (what help and footer show)."""
        out = [_rekeyed(k, self.keymap.get(k.binding_id)) for k in DEFAULT]
        return out + list(self.added)

    def _clashes(self, changed: set[str], user: Mapping[str, str]) -> list[str]:
        keys = self.effective()
        problems: list[str] = []
        seen: set[tuple[str, str]] = set()
        for screen in sorted({k.screen for k in keys} - {"app"}) or ["app"]:
            section = [k for k in keys if k.screen in (screen, "app")]
            for mine in (k for k in section if k.binding_id in changed):
                for other in section:
                    if other.binding_id == mine.binding_id:
                        continue
                    same = set(_split(mine.key)) & set(_split(other.key))
                    pair = tuple(sorted((mine.binding_id, other.binding_id)))
                    if not same or pair in seen or _same_thing(mine, other):
                        continue
                    seen.add((pair[0], pair[1]))
                    where = (
                        "every screen"
                        if screen == "app" or other.screen == "app"
                        else (f"the {screen} screen")
                    )
                    problems.append(
                        f"keys: {_named(mine, user)} and {_named(other, user)} both take "
                        f"{', '.join(sorted(same))} on {where}; give one of them another key"
                    )
        return problems


def _split(keys: str) -> list[str]:
    return [k.strip() for k in keys.split(",") if k.strip()]


def _rekeyed(key: Key, keys: str | None) -> Key:
    return key if keys is None else replace(key, key=keys)


def _same_thing(a: Key, b: Key) -> bool:
    """Two keys of one command on one screen and everywhere are not a clash."""
    return not a.action and not b.action and a.name == b.name


def _named(key: Key, user: Mapping[str, str]) -> str:
    return key.name if key.name in user or not key.action else key.binding_id


def _unknown(name: str, keys: str, tui: set[str]) -> str:
    command = by_name(name)
    if command is not None:
        return (
            f"keys.{name} = {keys!r}: {name} is not run from the console (a script verb or an "
            f"agent's tool); the console runs: {', '.join(sorted(tui))}"
        )
    return (
        f"keys.{name} = {keys!r}: no command or key {name!r}; commands: "
        f"{', '.join(sorted(tui))}; keys by id: {', '.join(sorted(BY_ID))}"
    )
