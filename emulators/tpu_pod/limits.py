"""Open files for an emulated pod of many hosts.

What each emulated host holds open in the daemon, measured with a console attached (its
poll loop and a notice watcher on every host): its SSH listener (two in GCP-faithful mode:
internal and external address), the console's one SSH connection, the notice watcher's
session (the command's stdout and stderr pipes and its pidfd: the console sends no input,
so its stdin pipe closes at once) and the watcher's long poll of the metadata server: 6
a host (the metadata server is one socket for every host where the kernel allows it, see
``metadata``). A command run on every host at once (a first probe, a bootstrap) adds 3 a
host while it runs. Before: 9 a host at rest and 13 in a fan-out (a metadata listener per
host, a second SSH connection for the probes, a stdin pipe per session), and a 1,024-host
run hit EMFILE at a 20,000 limit, after which the daemon answered nothing (not even
`pod down`). The daemon still raises its own limit to what its host count needs,
or refuses to start with the figure and the fix instead of failing half way.
"""

from __future__ import annotations

import resource

FDS_PER_HOST = 12  # the measured 6 at rest, 9 in a fan-out, 10 faithful; and a margin
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
            f"{hosts} hosts need about {need} open files ({FDS_PER_HOST} a host and "
            f"{FDS_BASE}), and this shell allows {hard} "
            f"(ulimit -Hn): raise it (e.g. `ulimit -n {need}` as root, or nofile in "
            "/etc/security/limits.conf), or pass fewer --hosts"
        ) from None
    return need
