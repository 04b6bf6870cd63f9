"""Which cluster of a fleet a command acts on: the one ``cluster`` argument, declared here
once, that every front end offers its own way (a script's ``use NAME`` and ``--cluster NAME``,
an agent's ``cluster`` property), and the one check of a name.

A command that touches a cluster (``Command.on_cluster``) takes it; a fleet of one needs
none (its one cluster is the default, as before fleets); on a fleet of several, an act names
its cluster (``unchosen`` says how), while a read an agent makes without one reads them all.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence

from console.commands.kit.bind import BadArgument
from console.commands.kit.params import Arg, Kind

CLUSTER = Arg(
    "--cluster",
    Kind.CLUSTER,
    "NAME",
    "the cluster it acts on, by its [[clusters]] name (needed on a fleet of several)",
)


def listed(names: Sequence[str]) -> str:
    return ", ".join(names)


def named(label: str, name: str, names: Sequence[str], source: str) -> str:
    """``name`` when it is one of the fleet's ``names``; otherwise ``BadArgument`` naming it,
    the clusters there are and the closest of them (``label``: who asked, e.g. "use")."""
    if name in names:
        return name
    close = difflib.get_close_matches(name, names, n=1, cutoff=0.5)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    raise BadArgument(
        f"{label} {name!r}: no such cluster in {source}{hint} (its clusters: {listed(names)})"
    )


def unchosen(what: str, names: Sequence[str], source: str, fix: str) -> str:
    """Why ``what`` cannot run on a fleet of several with no cluster chosen; ``fix``: how
    this front end chooses one."""
    return (
        f"{what} acts on one cluster and none is chosen: {source} has {len(names)} clusters "
        f"({listed(names)}); {fix}"
    )
