"""Find and kill the processes of an emulated host by their marker variable.

Every process started on a host inherits ``MARKER_ENV=<run_id>:<host>:<gen>``;
daemons that detach (``ray start``) keep it, so scanning ``/proc/*/environ``
finds them wherever they were reparented. Zombies have an empty environ and
are already dead, so they never match.
"""

from __future__ import annotations

import os
import signal
import time

from console.emulator.layout import MARKER_ENV


def marker_value(run_id: str, host: str = "", generation: int | None = None) -> str:
    """The marker value (or a prefix of it) selecting a run, a host, a generation."""
    if not host:
        return f"{run_id}:"
    if generation is None:
        return f"{run_id}:{host}:"
    return f"{run_id}:{host}:{generation}"


def find_marked(prefix: str) -> list[int]:
    """Pids of live processes whose marker value starts with ``prefix``."""
    needle = f"\0{MARKER_ENV}={prefix}".encode()
    me = os.getpid()
    pids: list[int] = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return pids
    for entry in entries:
        if not entry.isdigit():
            continue
        pid = int(entry)
        if pid == me:
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as fh:
                data = fh.read()
        except OSError:
            continue
        if needle in b"\0" + data:
            pids.append(pid)
    return pids


def kill_marked(prefix: str, timeout: float = 10.0) -> int:
    """SIGKILL every process carrying the marker until none is left.

    Loops because a process may fork between a scan and the kill; returns how
    many distinct pids were killed. Raises TimeoutError if some survive.
    """
    killed: set[int] = set()
    deadline = time.monotonic() + timeout
    while True:
        pids = find_marked(prefix)
        if not pids:
            return len(killed)
        if time.monotonic() > deadline:
            raise TimeoutError(f"processes with marker {prefix!r} survive SIGKILL: {pids}")
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.add(pid)
            except ProcessLookupError:
                pass
            except PermissionError:
                continue
        # A SIGKILLed process keeps its environ until the kernel tears down its
        # memory; yield the CPU briefly instead of spinning on the scan.
        time.sleep(0.005)
