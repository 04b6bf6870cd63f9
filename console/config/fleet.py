"""A fleet: the clusters one config names, each a whole single-cluster ``Config``.

A config file either has today's ``[cluster]`` (and its sections), a fleet of one named from
it, or ``[[clusters]]`` entries: each a ``name`` plus the sections of its own cluster
(``[clusters.cluster]``, ``[clusters.ssh]``, ``[clusters.gke]`` ...). The file's top-level
sections are shared: an entry's table is laid over the top-level one of the same name, key
by key, so a fleet writes its common ``[ray]`` or ``[ssh]`` once. ``[wandb]``, ``[recovery]``,
``[alerts]`` and ``[keys]`` belong to the console, not to a cluster: top level only.

Names are checked at the door (non-empty, a lower-case RFC 1035 label, unique), and so are
the emulators' run dirs (two clusters on one run dir would drive one emulator twice). An
emulated cluster of a ``[[clusters]]`` file without its own run dir gets one of its own,
``$XDG_STATE_HOME/phantom/fleet/<name>/pod`` (or ``.../gke``), so a fleet of emulators runs
side by side with no setting; a ``[cluster]`` file keeps today's default.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from console.config import Config, ConfigError, default_state_dir, parse_config
from console.config.checks import tunnel_port_problems
from console.config.names import NAME_RE
from console.config.validate import shown

MAX_NAME = 40
# What an entry of [[clusters]] may hold besides its name: a cluster's own sections.
CLUSTER_SECTIONS = (
    "cluster",
    "ssh",
    "ray",
    "capacity",
    "gke",
    "prices",
    "storage",
    "bootstrap",
    "runtime_env",
)
NAME_FIX = (
    f"a cluster name is lower-case letters, digits and '-', starts with a letter, "
    f'at most {MAX_NAME} characters (e.g. name = "pod-a")'
)


class ClusterChoiceError(ConfigError):
    """A command that acts on one cluster was not told which (or told a name not there)."""

    def render(self) -> str:
        return "\n".join(f"phantom: {p}" for p in self.problems)


@dataclass(frozen=True)
class Fleet:
    """The clusters of one config, in the file's order (never empty)."""

    members: tuple[Config, ...]
    source: str = "<defaults>"

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.members)

    def select(self, name: str | None) -> Config:
        """The cluster called ``name``; with no name, the only one. ClusterChoiceError
        naming the clusters there are otherwise."""
        listed = ", ".join(self.names)
        if name is None:
            if len(self.members) == 1:
                return self.members[0]
            raise ClusterChoiceError(
                self.source,
                [
                    f"{self.source} has {len(self.members)} clusters ({listed}); this command "
                    "acts on one: pass --cluster NAME (e.g. "
                    f"`phantom --cluster {self.names[0]} status`)"
                ],
            )
        for member in self.members:
            if member.name == name:
                return member
        raise ClusterChoiceError(
            self.source,
            [f"--cluster {name!r}: no such cluster in {self.source}; its clusters: {listed}"],
        )


def parse_fleet(data: Mapping[str, Any], *, source: str = "<memory>") -> Fleet:
    """Every cluster of ``data`` (a parsed TOML document), validated in full: every problem
    of every entry is reported, each naming its entry (``clusters[1] "pod-b"``)."""
    if "clusters" not in data:
        config = parse_config(data, source=source)
        return Fleet((replace(config, name=default_name(config)),), source)
    entries = data["clusters"]
    problems: list[str] = []
    if "cluster" in data:
        problems.append(
            "[cluster] and [[clusters]] together: a fleet names each cluster in its own "
            '[[clusters]] entry; move [cluster] into one (with a name = "...")'
        )
    if not isinstance(entries, list) or not entries:
        problems.append(
            "clusters must be a list of tables ([[clusters]] entries, each with a "
            f'name = "..."), got {shown(entries)}'
        )
        raise ConfigError(source, problems)
    shared = {k: v for k, v in data.items() if k != "clusters"}
    members: list[Config] = []
    seen: dict[str, int] = {}
    for index, entry in enumerate(entries):
        member = _parse_entry(index, entry, shared, source, seen, problems)
        if member is not None:
            members.append(member)
    if not problems:
        _check_run_dirs(members, problems)
    if problems:
        raise ConfigError(source, problems)
    return Fleet(tuple(members), source)


def _parse_entry(
    index: int,
    entry: Any,
    shared: Mapping[str, Any],
    source: str,
    seen: dict[str, int],
    problems: list[str],
) -> Config | None:
    where = f"clusters[{index}]"
    if not isinstance(entry, Mapping):
        problems.append(f'{where} must be a table with a name = "...", got {shown(entry)}')
        return None
    name = entry.get("name")
    if not isinstance(name, str) or not name:
        problems.append(f"{where}: no name; give each [[clusters]] entry one: {NAME_FIX}")
        return None
    where = f"{where} {name!r}"
    if len(name) > MAX_NAME or not NAME_RE.match(name):
        problems.append(f"{where}: name is not a safe identifier; {NAME_FIX}")
        return None
    if name in seen:
        problems.append(
            f"{where}: name already used by clusters[{seen[name]}]; each cluster needs its own"
        )
        return None
    seen[name] = index
    merged: dict[str, Any] = dict(shared)
    for key, value in entry.items():
        if key == "name":
            continue
        if key not in CLUSTER_SECTIONS:
            whose = "the console's (top level only)" if key in _SHARED_ONLY else "unknown"
            problems.append(
                f"{where}: {key!r} is {whose} in a [[clusters]] entry; an entry holds name "
                f"and its cluster's sections: {', '.join(CLUSTER_SECTIONS)}"
            )
            continue
        base = shared.get(key)
        if isinstance(base, Mapping) and isinstance(value, Mapping):
            merged[key] = {**base, **value}
        else:
            merged[key] = value
    try:
        config = parse_config(merged, source=source)
    except ConfigError as exc:
        problems += [f"{where}: {p}" for p in exc.problems]
        return None
    ray = merged.get("ray")
    member = _own_places(replace(config, name=name), index, ray if isinstance(ray, Mapping) else {})
    ports = tunnel_port_problems(member)
    if ports:
        problems += [f"{where}: {p}" for p in ports]
        return None
    return member


_SHARED_ONLY = ("wandb", "recovery", "alerts", "keys")


def default_name(config: Config) -> str:
    """The name of a ``[cluster]`` config's one cluster: its GKE cluster's or its node's
    name (either is an RFC 1035 name in practice), else the provider."""
    name = config.gke.cluster if config.is_gke else config.cluster.node_name
    if name and len(name) <= MAX_NAME and NAME_RE.match(name):
        return name
    return config.cluster.provider


def _own_places(config: Config, index: int, ray: Mapping[str, Any]) -> Config:
    """A fleet member's own places, where the config leaves them to us: its state dir (its
    journal, leases, host keys and jobs), an emulator's run dir under it, and the local ends
    of its Ray tunnel (the n-th entry's are the defaults + n, so two clusters' tunnels never
    ask for one port; a local pod's head dashboard, on this machine's 127.0.0.1, too)."""
    home = default_state_dir() / "fleet" / config.name
    config = replace(config, state_dir=str(home))
    r = config.ray
    dashboard = r.dashboard_port
    if config.is_local:  # the head's dashboard is on this machine, its tunnel end 10000 up
        if not ray.get("dashboard_port"):
            dashboard += index
        local_dashboard, local_client = dashboard + 10000, r.client_port + 10000 + index
    else:
        local_dashboard, local_client = dashboard + index, r.client_port + index
    ports = replace(
        r,
        dashboard_port=dashboard,
        local_dashboard_port=r.local_dashboard_port
        if ray.get("local_dashboard_port")
        else local_dashboard,
        local_client_port=r.local_client_port if ray.get("local_client_port") else local_client,
    )
    config = replace(config, ray=ports)
    if config.is_local and not config.cluster.run_dir:
        config = replace(config, cluster=replace(config.cluster, run_dir=str(home / "pod")))
    if config.is_gke and config.is_emulated and not config.gke.run_dir:
        config = replace(config, gke=replace(config.gke, run_dir=str(home / "gke")))
    return config


def emulator_run_dir(config: Config) -> Path | None:
    """The run dir of the emulator ``config`` drives (None: a real cluster)."""
    if config.is_local:
        return Path(config.cluster.run_dir).expanduser().resolve()
    if config.is_gke and config.is_emulated:
        return Path(config.gke.run_dir).expanduser().resolve()
    return None


def _check_run_dirs(members: list[Config], problems: list[str]) -> None:
    owner: dict[Path, str] = {}
    for index, config in enumerate(members):
        run_dir = emulator_run_dir(config)
        if run_dir is None:
            continue
        if run_dir in owner:
            problems.append(
                f"clusters[{index}] {config.name!r}: run dir {str(run_dir)!r} is already used by "
                f"{owner[run_dir]}; two clusters on one run dir would drive one emulator "
                "twice: give each its own (or leave run_dir empty for one of its own)"
            )
        else:
            owner[run_dir] = f"clusters[{index}] {config.name!r}"
