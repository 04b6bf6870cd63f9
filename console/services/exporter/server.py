"""``MetricsServer``: ``/metrics`` and ``/healthz`` over HTTP, on the services' event loop.

Bound before anything else starts (``bind``), so a port in use is an error before a single
poll; served by aiohttp on the loop the watchdog runs on, so ``/healthz`` answers only while
that loop turns (200 ``ok`` while the poll loop publishes, 503 with the reason otherwise).
``Exporter`` is the bus consumer the facade starts and stops: the series plus, every
``ledger_every_s`` and after each incident, the ledger's goodput and cost.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Protocol

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST

from console.config.listen import Listen
from console.services.exporter.series import WatchSeries
from console.services.ledger.book import LedgerSettings
from console.services.model import Event, Update
from console.services.record.incidents import INCIDENT
from console.services.settings import ClusterIdentity, Polling

log = logging.getLogger(__name__)

# The journal's newest rows a restarted watcher reads for the losses already counted (the
# recovery it may resume is among the newest).
SEEN_ROWS = 4096
LedgerRead = Callable[[], Awaitable[Mapping[str, Any]]]
ReadRows = Callable[[int], Awaitable[Sequence[Event]]]


def exporter_for(
    cluster: ClusterIdentity,
    polling: Polling,
    ledger: LedgerSettings,
    listen: Listen,
    rows: ReadRows,
) -> Exporter:
    """The exporter every front end starts the same way: the series for ``cluster``, served
    on ``listen``, /healthz alive while a poll finished within ``polling.alive_s``, the ledger
    gauges from the journal's ``rows``."""
    series = WatchSeries(
        zone=cluster.zone,
        hosts_total=cluster.hosts,
        alive_within_s=polling.alive_s,
        cluster=cluster.name,
    )
    return Exporter(
        series, MetricsServer(series, listen), ledger=journal_ledger(ledger, rows), history=rows
    )


def journal_ledger(settings: LedgerSettings, rows: ReadRows) -> LedgerRead:
    """The ledger over the whole journal, built off the loop (no job logs: the gauges need
    goodput and money, not the checkpoint advice)."""
    from console.services.ledger.book import ROWS, book

    async def read() -> Mapping[str, Any]:
        events = list(await rows(ROWS))
        now = time.time()
        result = await asyncio.to_thread(book, events, settings, now=now)
        return result.ledger.to_json()

    return read


class Scraped(Protocol):
    """What the server serves: one cluster's series (``WatchSeries``) or a fleet's."""

    def render(self) -> bytes: ...

    def health(self) -> str: ...


class MetricsServer:
    def __init__(self, series: Scraped, listen: Listen) -> None:
        self.series = series
        self.listen = listen
        self._runner: web.AppRunner | None = None
        self.port = listen.port  # the port bound (``listen.port`` 0 picks a free one)

    async def bind(self) -> None:
        """Listen now; OSError (port in use, address not on this machine) leaves nothing."""
        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/healthz", self._healthz)
        runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await runner.setup()
        # SO_REUSEADDR: a watcher restarted right after a crash binds the port its scraped
        # predecessor left in TIME_WAIT; a port another process listens on is still refused
        # (that is SO_REUSEPORT, never set).
        site = web.TCPSite(
            runner, self.listen.host, self.listen.port, reuse_address=True, reuse_port=False
        )
        try:
            await site.start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        server = site._server  # the one listening socket: the port really bound
        sockets = getattr(server, "sockets", None) or ()
        for sock in sockets:
            self.port = int(sock.getsockname()[1])

    async def close(self) -> None:
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

    async def _metrics(self, request: web.Request) -> web.Response:
        body = self.series.render()
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def _healthz(self, request: web.Request) -> web.Response:
        why = self.series.health()
        if not why:
            return web.Response(text="ok\n")
        return web.Response(status=503, text=f"{why}\n")


class Exporter:
    """The series and their server as one bus consumer (``facade.BusConsumer``)."""

    def __init__(
        self,
        series: WatchSeries,
        server: MetricsServer,
        *,
        ledger: LedgerRead | None = None,
        ledger_every_s: float = 60.0,
        history: ReadRows | None = None,
    ) -> None:
        self.series = series
        self.server = server
        self._ledger = ledger
        self._history = history  # the journal's newest rows: losses counted before us
        self._every = ledger_every_s
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def set_ledger_reader(self, ledger: LedgerRead) -> None:
        """Where the goodput and cost gauges come from (read off the event path)."""
        self._ledger = ledger

    def offer(self, update: Update) -> None:
        self.series.offer(update)
        if isinstance(update, Event) and update.kind == INCIDENT and self._loop is not None:
            self._loop.call_soon_threadsafe(self._wake.set)

    async def start(self) -> None:
        if self.server._runner is None:
            await self.server.bind()
        self._loop = asyncio.get_running_loop()
        if self._history is not None:
            try:
                self.series.counted(await self._history(SEEN_ROWS))
            except Exception as exc:  # the journal is busy or broken: count from now on
                log.info("metrics: the journal's losses not read (%s)", exc)
        if self._ledger is not None and self._task is None:
            self._task = asyncio.create_task(self._refresh(), name="phantom-metrics-ledger")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._loop = None
        await self.server.close()

    async def _refresh(self) -> None:
        assert self._ledger is not None
        while True:
            try:
                self.series.set_ledger(await self._ledger())
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the journal is busy or broken: the gauges wait
                log.info("metrics: ledger not read (%s)", exc)
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._every):
                    await self._wake.wait()
