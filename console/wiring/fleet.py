"""A fleet's services: one set per cluster, each built as a lone cluster's is.

``fleet_services(fleet)`` is the one place a front end gets the services of several clusters
(`phantom watch` over a fleet, the TUI's Fleet screen): for each cluster of the fleet, in
the file's order, ``make_services`` over that cluster's own ``Config``, so each has its own
backend, watchdog, journal, leases, host keys and Ray tunnel ends (a ``[[clusters]]`` entry's
state dir is ``$XDG_STATE_HOME/phantom/fleet/<name>``: ``console.config.fleet``), and
nothing is shared between them but the event loop that runs them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from console.config import Config
from console.config.fleet import ClusterChoiceError, Fleet

if TYPE_CHECKING:
    from console.services.facade import Facade
    from console.services.pending import PendingServices

# How one cluster's services are built (the default: ``make_services`` never starting a pod).
BuildOne = Callable[[Config], "Facade"]


class ClusterBuildError(Exception):
    """One cluster's services could not be built; ``name`` says which, ``cause`` why."""

    def __init__(self, name: str, cause: BaseException) -> None:
        self.name = name
        self.cause = cause
        super().__init__(f"cluster {name!r}: {cause}")


def members(fleet: Fleet, names: Sequence[str] | None = None) -> tuple[Config, ...]:
    """The clusters called ``names`` (None: all of them), in the fleet's order. A name that
    is not there, or one given twice: ``ClusterChoiceError`` (exit 2) naming it."""
    if names is None:
        return fleet.members
    problems: list[str] = []
    seen: set[str] = set()
    for name in names:
        if name in seen:
            problems.append(f"cluster {name!r} is named twice; name each cluster once")
        elif name not in fleet.names:
            problems.append(
                f"--cluster {name!r}: no such cluster in {fleet.source}; its clusters: "
                f"{', '.join(fleet.names)}"
            )
        seen.add(name)
    if problems:
        raise ClusterChoiceError(fleet.source, problems)
    return tuple(m for m in fleet.members if m.name in seen)


def fleet_services(
    fleet: Fleet,
    *,
    names: Sequence[str] | None = None,
    build: BuildOne | None = None,
) -> dict[str, Facade]:
    """The services of every cluster of ``fleet`` (or of those called ``names``), by name, in
    the fleet's order; none is started. ``build`` makes one cluster's (default:
    ``make_services(config, autostart_pod=False)``: a fleet's pods are started with
    `phantom --cluster NAME pod up`). A cluster that cannot be built raises
    ``ClusterBuildError`` naming it, after the journals of those built before are closed:
    nothing is left half made."""
    chosen = members(fleet, names)
    if build is None:
        from console.wiring import make_services

        def build(config: Config) -> Facade:
            return make_services(config, autostart_pod=False)

    built: dict[str, Facade] = {}
    try:
        for config in chosen:
            try:
                built[config.name] = build(config)
            except ClusterChoiceError:
                raise
            except Exception as exc:
                raise ClusterBuildError(config.name, exc) from exc
    except BaseException:
        for services in built.values():
            services.close_journal()
        raise
    return built


def deferred_fleet_services(fleet: Fleet) -> dict[str, PendingServices]:
    """The TUI's services of every cluster, by name, in the fleet's order: each built behind
    the first frame (``deferred_services``), so a cluster that is slow to answer or down
    never holds up the others or the screen."""
    from console.wiring import deferred_services

    return {config.name: deferred_services(config) for config in fleet.members}
