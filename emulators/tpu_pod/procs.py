"""Find and kill every process of an emulated host.

Three sources, joined so no process escapes a preemption:

- the marker variable ``MARKER_ENV=<run_id>:<host>:<gen>`` every host process
  inherits, found in ``/proc/*/environ`` wherever the process was reparented
  (``ray start`` daemons detach);
- a per-host cgroup (v1 ``pids`` or v2) when the machine lets us create one:
  membership is inherited on fork and survives setsid, double forks and a
  clobbered environ;
- all descendants of the above, because ``setproctitle`` (Ray's
  ``ray::DashboardAgent``, ``ray::IDLE`` workers, ...) overwrites the memory
  ``/proc/<pid>/environ`` shows, hiding the marker.

Zombies have already exited and are ignored.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path

from emulators.tpu_pod.layout import MARKER_ENV

# Set in every host's environment when the host has a cgroup (its directory).
CGROUP_ENV = "_PHANTOM_POD_CGROUP"

_CGROUP_ROOTS = (Path("/sys/fs/cgroup/pids"), Path("/sys/fs/cgroup"))


def marker_value(run_id: str, host: str = "", generation: int | None = None) -> str:
    """The marker value (or a prefix of it) selecting a run, a host, a generation."""
    if not host:
        return f"{run_id}:"
    if generation is None:
        return f"{run_id}:{host}:"
    return f"{run_id}:{host}:{generation}"


def _scan(prefix: str) -> tuple[dict[int, list[int]], set[int]]:
    """One pass over /proc: children by parent pid, and live pids with the marker."""
    needle = f"\0{MARKER_ENV}={prefix}".encode()
    me = os.getpid()
    children: dict[int, list[int]] = {}
    marked: set[int] = set()
    try:
        entries = os.listdir("/proc")
    except OSError:
        return children, marked
    for entry in entries:
        if not entry.isdigit():
            continue
        pid = int(entry)
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                fields = fh.read().rsplit(b")", 1)[1].split()
            if fields[0] == b"Z":
                continue
            children.setdefault(int(fields[1]), []).append(pid)
            if pid == me:
                continue
            with open(f"/proc/{entry}/environ", "rb") as fh:
                if needle in b"\0" + fh.read():
                    marked.add(pid)
        except (OSError, IndexError, ValueError):
            continue
    return children, marked


def cgroup_pids(cgroup: Path | None) -> set[int]:
    """Pids in ``cgroup`` and its sub-cgroups (empty if there is none)."""
    pids: set[int] = set()
    if cgroup is None or not cgroup.is_dir():
        return pids
    for dirpath, _dirs, _files in os.walk(cgroup):
        with contextlib.suppress(OSError, ValueError):
            text = (Path(dirpath) / "cgroup.procs").read_text()
            pids.update(int(line) for line in text.split())
    return pids


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except (OSError, IndexError):
        return False


def host_pids(prefix: str, cgroup: Path | None = None) -> set[int]:
    """Live pids of a host (or a run, with a run-wide prefix/cgroup), descendants included."""
    children, found = _scan(prefix)
    found |= {p for p in cgroup_pids(cgroup) if _alive(p)}
    found.discard(os.getpid())
    todo = list(found)
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in found and child != os.getpid():
                found.add(child)
                todo.append(child)
    return found


def find_marked(prefix: str, cgroup: Path | None = None) -> list[int]:
    """Sorted pids of live processes belonging to ``prefix`` (see ``host_pids``)."""
    return sorted(host_pids(prefix, cgroup))


def kill_marked(prefix: str, cgroup: Path | None = None, timeout: float = 10.0) -> int:
    """SIGKILL every process of the host until none is left; how many were killed.

    With a cgroup, forking is switched off first (``pids.max = 0``) so nothing
    new appears between scan and kill. Raises TimeoutError if some survive.
    """
    if cgroup is not None:
        with contextlib.suppress(OSError):
            (cgroup / "pids.max").write_text("0")
    killed: set[int] = set()
    deadline = time.monotonic() + timeout
    while True:
        pids = host_pids(prefix, cgroup)
        if not pids:
            return len(killed)
        if time.monotonic() > deadline:
            raise TimeoutError(f"processes of {prefix!r} survive SIGKILL: {sorted(pids)}")
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.add(pid)
            except (ProcessLookupError, PermissionError):
                pass
        # A SIGKILLed process stays visible until the kernel has torn it down;
        # yield the CPU instead of spinning on the scan.
        time.sleep(0.002)


# --- many hosts at once ---------------------------------------------------------
#
# A preemption of a whole 256-host slice must not scan /proc 256 times: one scan
# reads every marker of the run and sorts the pids by host.

Target = tuple[str, "Path | None"]  # (host marker prefix, host cgroup)


def _scan_run(run_prefix: str) -> tuple[dict[int, list[int]], dict[int, str]]:
    """One pass over /proc: children by parent, and each marked pid's marker value."""
    key = f"{MARKER_ENV}={run_prefix}".encode()
    me = os.getpid()
    children: dict[int, list[int]] = {}
    markers: dict[int, str] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return children, markers
    for entry in entries:
        if not entry.isdigit():
            continue
        pid = int(entry)
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                fields = fh.read().rsplit(b")", 1)[1].split()
            if fields[0] == b"Z":
                continue
            children.setdefault(int(fields[1]), []).append(pid)
            if pid == me:
                continue
            with open(f"/proc/{entry}/environ", "rb") as fh:
                for var in fh.read().split(b"\0"):
                    if var.startswith(key):
                        markers[pid] = var[len(MARKER_ENV) + 1 :].decode(errors="replace")
                        break
        except (OSError, IndexError, ValueError):
            continue
    return children, markers


def pids_by_target(run_prefix: str, targets: list[Target]) -> dict[str, set[int]]:
    """Live pids of each target (marker prefix -> pids), descendants included."""
    children, markers = _scan_run(run_prefix)
    me = os.getpid()
    out: dict[str, set[int]] = {}
    for prefix, cgroup in targets:
        found = {pid for pid, value in markers.items() if value.startswith(prefix)}
        found |= {p for p in cgroup_pids(cgroup) if _alive(p)}
        found.discard(me)
        todo = list(found)
        while todo:
            for child in children.get(todo.pop(), ()):
                if child not in found and child != me:
                    found.add(child)
                    todo.append(child)
        out[prefix] = found
    return out


def signal_targets(run_prefix: str, targets: list[Target], sig: int) -> int:
    """Send ``sig`` once to every process of the targets; how many got it."""
    sent = 0
    for pids in pids_by_target(run_prefix, targets).values():
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
                sent += 1
    return sent


def kill_targets(run_prefix: str, targets: list[Target], timeout: float = 10.0) -> dict[str, int]:
    """``kill_marked`` for many hosts with one /proc scan per round; killed per prefix."""
    for _prefix, cgroup in targets:
        if cgroup is not None:
            with contextlib.suppress(OSError):
                (cgroup / "pids.max").write_text("0")
    killed: dict[str, set[int]] = {prefix: set() for prefix, _ in targets}
    deadline = time.monotonic() + timeout
    while True:
        live = pids_by_target(run_prefix, targets)
        if not any(live.values()):
            return {prefix: len(pids) for prefix, pids in killed.items()}
        if time.monotonic() > deadline:
            left = sorted(set().union(*live.values()))
            raise TimeoutError(f"processes of {run_prefix!r} survive SIGKILL: {left}")
        for prefix, pids in live.items():
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                    killed[prefix].add(pid)
                except (ProcessLookupError, PermissionError):
                    pass
        time.sleep(0.002)


# --- cgroups ------------------------------------------------------------------


def _usable_root() -> Path | None:
    for root in _CGROUP_ROOTS:
        if (root / "cgroup.procs").is_file() and os.access(root, os.W_OK):
            return root
    return None


def make_run_cgroup(run_id: str) -> Path | None:
    """Create ``<root>/phantom-pod/<run_id>`` if this machine allows it, else None.

    Checked by moving a throwaway child in and reading it back, so a cgroup
    that exists but does not track processes is never relied on.
    """
    root = _usable_root()
    if root is None:
        return None
    run_cg = root / "phantom-pod" / run_id
    probe = run_cg / "probe"
    try:
        probe.mkdir(parents=True, exist_ok=True)
        child = subprocess.Popen(["sleep", "30"])
        try:
            (probe / "cgroup.procs").write_text(str(child.pid))
            ok = child.pid in cgroup_pids(probe)
        finally:
            child.kill()
            child.wait()
        remove_cgroup(probe)
    except OSError:
        ok = False
    if not ok:
        remove_cgroup(run_cg)
        return None
    return run_cg


def make_host_cgroup(run_cg: Path | None, name: str) -> Path | None:
    if run_cg is None:
        return None
    cg = run_cg / name
    try:
        cg.mkdir(exist_ok=True)
        with contextlib.suppress(OSError):
            (cg / "pids.max").write_text("max")
    except OSError:
        return None
    return cg


def allow_forks(cgroups: list[Path | None]) -> None:
    """Undo the fork freeze of a kill (``pids.max = 0``) for hosts that stay up: a VM whose
    processes all died (a silent death) can still start new ones."""
    for cg in cgroups:
        if cg is not None:
            with contextlib.suppress(OSError):
                (cg / "pids.max").write_text("max")


def remove_cgroup(cg: Path | None) -> None:
    """rmdir a cgroup tree (only possible once it has no processes)."""
    if cg is None or not cg.is_dir():
        return
    for dirpath, _dirs, _files in sorted(os.walk(cg), key=lambda t: -len(t[0])):
        with contextlib.suppress(OSError):
            os.rmdir(dirpath)
