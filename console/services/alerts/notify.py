"""``Alerter``: apprise receivers fed from the bus, never on the recovery's path.

    EventSink -> bus -> Alerter.offer (no I/O, never blocks) -> one queue per receiver
                                      -> that receiver's task: rate limit, apprise, retry

The event path only appends to a bounded queue: a receiver that is dead or hangs holds up
its own task, nothing else (not the journal, not the recovery, not the other receivers). A
full queue drops its oldest alert, and the count is journaled when the task gets to the next.

An alert is sent once (``rules.Alert.key``: one per incident for its preemption, one when
its recovery closes it) and only for rows this process journaled (the rows it follows from
other front ends are theirs to send). Every attempt is journaled as an ``alert`` row:
receiver name, alert kind, whether apprise delivered it, attempt; never the URL (its token).
apprise's own log lines name URLs, so its logger is kept out of every output.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from console.config.alerts import AlertsConfig, NotifyConfig
from console.services.alerts.rules import ALERT, Alert, alert_for, notify_type, text_of
from console.services.model import Event, Update
from console.services.record.sink import EventSink

log = logging.getLogger(__name__)

MASKED_URL = "<apprise url>"
_SEEN = 4096  # alert keys remembered (dedup)


@dataclass
class _Receiver:
    hook: NotifyConfig
    url: str
    queue: collections.deque[Alert]
    apprise: Any = None  # the receiver's apprise.Apprise, made at start
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    dropped: int = 0
    sent_at: collections.deque[float] = field(default_factory=collections.deque)
    busy: bool = False


class Alerter:
    """Sends alerts to ``settings.notify`` (``urls``: name -> apprise URL with its secrets,
    read from the env)."""

    def __init__(
        self,
        settings: AlertsConfig,
        urls: Mapping[str, str],
        sink: EventSink,
        *,
        source: str = "",
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
    ) -> None:
        self.settings = settings
        self._sink = sink
        self._source = source
        self._clock = clock
        self._monotonic = monotonic
        self._sleep = sleep
        self._kinds = frozenset(settings.kinds)
        self._receivers = [
            _Receiver(w, urls[w.name], collections.deque(maxlen=settings.queue))
            for w in settings.notify
        ]
        self._seen: collections.OrderedDict[str, None] = collections.OrderedDict()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: int | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._settled = asyncio.Event()  # set whenever a receiver's task runs dry

    @property
    def active(self) -> bool:
        return bool(self._receivers)

    # -- the event path: no I/O, no waiting -------------------------------------------------------
    def offer(self, update: Update) -> None:
        """The bus callback: an event that is an alert goes on every receiver's queue."""
        if not isinstance(update, Event) or update.kind == ALERT or not self._receivers:
            return
        if update.id is not None and not self._sink.own(update.id):
            return  # another front end journaled it: that one sends it
        alert = alert_for(update)
        if alert is None or alert.kind not in self._kinds:
            return
        loop = self._loop
        if loop is None or threading.get_ident() == self._thread:
            self._enqueue(alert)
        else:  # published from a worker thread: queue it on the loop
            loop.call_soon_threadsafe(self._enqueue, alert)

    def _enqueue(self, alert: Alert) -> None:
        if alert.key in self._seen:
            return
        self._seen[alert.key] = None
        if len(self._seen) > _SEEN:
            self._seen.popitem(last=False)
        for r in self._receivers:
            if len(r.queue) == r.queue.maxlen:
                r.dropped += 1  # the deque drops its oldest on append
            r.queue.append(alert)
            r.ready.set()

    # -- lifecycle -------------------------------------------------------------------------------
    async def start(self) -> None:
        if self._tasks or not self._receivers:
            return
        self._loop = asyncio.get_running_loop()
        self._thread = threading.get_ident()
        import apprise

        quiet = logging.getLogger("apprise")  # its lines name the URL (the token)
        quiet.propagate = False
        quiet.addHandler(logging.NullHandler())
        for r in self._receivers:
            r.apprise = apprise.Apprise()
            if not r.apprise.add(r.url):  # the config checked it; the env changed since
                log.warning("alerts: apprise refused the URL of %s", r.hook.name)
            r.ready = asyncio.Event()
            if r.queue:
                r.ready.set()
            self._tasks.append(
                asyncio.create_task(self._run(r), name=f"phantom-alerts-{r.hook.name}")
            )

    async def stop(self, drain_s: float = 2.0) -> None:
        """Give queued alerts ``drain_s`` to go out (a recovery's last alert at a script's
        end), then stop: a dead receiver delays shutdown by that much at most."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(drain_s):
                await self.idle()
        tasks, self._tasks = self._tasks, []
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        self._loop = None

    async def idle(self) -> None:
        """Wait until every queue is empty and no delivery is under way (tests, shutdown)."""
        while not self._quiet():
            self._settled.clear()
            await self._settled.wait()

    def _quiet(self) -> bool:
        return not any(r.queue or r.busy for r in self._receivers)

    # -- one receiver's task ---------------------------------------------------------------------
    async def _run(self, r: _Receiver) -> None:
        while True:
            await r.ready.wait()
            r.ready.clear()
            while r.queue:
                alert = r.queue.popleft()
                r.busy = True
                try:
                    if r.dropped:
                        dropped, r.dropped = r.dropped, 0
                        await self._journal(
                            r,
                            alert,
                            f"alerts to {r.hook.name}: {dropped} dropped (queue full: the "
                            "receiver is slow or down)",
                            dropped=dropped,
                        )
                    await self._deliver(r, alert)
                except asyncio.CancelledError:
                    raise
                except Exception:  # an alert never takes its receiver's task down
                    log.exception("alert to %s failed", r.hook.name)
                finally:
                    r.busy = False
            self._settled.set()

    async def _deliver(self, r: _Receiver, alert: Alert) -> None:
        now = self._monotonic()
        while r.sent_at and now - r.sent_at[0] >= 60.0:
            r.sent_at.popleft()
        if len(r.sent_at) >= self.settings.per_minute:
            await self._journal(
                r,
                alert,
                f"alert {alert.kind} to {r.hook.name} not sent: more than "
                f"{self.settings.per_minute} a minute (alerts.per_minute)",
                status="rate_limited",
            )
            return
        r.sent_at.append(now)
        title, body = text_of(alert, self._source)
        attempts = self.settings.retries + 1
        for attempt in range(1, attempts + 1):
            ok, error = await self._notify(r, title, body, notify_type(alert))
            again = not ok and attempt < attempts
            what = "delivered" if ok else f"not delivered ({error})"
            await self._journal(
                r,
                alert,
                f"alert {alert.kind} to {r.hook.name}: {what}"
                + ("" if ok or not again else f" (attempt {attempt}/{attempts}, retrying)"),
                error=error,
                attempt=attempt,
                ok=ok,
            )
            if not again:
                return
            await self._sleep(self.settings.backoff_s * 2 ** (attempt - 1))

    async def _notify(self, r: _Receiver, title: str, body: str, kind: str) -> tuple[bool, str]:
        try:
            async with asyncio.timeout(self.settings.timeout_s):
                ok = await r.apprise.async_notify(body=body, title=title, notify_type=kind)
        except TimeoutError:
            return False, f"no answer within {self.settings.timeout_s:g}s"
        except Exception as exc:  # apprise's errors may name the URL: masked before journaling
            return False, _masked(f"{type(exc).__name__}: {exc}", r.url)
        return bool(ok), "" if ok else "apprise reported a failure"

    async def _journal(self, r: _Receiver, alert: Alert, message: str, **data: Any) -> None:
        await self._sink.emit(
            Event(
                at=self._clock(),
                kind=ALERT,
                message=_masked(message, r.url),
                actor="alerts",
                data={
                    "receiver": r.hook.name,
                    "alert": alert.kind,
                    "key": alert.key,
                    # Not "incident": an alert row is about an incident, not a part of it.
                    "for_incident": alert.incident,
                    **{k: _masked(v, r.url) if isinstance(v, str) else v for k, v in data.items()},
                },
            )
        )


def _masked(text: str, url: str) -> str:
    """``text`` without the URL or any part that carries its token (path, query)."""
    if not url:
        return text
    from yarl import URL

    parsed = URL(url)
    parts = {url, str(parsed), parsed.path_qs, parsed.raw_path_qs, parsed.password or ""}
    for part in sorted((p for p in parts if len(p) > 1), key=len, reverse=True):
        text = text.replace(part, MASKED_URL)
    return text
