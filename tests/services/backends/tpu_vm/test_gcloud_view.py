"""What the console does to the node through the gcp code path, as the real gcloud sees it
(over the GCP-faithful emulator's REST front end): the preempted slice, then the node the
console's recovery deleted and created again, with the external IPs SSH uses."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path
from typing import Any

from benchmarks.pods import gcp_config
from console.services.backends.tpu_vm.backend import TpuVmBackend
from console.wiring import make_services
from emulators.tpu_pod import client as pod_client
from emulators.tpu_pod.client import PodInfo
from tests.support.emulator_helpers import gcloud_json, needs_gcloud, running_pod


def keygen(path: Path) -> Path:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)
    return path


async def describe(pod: PodInfo, config_dir: Path) -> dict[str, Any]:
    args = ["compute", "tpus", "tpu-vm", "describe", pod.node_name, f"--zone={pod.zone}"]
    node: dict[str, Any] = await asyncio.to_thread(gcloud_json, pod, config_dir, *args)
    return node


@needs_gcloud
async def test_gcloud_describes_the_node_the_console_recreated(tmp_path: Path) -> None:
    key = keygen(tmp_path / "google_compute_engine")
    gcloud_dir = tmp_path / "gcloud"
    with running_pod(tmp_path / "pod", faithful=True, ssh_user="alice", ssh_key=key) as pod:
        svc = make_services(gcp_config(pod, tmp_path), state_dir=tmp_path / "state")
        try:
            assert isinstance(svc.backend, TpuVmBackend)
            backend = svc.backend
            await svc.refresh()
            node = await describe(pod, gcloud_dir)
            assert node["name"] == pod.node_path and node["state"] == "READY"
            ssh_addresses = [ep.ssh_ip for ep in backend.parts.endpoints]
            assert [e["accessConfig"]["externalIp"] for e in node["networkEndpoints"]] == (
                ssh_addresses
            )

            await asyncio.to_thread(pod_client.preempt, pod.run_dir, 2)  # the whole slice
            snap = await svc.refresh()
            assert {h.tpu_state for h in snap.hosts} == {"PREEMPTED"}
            assert (await describe(pod, gcloud_dir))["state"] == "PREEMPTED"

            names = [h.name for h in snap.hosts]
            recreated = await backend.recreate(names)  # the recovery's step: Delete + Create
            assert recreated.ok and recreated.data["hosts"] == names, recreated
            ready = await backend.wait_hosts_ready(names, 120)
            assert ready.ok, ready.message

            node = await describe(pod, gcloud_dir)
            assert node["state"] == "READY"
            assert node["networkConfig"]["enableExternalIps"] is True
            assert node["schedulingConfig"] == {"spot": True}
            assert [
                (e["ipAddress"], e["accessConfig"]["externalIp"]) for e in node["networkEndpoints"]
            ] == [(ep.ip, ep.ssh_ip) for ep in backend.parts.endpoints]

            # New VMs, new host keys: trusted from the guest attributes, recorded as replaced.
            res = await backend.parts.ssh.run("echo $PHANTOM_HOST")
            assert all(r.ok for r in res.values()), res
            await svc.sink.flush()
            events = await svc.events(kinds=["host_key"])
            replaced = {e.host for e in events if e.data.get("change") == "replaced"}
            assert replaced == set(names)
            assert {e.data["source"] for e in events if e.host in replaced} >= {"TPU API"}
        finally:
            await svc.stop()
            svc.close_journal()
