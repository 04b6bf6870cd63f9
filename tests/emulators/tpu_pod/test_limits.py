"""The pod daemon's open-file limit follows its host count (1,024 hosts ran it into EMFILE)."""

from __future__ import annotations

import resource
import subprocess
import sys

import pytest

from emulators.tpu_pod.limits import fds_needed

# The probe starts under the limits it is given: it sets them itself, first thing. (A
# ``preexec_fn`` would run Python in a fork of this multithreaded worker, where another
# test's gRPC threads left state that aborted the child: "epoll_wait error: Bad file
# descriptor", exit -6.)
PROBE = """
import resource, sys
resource.setrlimit(resource.RLIMIT_NOFILE, (int(sys.argv[2]), int(sys.argv[3])))
from emulators.tpu_pod.limits import FdLimitError, ensure_fds
try:
    ensure_fds(int(sys.argv[1]))
except FdLimitError as exc:
    print("refused:", exc)
    raise SystemExit(2)
print(resource.getrlimit(resource.RLIMIT_NOFILE)[0])
"""


def probe(hosts: int, soft: int, hard: int) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", PROBE, str(hosts), str(soft), str(hard)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_a_low_soft_limit_is_raised_to_what_the_hosts_need() -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = fds_needed(256)
    if hard != resource.RLIM_INFINITY and hard < need:
        pytest.skip(f"this machine's hard open-file limit {hard} is below {need}")
    out = probe(256, 256, hard)
    assert out.returncode == 0, out.stdout + out.stderr
    assert int(out.stdout) == need


def test_a_hard_limit_too_low_is_raised_when_privileged_else_refused_with_the_fix() -> None:
    """Which of the two depends on CAP_SYS_RESOURCE (root in a container may lack it)."""
    out = probe(1024, 256, 512)
    if out.returncode == 0:
        assert int(out.stdout) == fds_needed(1024)
    else:
        assert out.returncode == 2, out.stdout + out.stderr
        assert f"1024 hosts need about {fds_needed(1024)} open files" in out.stdout
        assert "this shell allows 512" in out.stdout and "ulimit -n" in out.stdout
