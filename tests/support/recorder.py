"""One recorder of what services publish, for tests that subscribe to the real bus."""

from __future__ import annotations

import time

from console.services.model import Event, RecoveryStatus, Update


class Recorder:
    """Subscribe it (``services.subscribe(rec)``); it keeps every update, in order, with the
    wall time it arrived (``stamped``)."""

    def __init__(self) -> None:
        self.stamped: list[tuple[float, Update]] = []

    def __call__(self, u: Update) -> None:
        self.stamped.append((time.time(), u))

    @property
    def updates(self) -> list[Update]:
        return [u for _, u in self.stamped]

    def events(self, kind: str, host: str = "") -> list[Event]:
        """Events of ``kind`` (on ``host``, if given), in the order they were published."""
        return [
            u
            for u in self.updates
            if isinstance(u, Event) and u.kind == kind and (not host or u.host == host)
        ]

    def recoveries(self) -> list[RecoveryStatus]:
        """Each finished recovery once (its status is published again until the next)."""
        out: list[RecoveryStatus] = []
        for u in self.updates:
            if (
                isinstance(u, RecoveryStatus)
                and u.outcome is not None
                and (not out or out[-1].started_at != u.started_at)
            ):
                out.append(u)
        return out
