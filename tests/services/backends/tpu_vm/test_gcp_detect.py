"""Detection on the gcp path dates the loss from what that path hears first.

The real TPU API reports a preempted slice with no time of its own (the faithful emulator
invents no symptom), so the detector had only "since the last healthy poll" to date the
loss: up to a whole poll interval, the 1.67 s the failover drill reported on this path
against 0.09 s on the local provider, whose emulator dates it. On a real VM the first thing
heard of an abrupt loss is the SSH connection dropping from the far end (the VM's sshd
gone), before the API's word: the loss is dated from that drop, so the journal's
``preempted`` row carries ``preempted_at`` and a ``detect_s`` measured from it.
"""

from __future__ import annotations

import time
from pathlib import Path

from benchmarks.pods import gcp_config, gcp_user_key
from console.services.backends.tpu_vm.backend import TpuVmBackend
from console.services.model import Event, EventKind, Update
from console.wiring import make_services
from emulators.tpu_pod import client as pod_client
from tests.support.emulator_helpers import running_pod
from tests.support.waiting import until


async def test_a_whole_slice_loss_on_the_gcp_path_is_dated_from_its_ssh_drop(
    tmp_path: Path,
) -> None:
    key = gcp_user_key(tmp_path / "google_compute_engine")
    with running_pod(tmp_path / "pod", faithful=True, ssh_user="alice", ssh_key=key) as pod:
        cfg = gcp_config(pod, tmp_path, recovery={"poll_interval_s": 5.0, "auto": False})
        svc = make_services(cfg, state_dir=tmp_path / "state", autostart_pod=False)
        backend = svc.backend
        assert isinstance(backend, TpuVmBackend)
        rows: list[Event] = []

        def on_update(u: Update) -> None:
            if isinstance(u, Event) and u.kind == EventKind.PREEMPTED:
                rows.append(u)

        svc.subscribe(on_update)
        try:
            await svc.start()
            await until(lambda: len(backend.notices.listening) == 4, 60, "every watcher")
            called = time.time()
            await pod_client.async_preempt(pod.run_dir, "all")
            await until(lambda: len(rows) == 4, 60, "a preempted row per host")
            for ev in rows:
                loss = ev.data.get("preempted_at")
                assert loss is not None, ev.data
                # Dated by what was heard of it: after the reclaim began, before the row.
                assert called <= loss <= ev.at, (called, loss, ev.at)
                # Measured from that date: no longer than since the reclaim was asked for.
                assert 0.0 <= ev.data["detect_s"] <= round(ev.at - called, 3) + 0.001, ev.data
        finally:
            await svc.stop()
            svc.close_journal()
