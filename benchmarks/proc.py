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


def footprint(pid: int) -> dict[str, float]:
    """RSS (MB), threads and open fds of ``pid``."""
    status = dict(
        line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
    )
    return {
        "rss_mb": round(int(status["VmRSS"].split()[0]) / 1024, 1),
        "threads": float(status["Threads"]),
        "fds": float(len(os.listdir(f"/proc/{pid}/fd"))),
    }


def descendants(pid: int) -> list[int]:
    """Every live process below ``pid`` (the emulated hosts' shells, watchers, jobs)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z":
            children.setdefault(int(fields[1]), []).append(int(entry))
    found, todo = [], list(children.get(pid, []))
    while todo:
        p = todo.pop()
        found.append(p)
        todo.extend(children.get(p, []))
    return found


def pss_mb(pid: int) -> float:
    """Proportional set size (MB): each shared page split between the processes sharing it,
    so a sum over many copies of one program (bash, curl) is what they take together."""
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1]) / 1024
    return 0.0


def processes_footprint(pids: list[int]) -> dict[str, float]:
    """How many of ``pids`` are alive, and their PSS summed (MB)."""
    pss, alive = 0.0, 0
    for p in pids:
        try:
            pss += pss_mb(p)
            alive += 1
        except OSError:
            continue
    return {"procs": float(alive), "pss_mb": round(pss, 1)}
