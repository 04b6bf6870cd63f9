"""CPU accounting of a process, for benches that split a figure between the console and
the emulator sharing this machine's cores."""

from __future__ import annotations

import os
from pathlib import Path


def cpu_s(pid: int, *, children: bool = False) -> float:
    """utime + stime of ``pid`` in seconds; with ``children``, plus the CPU of the children
    it has reaped (the shells the emulated hosts run each command in)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12])
    if children:
        ticks += int(fields[13]) + int(fields[14])
    return ticks / os.sysconf("SC_CLK_TCK")
