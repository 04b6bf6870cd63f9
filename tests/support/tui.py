"""The TUI under test: the app on fake services with a fixed clock, and waiting for it.

Deterministic: time is ``T0``, the "ago" ticker is off, cursors do not blink. Tests wait for
workers and messages, never sleep.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager

from textual.pilot import Pilot

from console.tui.app import GC_YOUNG_THRESHOLD, PhantomApp, TuiSettings
from tests.support.fake_data import T0
from tests.support.fake_fleet import fake_fleet
from tests.support.fake_services import FakeServices


def make_app(services: FakeServices | str | None = None, **settings: object) -> PhantomApp:
    """The app on ``services`` (a scenario name builds ``FakeServices(scenario)``)."""
    if services is None or isinstance(services, str):
        services = FakeServices(services or "preempted")
    opts = {"tick_s": None, "cursor_blink": False, **settings}
    return PhantomApp(services, clock=lambda: T0, settings=TuiSettings(**opts))  # type: ignore[arg-type]


def make_fleet_app(
    fleet: Mapping[str, FakeServices] | None = None, **settings: object
) -> PhantomApp:
    """The app over a fleet of fakes (default: ``fake_fleet()``'s three), on the first."""
    members = dict(fleet) if fleet is not None else fake_fleet()
    opts = {"tick_s": None, "cursor_blink": False, **settings}
    first = next(iter(members.values()))
    return PhantomApp(
        first,  # type: ignore[arg-type]
        clock=lambda: T0,
        settings=TuiSettings(**opts),  # type: ignore[arg-type]
        fleet=members,  # type: ignore[arg-type]
    )


async def settle(pilot: Pilot[int], *, streams: bool = False) -> None:
    """Let messages and workers finish. A live log stream never does, so it is not waited
    for unless ``streams`` (the fakes close theirs: a snapshot waits for its lines)."""
    await pilot.pause()
    if streams:
        await pilot.app.workers.wait_for_complete()
    else:
        workers = [w for w in pilot.app.workers if w.group != "follow" and not w.is_finished]
        if workers:  # (an empty list would mean "all workers" to wait_for_complete)
            await pilot.app.workers.wait_for_complete(workers)
    await pilot.pause()


async def wait_for(pilot: Pilot[int], condition: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met before the deadline"
        await pilot.pause(0.02)


def keys(*presses: str) -> Callable[[Pilot[int]], Awaitable[None]]:
    """A snapshot's ``run_before``: settle, then each key and settle again."""

    async def run(pilot: Pilot[int]) -> None:
        await settle(pilot, streams=True)
        for key in presses:
            await pilot.press(key)
            await settle(pilot, streams=True)

    return run


@contextmanager
def young_gc_threshold() -> Iterator[None]:
    """A larger young generation while an app runs, as ``run_tui`` sets for the console
    (``GC_YOUNG_THRESHOLD``): an app allocates widgets and styles by the hundred thousand,
    and at CPython's 700 their promotions started a full pass over the whole test process
    (~0.1 s each, about one per test: a quarter of a snapshot test's CPU). Restored after."""
    before = gc.get_threshold()
    gc.set_threshold(GC_YOUNG_THRESHOLD, *before[1:])
    try:
        yield
    finally:
        gc.set_threshold(*before)
