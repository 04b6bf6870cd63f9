"""The emulated hosts' share of this machine's CPU.

The hosts stand in for remote machines, yet here they share the console's cores: a training
job on them would take the frames of the console beside it (measured: the TUI's host-update
p99 went from 70 ms to 620 ms with Ray and training running on the same two cores). A daemon
started with a niceness hands it to every thread and process it starts (SSH sessions, Ray,
jobs), so busy hosts get only the CPU the console leaves. Stdlib only (the CLI applies it
before the daemon imports anything that starts a thread).
"""

from __future__ import annotations

import os

MAX_NICE = 19


def lower_priority(nice: int) -> int:
    """Make this thread (and whatever it starts from now on) at least ``nice`` nice; never
    raise the priority it already has. Returns the niceness in force."""
    current = os.getpriority(os.PRIO_PROCESS, 0)
    if nice > current:
        os.setpriority(os.PRIO_PROCESS, 0, min(nice, MAX_NICE))
    return os.getpriority(os.PRIO_PROCESS, 0)
