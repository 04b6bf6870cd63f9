"""The script language: every command's verb, and its reference text.

    # comment                       blank lines and '#' comments are ignored
    pod up [--hosts N]              shell-style quoting (shlex); a line ending in '\\'
    submit single --train-args "--algo ppo --total-timesteps 2048"   continues on the next
    set continue-on-error on|off    directive: from here on a failed step does not stop
    ray-up --continue               per line: this step's failure does not stop the script
    finally                         directive: every later line runs even after a failure
    use pod-b                       directive: the lines after it act on cluster pod-b
    status --cluster pod-a          per line: this line acts on cluster pod-a

``ACTIONS`` is the script's view of ``console.commands`` (the commands a script offers, by
their words, plus the two directives, which are the language's own syntax): the parser, the
validator, the runner and ``usage_text()`` (``phantom --script-help``) all read it. Host
arguments take an index (``2``), a name (``<node_name>-w2``) or, on the local emulator, an
IP (``127.0.0.12``). ``last`` (and an omitted job id) is the job of the latest
``submit``/``relaunch-sweep``/``workload create``. A command names what the cluster must be
able to do (``needs``, a ``Capability`` its backend declares); a script for a cluster that
cannot is refused before anything runs.

On a ``[[clusters]]`` fleet each line acts on one cluster: the one the last ``use NAME``
chose, or its own ``--cluster NAME`` (``kit.clusters.CLUSTER``, the argument every front end
declares the same way); `phantom --cluster NAME --script` chooses the first. A fleet of one
needs neither. On a fleet of several a line that touches a cluster with none chosen is
refused, as is a name that is not in the config, before anything runs.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from typing import Any

from console.commands import Command, Front, offered
from console.commands.kit.clusters import CLUSTER
from console.commands.kit.params import (
    JOB_STATUSES,
    MAX_EMULATED_HOSTS,
    WORKLOAD_STATES,
    Arg,
    Kind,
)
from console.services.capabilities import Capability

ACTOR = "script"
__all__ = ["JOB_STATUSES", "MAX_EMULATED_HOSTS", "WORKLOAD_STATES", "Arg"]


@dataclass(frozen=True)
class Verb:
    """A verb as the script sees it: a command's words, arguments and capability, or one of
    the language's own directives (``finally``, ``set``)."""

    name: str
    summary: str
    positionals: tuple[Arg, ...] = ()
    flags: tuple[Arg, ...] = ()
    sets_job: bool = False  # defines what `last` refers to
    needs: Capability | None = None  # what the cluster must be able to do (None: any cluster)
    command: Command[Any] | None = None  # None: a directive

    def usage_parts(self) -> list[str]:
        parts = [self.name, *(a.usage() for a in self.positionals)]
        return parts + [f.usage() for f in self.flags]

    def usage(self) -> str:
        return " ".join(self.usage_parts())

    def flag(self, name: str) -> Arg | None:
        return next((f for f in self.flags if f.name == name), None)


def _verb(command: Command[Any]) -> Verb:
    return Verb(
        command.words,
        command.summary,
        command.positionals,
        command.flags,
        command.sets_job,
        command.needs,
        command,
    )


_DIRECTIVES = (
    Verb(
        "finally",
        "directive: the lines after it always run (cleanup), also after a failed step; "
        "each continues on error; there, teardown and pod down act only if this script "
        "started Ray / the pod",
    ),
    Verb(
        "use",
        "directive: the lines after it act on cluster NAME of a [[clusters]] fleet "
        "(until the next use; a line's own --cluster NAME wins)",
        positionals=(Arg("cluster", Kind.CLUSTER, "NAME"),),
    ),
    Verb(
        "set",
        "directive: set continue-on-error on|off (no step of its own)",
        positionals=(
            Arg("setting", Kind.CHOICE, choices=("continue-on-error",)),
            Arg("enabled", Kind.ONOFF, "on|off"),
        ),
    ),
)
# The verbs: the commands a script offers (in their order), then the directives.
ACTIONS: dict[str, Verb] = {
    v.name: v for v in (*(_verb(c) for c in offered(Front.SCRIPT)), *_DIRECTIVES)
}
# Every action accepts it: this line's failure does not stop the script.
CONTINUE_FLAG = Arg("--continue", Kind.FLAG, help="a failure of this step does not stop the script")
# Every action on a cluster accepts it: this line acts on cluster NAME (``use`` for the rest).
CLUSTER_FLAG = CLUSTER
TWO_WORD = {name.split(" ")[0] for name in ACTIONS if " " in name}


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
    lines = ["phantom --script FILE|-   one action per line; '#' comments; shell quoting", ""]
    for a in ACTIONS.values():
        lines += _wrap_units(a.usage_parts(), 78, "  ", "      ")
        lines += textwrap.wrap(a.summary, 78, initial_indent="      ", subsequent_indent="      ")
    lines += [
        "",
        "  any action: --continue   a failure of this step does not stop the script",
        "  any action: --cluster NAME   this line acts on cluster NAME of the fleet",
        "  a fleet of several clusters: every action names its cluster (use or --cluster)",
        "  HOST: index, <node_name>-w<i>, or (local) 127.0.0.(10+i)",
        "  SLICE: a TPU slice's index or node pool name (GKE emulator)",
        "  S (seconds): 90, 1.5, 90s, 5m, 1h",
        "  exit: 0 ok, 1 a step failed, 2 invalid script/config (nothing run),",
        "        130 interrupted (after stopping what the script started)",
    ]
    return "\n".join(lines)
