"""The TUI's entry: the app on the configured cluster, run, and the farewell that says what
keeps running after it closes (the console never tears anything down on its own)."""

from __future__ import annotations

import sys
import time
from dataclasses import replace

from console import exit_codes
from console.config import Config, ConfigError
from console.config.fleet import Fleet
from console.config.listen import Listen
from console.screens.keys import KeymapError, UserKeymap
from console.services.api import ConsoleServices
from console.services.capabilities import Capability
from console.services.model import PodSnapshot
from console.tui.app import PhantomApp, TuiSettings


def make_app(
    config: Config, *, settings: TuiSettings | None = None, metrics: Listen | None = None
) -> PhantomApp:
    """The app on the configured cluster (real services, imported only here, lazily, and
    built behind the first frame); ``metrics``: the Prometheus series served there too.
    ConfigError when the config's ``[keys]`` cannot be the console's keymap."""
    from console.wiring import deferred_services

    try:  # before anything is built
        UserKeymap.check(config.keys)
    except KeymapError as exc:
        raise ConfigError(config.source, exc.problems) from None
    settings = replace(settings or TuiSettings(), keys=config.keys)
    return PhantomApp(deferred_services(config, metrics), clock=time.time, settings=settings)


def make_fleet_app(fleet: Fleet, *, settings: TuiSettings | None = None) -> PhantomApp:
    """The app over every cluster of ``fleet`` (its Fleet screen first, the first cluster
    current). ConfigError when the config's ``[keys]`` cannot be the console's keymap."""
    keys = fleet.members[0].keys  # the console's, top level only: every member has it
    try:
        UserKeymap.check(keys)
    except KeymapError as exc:
        raise ConfigError(fleet.source, exc.problems) from None
    from console.wiring.fleet import deferred_fleet_services

    # Each cluster's own services (state dir, journal, leases, tunnel ends), built behind
    # the first frame: one slow or down cluster holds up neither the others nor the screen.
    members: dict[str, ConsoleServices] = dict(deferred_fleet_services(fleet))
    settings = replace(settings or TuiSettings(), keys=keys)
    first = members[fleet.names[0]]
    return PhantomApp(first, clock=time.time, settings=settings, fleet=members)


def run_fleet_tui(fleet: Fleet) -> int:
    try:
        app = make_fleet_app(fleet, settings=TuiSettings(gc_freeze=True))
    except ConfigError as exc:
        print(exc.render(), file=sys.stderr)
        return exit_codes.USAGE
    result = app.run()
    for name, member in app.fleet.items():  # what keeps running, cluster by cluster
        view = app.fleet_state.get(name)
        config = next(c for c in fleet.members if c.name == name)
        note = farewell(config, view.pod if view else None, member.capabilities)
        if note:
            print(f"[{name}] {note}", file=sys.stderr)
    if isinstance(result, int):
        return result
    return app.return_code or 0


def run_tui(config: Config, metrics: Listen | None = None) -> int:
    try:
        app = make_app(config, settings=TuiSettings(gc_freeze=True), metrics=metrics)
    except ConfigError as exc:
        print(exc.render(), file=sys.stderr)
        return exit_codes.USAGE
    result = app.run()
    note = farewell(config, app.state.pod, app.services.capabilities)
    if note:
        print(note, file=sys.stderr)
    if isinstance(result, int):
        return result
    return app.return_code or 0


def farewell(config: Config, pod: PodSnapshot | None, capabilities: frozenset[Capability]) -> str:
    """What keeps running after the console closes, and the commands that stop it: the
    console never tears anything down on its own when it is left. What runs is what the
    cluster can run (its backend's capabilities): TPU VMs and Ray, or workloads."""
    if pod is None or not (pod.hosts or pod.workloads):
        return ""
    if Capability.WORKLOADS in capabilities:
        return _farewell_workloads(config, pod, capabilities)
    stop_ray = "stop Ray: `echo teardown | phantom --script -`"
    ray = f"Ray on {pod.ray_alive} host(s)" if pod.ray_alive else ""
    if Capability.POD_EMULATOR in capabilities:
        running = f"the emulated pod {pod.node_name} ({len(pod.hosts)} hosts)"
        if ray:
            running += f" with {ray}"
        stops = ([stop_ray] if ray else []) + ["stop the pod and all on it: `phantom pod down`"]
    else:
        running = ray or f"the TPU VMs of {pod.node_name}"
        delete = (
            f"gcloud compute tpus tpu-vm delete {pod.node_name} "
            f"--zone={config.cluster.zone} --project={config.cluster.project}"
        )
        stops = ([stop_ray] if ray else []) + [f"the VMs are billed until deleted: `{delete}`"]
    return f"phantom: still running: {running}.\n  " + "\n  ".join(stops)


def _farewell_workloads(
    config: Config, pod: PodSnapshot, capabilities: frozenset[Capability]
) -> str:
    active = [w.name for w in pod.workloads if w.status.active]
    if Capability.GKE_EMULATOR in capabilities:
        where = f"the local GKE emulator ({len(pod.hosts)} nodes)"
        stops = ["stop it and every container on it: `phantom gke down`"]
    else:
        where = f"GKE cluster {config.gke.cluster or pod.node_name}"
        stops = []
    if active:
        shown = ", ".join(active[:5]) + (f" and {len(active) - 5} more" if len(active) > 5 else "")
        running = f"{len(active)} workload(s) ({shown}) on {where}"
        stops.insert(0, "delete one: `echo 'workload delete NAME' | phantom --script -`")
    else:
        running = where
        if not stops:
            return ""
    return f"phantom: still running: {running}.\n  " + "\n  ".join(stops)
