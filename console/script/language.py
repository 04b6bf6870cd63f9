"""The script language: one table of every action's signature, and its reference text.

    # comment                       blank lines and '#' comments are ignored
    pod up [--hosts N]              shell-style quoting (shlex); a line ending in '\\'
    submit single --train-args "--algo ppo --total-timesteps 2048"   continues on the next
    set continue-on-error on|off    directive: from here on a failed step does not stop
    ray-up --continue               per line: this step's failure does not stop the script
    finally                         directive: every later line runs even after a failure

``ACTIONS`` is the script's view of ``console.services.action_table`` (its rows with a
script verb, plus the two directives): the parser, the validator, the runner's dispatch and
``usage_text()`` (``phantom --script-help``) all read it. Host arguments take an index
(``2``), a name (``<node_name>-w2``) or, on the local emulator, an IP (``127.0.0.12``).
``last`` (and an omitted job id) is the job of the latest ``submit``/``relaunch-sweep``/
``workload create``. An action names what the cluster must be able to do (``needs``, a
``Capability`` its backend declares: the pod emulator's verbs for ``pod``/``preempt``/
``recreate``, the GKE emulator's for ``gke up|down`` and ``preempt-slice``, Ray's for
``ray-up``); a script for a cluster that cannot is refused before anything runs.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass

from console.services.action_table import (
    ACTIONS as TABLE,
)
from console.services.action_table import (
    JOB_STATUSES,
    MAX_EMULATED_HOSTS,
    WORKLOAD_STATES,
    Action,
    Arg,
    Front,
)
from console.services.capabilities import Capability

ACTOR = "script"
__all__ = ["JOB_STATUSES", "MAX_EMULATED_HOSTS", "WORKLOAD_STATES", "Arg"]
# Emulated host i in its first zone: 127.0.<i // 200>.<10 + i % 200>.
FIRST_LOCAL_OCTET = 10
LOCAL_HOSTS_PER_BLOCK = 200


@dataclass(frozen=True)
class ActionDef:
    """A verb as the script sees it: a table row's script name, arguments and capability,
    or one of the language's own directives (``finally``, ``set``)."""

    name: str
    summary: str
    positionals: tuple[Arg, ...] = ()
    flags: tuple[Arg, ...] = ()
    sets_job: bool = False  # defines what `last` refers to
    needs: Capability | None = None  # what the cluster must be able to do (None: any cluster)
    row: Action | None = None  # the table's row (None: a directive)

    def usage_parts(self) -> list[str]:
        parts = [self.name, *(a.usage() for a in self.positionals)]
        return parts + [f.usage() for f in self.flags]

    def usage(self) -> str:
        return " ".join(self.usage_parts())

    def flag(self, name: str) -> Arg | None:
        return next((f for f in self.flags if f.name == name), None)


def _verb(row: Action) -> ActionDef:
    assert row.script is not None
    return ActionDef(
        row.script, row.description, row.positionals, row.flags, row.sets_job, row.needs, row
    )


_DIRECTIVES = (
    ActionDef(
        "finally",
        "directive: the lines after it always run (cleanup), also after a failed step; "
        "each continues on error; there, teardown and pod down act only if this script "
        "started Ray / the pod",
    ),
    ActionDef(
        "set",
        "directive: set continue-on-error on|off (no step of its own)",
        positionals=(
            Arg("setting", "choice", choices=("continue-on-error",)),
            Arg("enabled", "onoff", "on|off"),
        ),
    ),
)
# The verbs: the table's script rows (in its order), then the directives.
ACTIONS: dict[str, ActionDef] = {
    a.name: a for a in (*(_verb(r) for r in TABLE if Front.SCRIPT in r.fronts), *_DIRECTIVES)
}
# Every action accepts it: this line's failure does not stop the script.
CONTINUE_FLAG = Arg("--continue", "bool", help="a failure of this step does not stop the script")
TWO_WORD = {"pod", "gke", "workload"}
DEFAULT_TIMEOUTS = {
    "wait-job": 3600.0,
    "wait-workload": 3600.0,
    "recover": 1800.0,
    "wait-event": 600.0,
}


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
        "  HOST: index, <node_name>-w<i>, or (local) 127.0.0.(10+i)",
        "  SLICE: a TPU slice's index or node pool name (GKE emulator)",
        "  S (seconds): 90, 1.5, 90s, 5m, 1h",
        "  exit: 0 ok, 1 a step failed, 2 invalid script/config (nothing run),",
        "        130 interrupted (after stopping what the script started)",
    ]
    return "\n".join(lines)
