"""Open files for an emulated pod of many hosts.

Each emulated host costs the daemon file descriptors: its SSH listener, the sessions a
console holds (one per host, plus a notice watcher's), their channels and pipes. Measured
with a console attached: about 20 per host (2,320 at 256 hosts), so 1,024 hosts ran the
daemon into EMFILE at a 20,000 limit, and it then answered nothing (not even `pod down`).
The daemon raises its own limit to what its host count needs, or refuses to start with the
figure and the fix instead of failing half way.
"""

from __future__ import annotations

import resource

FDS_PER_HOST = 24  # the measured ~20, and a margin
FDS_BASE = 1024  # API servers, logs, the control socket, Python itself


def fds_needed(hosts: int) -> int:
    return FDS_BASE + FDS_PER_HOST * hosts


class FdLimitError(Exception):
    """The host count needs more open files than this process may have."""


def ensure_fds(hosts: int) -> int:
    """Raise this process's soft RLIMIT_NOFILE to what ``hosts`` need (and the hard limit
    when privileged, as a root daemon may); returns the soft limit in force."""
    need = fds_needed(hosts)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= need:
        return soft
    if hard == resource.RLIM_INFINITY or hard >= need:
        resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))
        return need
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (need, need))
    except (ValueError, OSError):
        raise FdLimitError(
            f"{hosts} hosts need about {need} open files, and this shell allows {hard} "
            f"(ulimit -Hn): raise it (e.g. `ulimit -n {need}` as root, or nofile in "
            "/etc/security/limits.conf), or pass fewer --hosts"
        ) from None
    return need
