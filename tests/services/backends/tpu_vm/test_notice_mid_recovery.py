"""A notice heard after a recovery began: the noticed host's checkpoint comes first.

A recovery under way acts on hosts that were fine when it began: ``orphans`` force-stops the
surviving workers' Ray when the head was lost, ``workers`` (re)joins them. A host whose
notice comes meanwhile has its trainers writing their notice checkpoint through the grace;
a ``ray stop -f`` there kills them mid-write (its raylet takes its workers with it), and a
join there places work on a VM that is going. Both ops leave a noticed host to checkpoint
and go (the next round recreates it, once it has gone: ``recreate`` waits for that) and act
on the others at once.

The raylets are stand-ins that hold through SIGTERM, as a real raylet holds while its
workers checkpoint: a process named ``raylet`` that the emulated host's ``ray stop -f``
finds and kills.
"""

from __future__ import annotations

import asyncio
import shlex
from pathlib import Path

from benchmarks.pods import pod_config
from console.services.backends.tpu_vm.backend import TpuVmBackend
from console.wiring import make_services
from emulators.tpu_pod import client as pod_client
from emulators.tpu_pod.client import PodInfo
from tests.support.fixtures_pod import ssh_run
from tests.support.waiting import until


def _standin_raylet(folder: Path) -> str:
    """A detached process named ``raylet`` (its comm: a link to sleep) that ignores TERM."""
    link = folder / "raylet"
    return (
        f'mkdir -p {shlex.quote(str(folder))} && ln -sf "$(command -v sleep)" '
        f"{shlex.quote(str(link))}; nohup bash -c "
        + shlex.quote(f"trap '' TERM; exec {shlex.quote(str(link))} 600")
        + " </dev/null >/dev/null 2>&1 &"
    )


def _raylet_on(tmp_path: Path, host: int) -> bool:
    """The host's stand-in raylet is alive: read from /proc, since a noticed VM's SSH takes
    no new connection (the console keeps the ones it has)."""
    link = str(tmp_path / f"bin{host}" / "raylet").encode()
    for proc in Path("/proc").iterdir():
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and argv[0] == link:
            return True
    return False


async def test_orphans_and_joins_leave_a_host_noticed_mid_recovery_to_checkpoint(
    pod: PodInfo, tmp_path: Path
) -> None:
    config = pod_config(
        pod, tmp_path, recovery={"poll_interval_s": 0.5, "auto": False, "notice_grace_s": 60.0}
    )
    services = make_services(config, state_dir=tmp_path / "state", autostart_pod=False)
    backend = services.backend
    assert isinstance(backend, TpuVmBackend)
    w1, w2 = pod.hosts[1].name, pod.hosts[2].name
    try:
        await services.start()
        await until(lambda: len(backend.notices.listening) == 4, 60, "a watcher on every host")
        for i in (1, 2):
            started = await asyncio.to_thread(
                ssh_run, pod, i, _standin_raylet(tmp_path / f"bin{i}")
            )
            assert started.returncode == 0, started.stderr
            await until(lambda i=i: _raylet_on(tmp_path, i), 30, "the stand-in raylet running")
        # The recovery is under way (the head was lost); then w1 hears its notice.
        await pod_client.async_preempt(pod.run_dir, 1, notice=600.0, wait=False)
        await until(lambda: w1 in backend.notices.notices, 15, "w1's notice heard")

        orphans = await backend.stop_orphans([w1, w2])
        assert orphans.ok, orphans
        assert "notice" in orphans.per_host[w1].stdout_tail, orphans.per_host[w1]
        # w1's raylet (and the workers it holds while they checkpoint) was left alone ...
        assert _raylet_on(tmp_path, 1)
        # ... and w2, an orphan with no notice, was stopped as before.
        assert not _raylet_on(tmp_path, 2)

        joined = await backend.join_workers([w1])
        assert joined.ok, joined
        assert "notice" in joined.per_host[w1].stdout_tail, joined.per_host[w1]
        assert _raylet_on(tmp_path, 1)
    finally:
        await services.stop()
        services.close_journal()
