"""How the emulator waits for the shells its hosts run.

Every command an emulated host runs is a real process (``bash -c ...``), and at 256 hosts a
fan-out starts 256 of them at once. On Python 3.11 asyncio waits for each child with a new
thread (``ThreadedChildWatcher``: start a thread, wait until it runs, ``waitpid`` in it):
in a 256-host fan-out that was an eighth of the daemon's loop. A pidfd in the event loop
costs one file descriptor and no thread; Python 3.12 picks it by itself.
"""

from __future__ import annotations

import asyncio
import os
import sys
import warnings


def pidfd_works() -> bool:
    """Whether this kernel gives pidfds (Linux 5.3+; not in every sandbox)."""
    if not hasattr(os, "pidfd_open"):
        return False
    try:
        os.close(os.pidfd_open(os.getpid()))
    except OSError:
        return False
    return True


def wait_children_with_pidfds() -> bool:
    """On Python 3.11, have the running loop wait for child processes through pidfds.

    Returns True when the pidfd watcher is now in use. Must run inside the loop the
    emulator serves from. A no-op on 3.12+ (already the default there) and where pidfds
    are unavailable (the thread per child stays)."""
    if sys.version_info >= (3, 12) or not pidfd_works():
        return False
    watcher = asyncio.PidfdChildWatcher()
    watcher.attach_loop(asyncio.get_running_loop())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        asyncio.get_event_loop_policy().set_child_watcher(watcher)
    return True
