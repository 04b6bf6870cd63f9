"""A preemption notice, heard from the VM's own metadata server before the VM stops.

Real emulated hosts with their GCE metadata servers on loopback; the console's services at
the DEFAULT 5 s poll: the notice still reaches the journal at once (the watcher wakes the
poll), the host shows PREEMPTING while the API says READY, and the `preempted` event comes
only when the VM really stops, after its grace.
"""

from __future__ import annotations

import asyncio
import subprocess
import time
from pathlib import Path

from console.services.backends.tpu_vm.backend import TpuVmBackend
from console.wiring import make_services
from console.wiring.harness import pod_config
from emulators.tpu_pod import client as pod_client
from emulators.tpu_pod.client import PodInfo
from tests.support.waiting import until


async def test_a_notice_is_journaled_before_the_vm_stops(pod: PodInfo, tmp_path: Path) -> None:
    config = pod_config(
        pod, tmp_path, recovery={"poll_interval_s": 5.0, "auto": False, "notice_grace_s": 6.0}
    )
    services = make_services(config, state_dir=tmp_path / "state", autostart_pod=False)
    backend = services.backend
    assert isinstance(backend, TpuVmBackend)
    try:
        await services.start()
        await until(lambda: len(backend.notices.listening) == 4, 60, "a watcher on every host")
        # A job on w2 that takes its whole grace to stop (as a checkpointing trainer does).
        busy = "nohup bash -c \"trap '' TERM; sleep 120\" >/dev/null 2>&1 &"
        started = await asyncio.to_thread(
            subprocess.run, pod.ssh_argv(2, busy), capture_output=True, timeout=60
        )
        assert started.returncode == 0, started.stderr
        given = time.time()
        await pod_client.async_preempt(pod.run_dir, 2, notice=6.0, wait=False)

        async def noticed() -> bool:
            return bool(await services.events(kinds=["preemption_notice"]))

        await until(noticed, 15, "the notice in the journal")
        (notice,) = await services.events(kinds=["preemption_notice"])
        assert notice.host == "phantom-pod-w2" and notice.at >= given
        info = pod_client.pod_status(pod.run_dir)
        assert info is not None and info.state == "READY"  # the API has not said a word yet
        hosts = {h.name: h for h in services.snapshot().hosts}
        assert hosts["phantom-pod-w2"].tpu_state == "PREEMPTING"
        assert "preemption notice" in " ".join(services.snapshot().warnings)

        async def stopped() -> bool:
            return bool(await services.events(kinds=["preempted"]))

        await until(stopped, 60, "the VM to stop after its grace")
        (gone,) = await services.events(kinds=["preempted"])
        assert gone.id is not None and notice.id is not None and gone.id > notice.id
    finally:
        await services.stop()
        services.close_journal()
