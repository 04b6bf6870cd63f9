"""One injected clock for tests: time stands still until a test (or an awaited sleep) moves it."""

from __future__ import annotations

import asyncio


class Clock:
    def __init__(self, t: float = 1000.0) -> None:
        self.t = t
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.t

    async def sleep(self, s: float) -> None:
        self.sleeps.append(s)
        self.t += s
        await asyncio.sleep(0)  # sleep-noqa: one turn of the loop
