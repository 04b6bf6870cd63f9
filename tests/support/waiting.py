"""Wait for a condition with a deadline: the one polling loop the tests share.

Tests wait on what they need (a job RUNNING, a process gone, an event published), never
on a fixed sleep; these helpers poll the condition and fail with what was awaited.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable


def wait_until(check: Callable[[], bool], timeout_s: float, what: str, step: float = 0.2) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(step)


async def until(
    check: Callable[[], Awaitable[bool] | bool], timeout_s: float, what: str, step: float = 0.2
) -> None:
    """Async variant; ``check`` may be a plain or an async callable."""
    deadline = time.monotonic() + timeout_s
    while True:
        res = check()
        if inspect.isawaitable(res):
            res = await res
        if res:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        await asyncio.sleep(step)
