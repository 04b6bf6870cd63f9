"""Wait for a condition with a deadline: the one polling loop the tests share.

Tests wait on what they need (a job RUNNING, a process gone, an event published), never
on a fixed sleep; these helpers poll the condition and fail with what was awaited.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(check: Callable[[], bool], timeout_s: float, what: str, step: float = 0.2) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(step)  # sleep-noqa: the one poll the tests share


def wait_for(find: Callable[[], T | None], timeout_s: float, what: str, step: float = 0.2) -> T:
    """Like ``wait_until``, for a check that finds something: returns the first value of
    ``find()`` that is not None. An assertion ``find`` raises (the job ended early) fails at
    once with its own message."""
    found: list[T] = []

    def check() -> bool:
        value = find()
        if value is not None:
            found.append(value)
        return bool(found)

    wait_until(check, timeout_s, what, step)
    return found[0]


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
        await asyncio.sleep(step)  # sleep-noqa: the one poll the tests share
