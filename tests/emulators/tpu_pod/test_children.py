"""The emulator waits for its hosts' shells without a thread per child (a 256-host fan-out
starts 256 shells at once)."""

from __future__ import annotations

import asyncio
import threading
import warnings
from collections.abc import Iterator

import pytest

from emulators.tpu_pod.children import pidfd_works, wait_children_with_pidfds


@pytest.fixture
def restore_child_watcher() -> Iterator[None]:
    # the watcher is process-wide on 3.11: later tests must get theirs back
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        policy = asyncio.get_event_loop_policy()
        before = getattr(policy, "_watcher", None)
        yield
        if hasattr(policy, "set_child_watcher"):
            policy.set_child_watcher(before)


@pytest.mark.skipif(not pidfd_works(), reason="this kernel or sandbox gives no pidfds")
@pytest.mark.usefixtures("restore_child_watcher")
def test_shells_are_waited_for_without_a_thread_each() -> None:
    async def run() -> tuple[list[int], int]:
        wait_children_with_pidfds()
        threads = threading.active_count()
        procs = [await asyncio.create_subprocess_exec("bash", "-c", f"exit {i}") for i in range(8)]
        during = threading.active_count()
        codes = [await p.wait() for p in procs]
        return codes, during - threads

    codes, new_threads = asyncio.run(run())
    assert codes == list(range(8))  # every exit status still reaches its process
    assert new_threads == 0
