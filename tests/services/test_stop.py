"""A stop ends every poller even when a cancel is swallowed.

Python 3.11's ``asyncio.wait_for`` can drop a cancel that arrives as its inner call completes;
a poller that lost its cancel polled on, and ``Facade.stop`` waited for it for ever (a second
``phantom --script`` on the same journal never exited). Both guards are checked here with a
task that swallows its first cancel, as that ``wait_for`` does.
"""

from __future__ import annotations

import asyncio
import contextlib
from types import SimpleNamespace

from console.services.facade import Facade, cancel_and_wait


async def _forever() -> None:
    await asyncio.Event().wait()  # until cancelled


async def _swallows_one_cancel() -> None:
    with contextlib.suppress(asyncio.CancelledError):  # swallowed
        await _forever()
    await _forever()


async def test_cancel_and_wait_ends_a_task_that_swallowed_its_cancel() -> None:
    task = asyncio.create_task(_swallows_one_cancel())
    await asyncio.wait({task}, timeout=0)  # let it reach its first wait
    async with asyncio.timeout(10):
        await cancel_and_wait([task], repeat_s=0.05)
    assert task.cancelled()


async def test_a_poller_loop_stops_after_a_poll_that_swallowed_the_cancel() -> None:
    swallowed = asyncio.Event()

    async def poll() -> None:
        try:
            await _forever()
        except asyncio.CancelledError:
            swallowed.set()  # returns normally, as a poll through 3.11's wait_for can

    holder = SimpleNamespace(poll_interval_s=30.0)
    loop = asyncio.create_task(Facade._loop(holder, poll, "test"))  # type: ignore[arg-type]
    await asyncio.wait({loop}, timeout=0)  # let it reach its poll
    loop.cancel()
    async with asyncio.timeout(10):
        await swallowed.wait()
        await asyncio.wait({loop})
    assert loop.cancelled()
