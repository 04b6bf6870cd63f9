"""``UpdateBus``: fan-out of published updates to the front ends' subscribers."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from console.services.model.updates import Update

log = logging.getLogger(__name__)


class UpdateBus:
    """Fan-out of published updates to subscribers (thread-safe, never blocks a publisher).

    The TUI subscribes with a callback that posts a Textual message; ``--script`` with one
    that writes a JSON line. A subscriber that raises is logged and kept; one bad front end
    cannot stall the services or the other subscribers.
    """

    def __init__(self) -> None:
        self._subs: list[Callable[[Update], None]] = []
        self._lock = threading.Lock()

    def subscribe(self, callback: Callable[[Update], None]) -> Callable[[], None]:
        with self._lock:
            self._subs.append(callback)

        def unsubscribe() -> None:
            with self._lock:
                if callback in self._subs:
                    self._subs.remove(callback)

        return unsubscribe

    def publish(self, update: Update) -> None:
        with self._lock:
            subs = list(self._subs)
        for cb in subs:
            try:
                cb(update)
            except Exception:  # a broken subscriber must not stop publishing to the others
                log.exception("update subscriber %r failed", cb)
