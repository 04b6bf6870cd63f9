"""Crash-safe claims on a pod: one holder at a time, freed the moment it dies."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from console.services.record.lease import FileLease, PodLeases
from tests.support import REPO
from tests.support.waiting import wait_until

HOLDER = """
import sys, time
from pathlib import Path
from console.services.record.lease import FileLease
lease = FileLease(Path(sys.argv[1]), "watch")
assert lease.try_acquire()
print("held", flush=True)
time.sleep(600)  # sleep-noqa: the holder holds until it is killed
"""


def test_one_holder_at_a_time_and_release_hands_it_on(tmp_path: Path) -> None:
    a, b = FileLease(tmp_path / "x.watch", "watch"), FileLease(tmp_path / "x.watch", "watch")
    assert a.try_acquire() and a.try_acquire()  # idempotent for its holder
    assert not b.try_acquire() and b.busy_elsewhere() and not a.busy_elsewhere()
    holder = b.holder()
    assert holder is not None and holder.pid == os.getpid()
    a.release()
    assert b.holder() is None and b.try_acquire()
    b.release()


def test_a_killed_holder_frees_it_at_once(tmp_path: Path) -> None:
    path = tmp_path / "pod.watch"
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(path)], cwd=REPO, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
        mine = FileLease(path, "watch")
        holder = mine.holder()
        assert holder is not None and holder.pid == proc.pid
        assert not mine.try_acquire()
        proc.send_signal(signal.SIGKILL)  # no chance to clean up: the kernel frees the lock
        proc.wait(timeout=30)
        wait_until(mine.try_acquire, 5, "the lease of a killed holder")
        mine.release()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_pods_have_their_own_leases(tmp_path: Path) -> None:
    one, other = PodLeases(tmp_path, "local|p|z|pod-a|"), PodLeases(tmp_path, "local|p|z|pod-b|")
    assert one.watch.try_acquire() and other.watch.try_acquire()
    assert one.actions.path != other.actions.path
    one.release()
    other.release()
