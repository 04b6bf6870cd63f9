"""``pgrep`` scoped to one emulated host.

On a real VM, ``pgrep -f PATTERN`` sees that machine's processes, which are that host's.
Emulated hosts share one machine, so each host's PATH starts with a ``pgrep`` wrapper that
runs this instead: the same answer (pids on stdout, exit 0 if any matched, 1 if none, 2 on
bad usage), over the processes carrying this host's marker only. The subset a console uses:
``pgrep [-f] PATTERN`` (an extended regex, as pgrep takes; ``-f`` matches the whole command
line, else the process name).
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

from emulators.tpu_pod.procs import CGROUP_ENV, host_pids
from emulators.tpu_pod.rayshim import host_prefix

WRAPPER = """#!/bin/sh
# Emulated host: pgrep must only see this host's processes, as on a real VM.
exec {python} -m emulators.tpu_pod.pgrepshim "$@"
"""


def write_wrapper(bin_dir: Path) -> Path:
    """Install the ``pgrep`` wrapper into ``bin_dir`` (first on the hosts' PATH)."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    path = bin_dir / "pgrep"
    path.write_text(WRAPPER.format(python=sys.executable))
    path.chmod(0o755)
    return path


def _text(pid: int, full: bool) -> str | None:
    try:
        if full:
            raw = Path(f"/proc/{pid}/cmdline").read_bytes()
            return raw.rstrip(b"\0").replace(b"\0", b" ").decode(errors="replace")
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return None  # gone meanwhile


def main(argv: list[str]) -> int:
    full = "-f" in argv
    rest = [a for a in argv if a != "-f"]
    if len(rest) != 1 or rest[0].startswith("-"):
        print("pgrep (emulated host): usage: pgrep [-f] PATTERN", file=sys.stderr)
        return 2
    try:
        pattern = re.compile(rest[0])
    except re.error as exc:
        print(f"pgrep (emulated host): bad pattern: {exc}", file=sys.stderr)
        return 2
    cgroup = os.environ.get(CGROUP_ENV)
    mine = host_pids(host_prefix(), Path(cgroup) if cgroup else None)
    found = sorted(p for p in mine if (t := _text(p, full)) is not None and pattern.search(t))
    for pid in found:
        print(pid)
    return 0 if found else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
