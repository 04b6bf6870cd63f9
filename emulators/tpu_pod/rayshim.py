"""``ray stop`` scoped to one emulated host.

On a real VM, ``ray stop -f`` kills every Ray process of that machine, which is
exactly that one Ray node. Emulated hosts share a machine with each other and
with other Ray clusters, so each host's PATH starts with a ``ray`` wrapper that
routes ``ray stop`` here: Ray's own stop command runs unchanged, but only sees
the processes carrying this host's marker variable.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from emulators.tpu_pod.layout import MARKER_ENV
from emulators.tpu_pod.procs import CGROUP_ENV, host_pids

WRAPPER = """#!/bin/sh
# Emulated host: `ray stop` must only stop this host's Ray, as on a real VM.
if [ "$1" = "stop" ]; then exec {python} -m emulators.tpu_pod.rayshim "$@"; fi
exec {ray} "$@"
"""


def write_wrapper(bin_dir: Path) -> Path:
    """Install the ``ray`` wrapper into ``bin_dir`` (put first on the hosts' PATH)."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    venv_bin = Path(sys.executable).parent
    path = bin_dir / "ray"
    path.write_text(
        WRAPPER.format(python=sys.executable, ray=venv_bin / "ray"),
    )
    path.chmod(0o755)
    return path


def host_prefix() -> str:
    """``<run_id>:<host>:`` from this process's marker (all generations of the host)."""
    marker = os.environ.get(MARKER_ENV, "")
    parts = marker.split(":")
    if len(parts) != 3:
        raise SystemExit("ray stop (emulated host): no host marker in the environment")
    return f"{parts[0]}:{parts[1]}:"


def main(argv: list[str]) -> None:
    prefix = host_prefix()
    from ray.scripts import scripts  # also puts Ray's vendored psutil on sys.path

    psutil = scripts.psutil
    original = psutil.process_iter

    def host_processes(*args: Any, **kwargs: Any) -> Iterator[Any]:
        cgroup = os.environ.get(CGROUP_ENV)
        mine = host_pids(prefix, Path(cgroup) if cgroup else None)
        mine.discard(os.getpid())
        for proc in original(*args, **kwargs):
            if proc.pid in mine:
                yield proc

    psutil.process_iter = host_processes
    sys.argv = ["ray", *argv]
    scripts.main()


if __name__ == "__main__":
    main(sys.argv[1:])
