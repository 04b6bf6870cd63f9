"""`phantom watch`: run the services and their watchdog until SIGTERM/SIGINT (or one pass).

    watch_main(config, WatchOptions(...)) -> exit code           one cluster
    watch_fleet_main(fleet, WatchOptions(...)) -> exit code      every cluster of a fleet

Over a fleet each cluster has its own services (``console.wiring.fleet``), lease, journal
and tasks in this one process; nothing blocks the event loop and no lock is shared, so one
cluster's slow API, hung SSH or long recovery never delays another's detection. Every line
names its cluster; the metrics of all of them are served on one ``/metrics``, each series
labelled with its ``cluster``.

Order matters for "bad input leaves nothing running": the one-watcher-per-cluster locks are
taken first (a second watcher on any of the clusters: exit 2 naming it and the holder), then
the metrics port is bound (in use: exit 2), and only then are the services built and
started. SIGTERM or SIGINT stop
the services (a recovery under way is cancelled between journal writes; the journal is
flushed and closed) and exit 0; a watcher started again adopts the interrupted recovery from
the journal (the facade's takeover), so its incident is finished, not opened twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TextIO

from console import exit_codes
from console.config import Config, ConfigError
from console.config.fleet import Fleet
from console.config.listen import Listen
from console.secrets import Scrubber
from console.services.model import Event
from console.watch.lines import Format, LineWriter

if TYPE_CHECKING:
    from console.services.api import ConsoleServices
    from console.services.exporter.server import Exporter, MetricsServer, ReadRows
    from console.services.facade import Facade
    from console.services.record.lease import FileLease

# The real services (the facade: a SIGTERM leaves a recovery under way resumable, which only
# the facade's stop knows how to do); tests point the config at the pod emulator.
ServicesFactory = Callable[[Config], "Facade"]


@dataclass(frozen=True)
class WatchOptions:
    metrics: Listen | None = None
    once: bool = False
    fmt: Format = "json"


def watch_main(
    config: Config,
    options: WatchOptions,
    *,
    services_factory: ServicesFactory | None = None,
    lease: FileLease | None = None,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
) -> int:
    """One cluster (a [cluster] config, or `--cluster NAME watch` on a fleet)."""
    return watch_fleet_main(
        Fleet((config,), config.source),
        options,
        services_factory=services_factory,
        leases={config.name: lease} if lease is not None else None,
        stdout=stdout,
        stderr=stderr,
    )


def watch_fleet_main(
    fleet: Fleet,
    options: WatchOptions,
    *,
    services_factory: ServicesFactory | None = None,
    leases: Mapping[str, FileLease] | None = None,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
) -> int:
    """Every cluster of ``fleet`` in this one process: a watchdog each, with its own lease,
    journal and services, each on its own tasks, so that one cluster's slow API, hung SSH or
    long recovery never delays another's detection. Bad input (a cluster another watcher
    guards, a port in use) is refused before any cluster is watched."""
    out = sys.stdout if stdout is None else stdout
    err = sys.stderr if stderr is None else stderr
    clusters = [_Cluster(c, (leases or {}).get(c.name) or _lease(c)) for c in fleet.members]
    secrets = [
        name
        for c in fleet.members
        for name in (c.wandb.api_key_env, c.gke.hf_token_env, *c.alerts.secret_envs)
    ]
    scrub = Scrubber(list(dict.fromkeys(secrets)))
    for taken, cluster in enumerate(clusters):
        if cluster.lease.try_acquire():
            continue
        holder = cluster.lease.holder()
        who = holder.describe() if holder is not None else "another process"
        print(
            f"phantom watch: another watcher already runs for {cluster.called} ({who}); one "
            "watcher per cluster: stop that one first (or use `phantom status`)",
            file=err,
        )
        for held in clusters[:taken]:
            held.lease.release()
        return exit_codes.USAGE
    lines = LineWriter(out, options.fmt, scrub, name_clusters=len(clusters) > 1)
    try:
        return asyncio.run(_watch(clusters, options, services_factory, lines, err))
    except KeyboardInterrupt:  # a second Ctrl-C while stopping
        return exit_codes.INTERRUPTED
    finally:
        for cluster in clusters:
            cluster.lease.release()


@dataclass
class _Cluster:
    """One watched cluster: its config, its lease, and once built, its services."""

    config: Config
    lease: FileLease
    services: Facade | None = None
    exporter: Exporter | None = None

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def called(self) -> str:
        """How messages name it: a fleet's cluster by its name, a [cluster] config's by its
        node (as they always did)."""
        if self.config.state_dir:
            return f"cluster {self.name!r}"
        return self.config.cluster.node_name


def _lease(config: Config) -> FileLease:
    from console.wiring import watcher_lease

    return watcher_lease(config)


async def _watch(
    clusters: list[_Cluster],
    options: WatchOptions,
    factory: ServicesFactory | None,
    lines: LineWriter,
    err: TextIO,
) -> int:
    server = None
    if options.metrics is not None:
        from console.wiring.fleet import metrics_exporters

        # Bound before the services exist (a port in use stops here); each cluster's ledger
        # reads its journal once they do.
        def rows(cluster: _Cluster) -> ReadRows:
            async def read(n: int) -> Sequence[Event]:
                assert cluster.services is not None
                return await cluster.services.events(limit=n)

            return read

        exporters = metrics_exporters(
            [c.config for c in clusters], options.metrics, [rows(c) for c in clusters]
        )
        for cluster, exporter in zip(clusters, exporters, strict=True):
            cluster.exporter = exporter
        server = exporters[0].server
        try:
            await server.bind()
        except OSError as exc:
            print(
                f"phantom watch: --metrics {options.metrics}: cannot listen there "
                f"({exc.strerror or exc}); pick a free port, e.g. --metrics 127.0.0.1:0",
                file=err,
            )
            return exit_codes.USAGE
        if not options.metrics.loopback:
            print(
                f"phantom watch: warning: metrics on {options.metrics}, reachable beyond this "
                "machine (the series name hosts, jobs and runs)",
                file=err,
            )
    code = _build(clusters, factory, err)
    if code != exit_codes.OK:
        if server is not None:
            await server.close()
        return code
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    unsubscribe: list[Callable[[], None]] = []
    for cluster in clusters:
        assert cluster.services is not None
        unsubscribe.append(cluster.services.subscribe(lines.on_update))
        if cluster.exporter is not None:
            unsubscribe.append(cluster.services.subscribe(cluster.exporter.offer))
    runs: list[asyncio.Task[int]] = []
    every: asyncio.Future[list[int]] | None = None
    code = exit_codes.OK
    try:
        for cluster in clusters:
            if cluster.exporter is not None:
                await cluster.exporter.start()
        # Each cluster on its own task: its first poll, its watchdog, its one pass.
        runs = [
            asyncio.create_task(_run(c, options, server, lines, stop), name=f"watch-{c.name}")
            for c in clusters
        ]
        every = asyncio.ensure_future(asyncio.gather(*runs))
        if options.once:
            await _first(every, stop)
            if not stop.is_set():
                code = max(every.result())
        else:
            await stop.wait()
            if every.done() and not every.cancelled() and every.exception() is None:
                code = max(every.result())
        kept = "the clusters keep" if len(clusters) > 1 else "the cluster keeps"
        lines.note("stopping", f"stopping ({kept} running)")
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
        for run in runs:
            run.cancel()
        await asyncio.gather(*runs, return_exceptions=True)
        if every is not None:
            with contextlib.suppress(BaseException):
                await every
        # A recovery under way is left to the next watcher (journaled as interrupted, the
        # incident open), not ended as failed: the cluster still needs it.
        await asyncio.gather(
            *(c.services.stop(resumable=True) for c in clusters if c.services is not None)
        )
        for off in unsubscribe:
            off()
        for cluster in clusters:
            if cluster.exporter is not None:
                await cluster.exporter.stop()
            if cluster.services is not None:
                cluster.services.close_journal()
    lines.note("stopped", "stopped", exit_code=code)
    return code


async def _run(
    cluster: _Cluster,
    options: WatchOptions,
    server: MetricsServer | None,
    lines: LineWriter,
    stop: asyncio.Event,
) -> int:
    """One cluster's watch: its services started (its first poll), announced, and with
    ``--once`` its one pass. A cluster that fails to start is said so; the others go on."""
    services = cluster.services
    assert services is not None
    try:
        await services.start()
    except Exception as exc:
        lines.note("failed", f"{cluster.called}: could not start: {exc}", cluster=cluster.name)
        return exit_codes.FAILED
    # A [cluster] config's lines name its node, as they always did.
    name = cluster.name if cluster.config.state_dir else cluster.config.cluster.node_name
    info: dict[str, Any] = {"cluster": name, "once": options.once}
    text = f"watching {name}"
    if server is not None:
        # the port bound, which `--metrics HOST:0` leaves to the system
        info["metrics"] = f"http://{_url_host(options.metrics)}:{server.port}/metrics"
        text += f", metrics at {info['metrics']}"
    lines.note("started", text, **info)
    if options.once:
        return await _one_pass(services, stop)
    return exit_codes.OK


async def _first(task: asyncio.Future[Any], stop: asyncio.Event) -> None:
    """Wait for ``task`` or a stop signal, whichever comes first."""
    waiter = asyncio.create_task(stop.wait())
    try:
        await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        waiter.cancel()


async def _one_pass(services: ConsoleServices, stop: asyncio.Event) -> int:
    """``--once``: one poll (the watchdog decides on it as always); a recovery it starts, or
    an interrupted one it adopts, is waited for. 0 healthy or recovered, 1 recovery failed."""
    await services.refresh()
    status = services.recovery_status()
    while status.active and not stop.is_set():
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(0.5):
                await stop.wait()
        status = services.recovery_status()
    if stop.is_set():
        return exit_codes.OK
    failed = status.outcome is not None and not status.ok
    return exit_codes.FAILED if failed and status.started_at else exit_codes.OK


def _build(clusters: list[_Cluster], factory: ServicesFactory | None, err: TextIO) -> int:
    """Every cluster's services, or an exit code naming the one that cannot be built (those
    built before it are closed: nothing is left half made)."""
    from console.wiring.fleet import ClusterBuildError, fleet_services

    if factory is None:
        from console.wiring import make_services

        # Never starts a pod: a watcher watches what runs (`phantom pod up` starts one).
        def factory(config: Config) -> Facade:
            return make_services(config, autostart_pod=False)

    try:
        built = fleet_services(Fleet(tuple(c.config for c in clusters)), build=factory)
    except ClusterBuildError as exc:
        which = next(c for c in clusters if c.name == exc.name)
        if isinstance(exc.cause, ConfigError):
            print(exc.cause.render(), file=err)
            return exit_codes.USAGE
        # the factory names what is missing (no pod, bad key...)
        what = which.called if which.config.state_dir else "the cluster"
        print(f"phantom watch: cannot reach {what}: {exc.cause}", file=err)
        return exit_codes.FAILED
    for cluster in clusters:
        cluster.services = built[cluster.name]
    return exit_codes.OK


def _url_host(listen: Listen | None) -> str:
    host = listen.host if listen is not None else "127.0.0.1"
    return f"[{host}]" if ":" in host else host
