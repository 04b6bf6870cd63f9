"""`phantom watch`: run the services and their watchdog until SIGTERM/SIGINT (or one pass).

    watch_main(config, WatchOptions(...)) -> exit code

Order matters for "bad input leaves nothing running": the one-watcher-per-cluster lock is
taken first (a second watcher: exit 2 naming the holder), then the metrics port is bound
(in use: exit 2), and only then are the services built and started. SIGTERM or SIGINT stop
the services (a recovery under way is cancelled between journal writes; the journal is
flushed and closed) and exit 0; a watcher started again adopts the interrupted recovery from
the journal (the facade's takeover), so its incident is finished, not opened twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TextIO

from console import exit_codes
from console.config import Config, ConfigError
from console.config.listen import Listen
from console.secrets import Scrubber
from console.services.model import Event, Update
from console.watch.lines import Format, LineWriter

if TYPE_CHECKING:
    from console.services.api import ConsoleServices
    from console.services.exporter.server import Exporter
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
    out = sys.stdout if stdout is None else stdout
    err = sys.stderr if stderr is None else stderr
    scrub = Scrubber(
        [config.wandb.api_key_env, config.gke.hf_token_env, *config.alerts.secret_envs]
    )
    if lease is None:
        from console.wiring import watcher_lease

        lease = watcher_lease(config)
    if not lease.try_acquire():
        holder = lease.holder()
        who = holder.describe() if holder is not None else "another process"
        print(
            f"phantom watch: another watcher already runs for {config.cluster.node_name} "
            f"({who}); one watcher per cluster: stop that one first (or use `phantom status`)",
            file=err,
        )
        return exit_codes.USAGE
    try:
        return asyncio.run(
            _watch(config, options, services_factory, LineWriter(out, options.fmt, scrub), err)
        )
    except KeyboardInterrupt:  # a second Ctrl-C while stopping
        return exit_codes.INTERRUPTED
    finally:
        lease.release()


async def _watch(
    config: Config,
    options: WatchOptions,
    factory: ServicesFactory | None,
    lines: LineWriter,
    err: TextIO,
) -> int:
    exporter = None
    built: list[Facade] = []
    if options.metrics is not None:
        from console.wiring import metrics_exporter

        # Bound before the services exist (a port in use stops here); its ledger reads their
        # journal once they do.
        exporter = metrics_exporter(config, options.metrics, lambda n: built[0].events(limit=n))
        try:
            await exporter.server.bind()
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
    try:
        services = _build(config, factory)
    except ConfigError as exc:
        print(exc.render(), file=err)
        await _close(exporter)
        return exit_codes.USAGE
    except Exception as exc:  # the factory names what is missing (no pod, bad key...)
        print(f"phantom watch: cannot reach the cluster: {exc}", file=err)
        await _close(exporter)
        return exit_codes.FAILED
    built.append(services)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)

    def on_update(update: Update) -> None:
        if isinstance(update, Event):
            lines.event(update)

    unsubscribe = services.subscribe(on_update)
    if exporter is not None:
        services.subscribe(exporter.offer)
    code = exit_codes.OK
    started: asyncio.Task[None] | None = None
    try:
        if exporter is not None:
            await exporter.start()
        started = asyncio.create_task(services.start())
        await _first(started, stop)
        if not stop.is_set():
            await started
            info: dict[str, Any] = {"cluster": config.cluster.node_name, "once": options.once}
            if exporter is not None:
                info["metrics"] = (
                    f"http://{_url_host(options.metrics)}:{exporter.server.port}/metrics"
                )
            lines.note("started", f"watching {config.cluster.node_name}", **info)
            if options.once:
                code = await _one_pass(services, stop)
            else:
                await stop.wait()
        lines.note("stopping", "stopping (the cluster keeps running)")
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
        if started is not None and not started.done():
            started.cancel()
            with contextlib.suppress(BaseException):
                await started
        # A recovery under way is left to the next watcher (journaled as interrupted, the
        # incident open), not ended as failed: the cluster still needs it.
        await services.stop(resumable=True)
        unsubscribe()
        await _close(exporter)
        services.close_journal()
    lines.note("stopped", "stopped", exit_code=code)
    return code


async def _first(task: asyncio.Task[None], stop: asyncio.Event) -> None:
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


def _build(config: Config, factory: ServicesFactory | None) -> Facade:
    if factory is not None:
        return factory(config)
    from console.wiring import make_services

    # Never starts a pod: a watcher watches what runs (`phantom pod up` starts one).
    return make_services(config, autostart_pod=False)


def _url_host(listen: Listen | None) -> str:
    host = listen.host if listen is not None else "127.0.0.1"
    return f"[{host}]" if ":" in host else host


async def _close(exporter: Exporter | None) -> None:
    if exporter is not None:
        await exporter.stop()
