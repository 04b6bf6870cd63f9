"""Stragglers overlapping a restart: a lost job's trainers outlive ``ray stop -f``.

The engine runs each trainer in a session of its own so that it survives its raylet long
enough to write its notice checkpoint (``engine.trialproc``); ``ray stop -f`` kills Ray's
processes, not those. On an emulated worker whose head was lost, two trainers of the old
job registered through the engine's own ``CheckpointAsk`` and ``PreemptionNotice``: one
honours SIGTERM (checkpoint, exit 75), one is stuck (a checkpoint upload that hangs, SIGTERM
ignored). The ``orphans`` op must leave neither alive: the first goes after its SIGTERM, the
second is killed by pid, both confirmed gone and their registrations removed.
"""

from __future__ import annotations

import asyncio
import shlex
import sys
from pathlib import Path

from benchmarks.pods import pod_config
from console.services.backends.tpu_vm.backend import TpuVmBackend
from console.services.backends.tpu_vm.stragglers import read_stragglers
from console.services.model import HostResult
from console.wiring import make_services
from emulators.tpu_pod.client import PodInfo
from tests.support import REPO
from tests.support.fixtures_pod import ssh_run
from tests.support.waiting import until

# A trainer's registration and notice, without the training (the engine's own classes).
TRAINER = r"""
import sys, time
from engine.notice import CheckpointAsk, PreemptionNotice
notice, ask = PreemptionNotice(), CheckpointAsk()
with notice.installed(), ask.installed(sys.argv[1]):
    while not notice.requested:
        time.sleep(0.05)
    while sys.argv[2] == "stuck":  # its checkpoint upload hangs: SIGTERM again is ignored
        time.sleep(0.05)
sys.exit(75)
"""
ASK_DIR = '"${PHANTOM_ASK_DIR:-$HOME/.cache/phantom/ask}"'


def _start_trainer(run: str, how: str) -> str:
    """Detached, as a trainer whose Ray worker is gone: its own session, no terminal."""
    argv = " ".join(shlex.quote(a) for a in (sys.executable, "-c", TRAINER, run, how))
    return (
        f"PYTHONPATH={shlex.quote(str(REPO))} PHANTOM_JOB_ID=raysubmit_old "
        f"nohup setsid {argv} </dev/null >/dev/null 2>&1 &"
    )


def _registered(pod: PodInfo, host: int) -> list[int]:
    got = ssh_run(pod, host, f"ls {ASK_DIR} 2>/dev/null")
    return sorted(int(n.removesuffix(".ask")) for n in got.stdout.split() if n.endswith(".ask"))


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


async def test_orphans_end_the_lost_jobs_stragglers_and_confirm_them_gone(
    pod: PodInfo, tmp_path: Path
) -> None:
    config = pod_config(
        pod, tmp_path, recovery={"poll_interval_s": 0.5, "auto": False, "notice_grace_s": 1.0}
    )
    services = make_services(config, state_dir=tmp_path / "state", autostart_pod=False)
    backend = services.backend
    assert isinstance(backend, TpuVmBackend)
    w2 = pod.hosts[2].name
    pids: list[int] = []
    try:
        await services.start()
        for run, how in (("run-honours", "honour"), ("run-stuck", "stuck")):
            started = await asyncio.to_thread(ssh_run, pod, 2, _start_trainer(run, how))
            assert started.returncode == 0, started.stderr
        await until(lambda: len(_registered(pod, 2)) == 2, 60, "both trainers registered")
        pids = _registered(pod, 2)
        assert all(_running(p) for p in pids)

        orphans = await backend.stop_orphans([w2])

        assert orphans.ok, orphans
        assert [p for p in pids if _running(p)] == []
        said = orphans.per_host[w2].stdout_tail
        assert "1 straggler(s) exited after SIGTERM" in said, said
        assert "1 killed by pid: run-stuck (pid" in said, said
        assert _registered(pod, 2) == []
        again = await backend.stop_orphans([w2])  # idempotent: nothing left to end
        assert again.ok and "no straggler" in again.per_host[w2].stdout_tail, again
    finally:
        await services.stop()
        services.close_journal()
        for pid in pids:  # only if the test failed before the op ended them
            if _running(pid):
                await asyncio.to_thread(ssh_run, pod, 2, f"kill -9 {pid}")


def test_a_straggler_that_outlives_sigkill_fails_its_host() -> None:
    """A process in uninterruptible sleep (a hung mount) survives SIGKILL for a while: the
    host's result says so, and the step retries that host rather than resubmitting."""
    said = HostResult(host="w1", ok=True, stdout_tail="KILLED 41 run-a\nALIVE 42 run-b\n")
    res = read_stragglers("w1", said)
    assert not res.ok and res.error == "still alive after SIGKILL: run-b (pid 42)"
    assert res.stdout_tail == "1 killed by pid: run-a (pid 41)\n"
    assert read_stragglers("w1", HostResult(host="w1", ok=True)).ok
