"""``EventSink``: the one way an event or an action record enters the console.

Journal first, then publish the stored row. What the front ends receive live is exactly the
row the journal holds (scrubbed, with its ``id``), so a screen that reloads the journal
after a restart shows the same events under the same keys: nothing shows twice, and a
secret cannot show live and masked later.

Writes run in one worker thread, in the order they were asked for, so ids follow the order
of emission even when a synchronous callback (a host-key change, the tunnel dropping) emits
between two awaited writes. A journal that fails (disk full) never stops the services: the
event is still published, scrubbed, without an id, and the failure is logged.

The same thread runs the ``IncidentTracker``: a row that belongs to an open incident is
journaled with its id, and the row that ends one is followed by the incident's summary row
(journaled, then published, like any other).
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import logging
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from console.services.model import ActionResult, Event, Update
from console.services.record.incidents import KEY, IncidentTracker, incident_of
from console.services.record.journal import ACTION, Journal

log = logging.getLogger(__name__)


class EventSink:
    def __init__(
        self,
        journal: Journal,
        publish: Callable[[Update], None],
        *,
        clock: Callable[[], float] = time.time,
        incidents: IncidentTracker | None = None,
    ) -> None:
        self.journal = journal
        if incidents is None:
            incidents = IncidentTracker(cluster=journal.cluster)
            try:
                incidents.resume(journal)
            except Exception as exc:  # a record, never a reason not to start
                log.error("journal: could not resume the open incident: %s", exc)
        self.incidents = incidents
        self._publish = publish
        self._clock = clock
        self._writer = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="journal")
        self._pending: set[asyncio.Future[Any]] = set()
        # Ids of the rows this process wrote (recent ones): what it follows from the journal
        # is what the *other* front ends wrote.
        self._own: collections.deque[int] = collections.deque(maxlen=4096)
        self._own_set: set[int] = set()

    def own(self, row_id: int) -> bool:
        """Whether this process wrote the journal row ``row_id``."""
        return row_id in self._own_set

    async def emit(self, event: Event) -> Event:
        """Journal ``event``, then publish and return the stored row."""
        return await self._write(self._store_event, event)

    async def record(self, result: ActionResult, actor: str) -> Event:
        """Journal an action (who, what, per-host results, duration), then publish it."""
        return await self._write(self._store_result, result, actor)

    def emit_soon(self, event: Event) -> None:
        """``emit`` from synchronous code on the loop (callbacks): queued in order."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop (a synchronous caller at shutdown): journal only
            self._store_quietly(self._store_event, event)
            return
        fut = asyncio.ensure_future(self._write(self._store_event, event), loop=loop)
        self._pending.add(fut)
        fut.add_done_callback(self._pending.discard)

    def note_foreign(self, rows: list[Event]) -> None:
        """Rows other processes journaled: their incidents open and end here too (in the
        writer thread, in order with this process's own writes)."""
        if rows:
            self._writer.submit(self._note_foreign, rows)

    def _note_foreign(self, rows: list[Event]) -> None:
        for row in rows:
            self.incidents.foreign(row)

    async def flush(self) -> None:
        """Wait until everything emitted so far is journaled and published."""
        while self._pending:
            await asyncio.gather(*list(self._pending), return_exceptions=True)

    def close(self) -> None:
        self._writer.shutdown(wait=True)

    # -- in the writer thread ------------------------------------------------------------------
    def _store_event(self, event: Event) -> list[Event]:
        return self._closing(self.journal.record_event(self.incidents.stamp(event)))

    def _store_result(self, result: ActionResult, actor: str) -> list[Event]:
        probe = Event(
            at=self._clock() - max(0.0, result.elapsed_s),
            kind=ACTION,
            message=result.message,
            actor=actor,
            data={**result.data, "action": result.action},
        )
        incident = incident_of(self.incidents.stamp(probe))
        if incident:
            result = replace(result, data={**result.data, KEY: incident})
        return self._closing(self.journal.record_result(result, actor))

    def _closing(self, stored: Event) -> list[Event]:
        """The stored row, then the summary of the incident it closed (if it closed one)."""
        summary = self.incidents.stored(stored)
        if summary is None:
            return [stored]
        try:
            return [stored, self.journal.record_event(summary)]
        except Exception as exc:  # the row itself is stored: publish it all the same
            log.error("journal: could not record the summary of %s: %s", summary.data[KEY], exc)
            return [stored]

    async def _write(self, store: Callable[..., list[Event]], *args: Any) -> Event:
        loop = asyncio.get_running_loop()
        try:
            rows = await loop.run_in_executor(self._writer, store, *args)
        except Exception as exc:  # the journal is a record, never a reason to stop
            log.error("journal: could not record %s: %s", _what(args), exc)
            rows = [self._unsaved(args)]
        for stored in rows:
            if stored.id is not None:
                if len(self._own) == self._own.maxlen:
                    self._own_set.discard(self._own[0])
                self._own.append(stored.id)
                self._own_set.add(stored.id)
            self._publish(stored)
        return rows[0]

    def _store_quietly(self, store: Callable[..., list[Event]], *args: Any) -> None:
        try:
            store(*args)
        except Exception as exc:
            log.error("journal: could not record %s: %s", _what(args), exc)

    def _unsaved(self, args: tuple[Any, ...]) -> Event:
        scrub = self.journal.scrub
        first = args[0]
        if isinstance(first, Event):
            event = first
        else:  # an ActionResult that could not be stored: publish what it says
            result: ActionResult = first
            event = Event(
                at=self._clock() - result.elapsed_s,
                kind=ACTION,
                message=result.message or f"{result.action} {'ok' if result.ok else 'failed'}",
                actor=str(args[1]),
                data={"action": result.action, "ok": result.ok},
            )
        return replace(
            event,
            message=scrub.text(event.message),
            host=scrub.text(event.host),
            data=scrub.data(dict(event.data)),
            id=None,
            cluster=event.cluster or self.journal.cluster,
        )


def _what(args: tuple[Any, ...]) -> str:
    first = args[0]
    return first.kind if isinstance(first, Event) else getattr(first, "action", "?")
