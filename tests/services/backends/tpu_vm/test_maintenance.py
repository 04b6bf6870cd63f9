"""A host maintenance, heard from the VM's metadata server (``instance/maintenance-event``).

GCE sets the key about 60 s before a host maintenance: ``MIGRATE_ON_HOST_MAINTENANCE`` (a
live migration the VM survives) or ``TERMINATE_ON_HOST_MAINTENANCE`` (the VM is stopped),
and back to ``NONE`` after. On real emulated hosts (their metadata servers on loopback, the
value set with the emulator's `maintenance` verb) the console's watcher hears both: a
migration is journaled as ``maintenance`` (and its end), with nothing to recover; a
termination is a notice, journaled as one with its reason, the host shown PREEMPTING.
Before, only ``instance/preempted`` was watched: neither was heard.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

from benchmarks.pods import pod_config
from console.services.backends.tpu_vm.backend import TpuVmBackend
from console.wiring import make_services
from emulators.tpu_pod import client as pod_client
from emulators.tpu_pod.client import PodInfo
from tests.support.waiting import until


async def test_a_host_maintenance_is_heard_a_migration_told_a_termination_a_notice(
    pod: PodInfo, tmp_path: Path
) -> None:
    config = pod_config(pod, tmp_path, recovery={"poll_interval_s": 5.0, "auto": False})
    services = make_services(config, state_dir=tmp_path / "state", autostart_pod=False)
    backend = services.backend
    assert isinstance(backend, TpuVmBackend)
    w1, w2 = pod.hosts[1].name, pod.hosts[2].name
    try:
        await services.start()
        await until(lambda: len(backend.notices.listening) == 4, 60, "a watcher on every host")

        # A live migration, set with the emulator's command line as a user would.
        cli = [sys.executable, "-m", "emulators.tpu_pod", "maintenance", "1"]
        cli += ["MIGRATE_ON_HOST_MAINTENANCE", "--run-dir", str(pod.run_dir)]
        done = await asyncio.to_thread(subprocess.run, cli, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr

        async def rows() -> list[tuple[str, str, str]]:
            found = await services.events(kinds=["maintenance"])
            return [(e.host, e.data.get("maintenance_event", ""), e.message) for e in found]

        async def told() -> bool:
            return len(await rows()) == 1

        await until(told, 30, "the coming migration journaled")
        ((host, value, message),) = await rows()
        assert (host, value) == (w1, "MIGRATE_ON_HOST_MAINTENANCE")
        assert "live-migrated" in message
        assert w1 not in backend.notices.notices  # the VM stays: no notice, no recovery

        await pod_client.async_maintenance(pod.run_dir, 1, "NONE")

        async def over() -> bool:
            return len(await rows()) == 2

        await until(over, 30, "the migration's end journaled")
        assert (await rows())[1][:2] == (w1, "NONE")

        # A maintenance that stops the VM: a notice, with its reason.
        await pod_client.async_maintenance(pod.run_dir, 2, "TERMINATE_ON_HOST_MAINTENANCE")

        async def noticed() -> bool:
            return bool(await services.events(kinds=["preemption_notice"]))

        await until(noticed, 30, "the notice journaled")
        (notice,) = await services.events(kinds=["preemption_notice"])
        assert notice.host == w2
        assert notice.data["reason"] == "maintenance-event TERMINATE_ON_HOST_MAINTENANCE"
        assert "maintenance-event TERMINATE_ON_HOST_MAINTENANCE notice" in notice.message
        hosts = {h.name: h for h in services.snapshot().hosts}
        assert hosts[w2].tpu_state == "PREEMPTING" and hosts[w1].tpu_state == "READY"
    finally:
        await services.stop()
        services.close_journal()
