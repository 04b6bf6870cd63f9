"""Letting noticed hosts go (``drain.let_noticed_hosts_go``) on real emulated hosts.

No Ray runs here: the Ray nodes are what the console's observer would report, so the real
``ray drain-node`` goes to a GCS address where nothing answers and hangs, as a drain run on
a dying head did for 14-18 s of its 30 s grace in the chaos drill. The hosts' processes are
stand-ins by command line (an engine trainer, a raylet, a GCS), seen by each host's pgrep.
"""

from __future__ import annotations

import asyncio
import shlex
from pathlib import Path

from benchmarks.pods import pod_config
from console.services.backends.tpu_vm.backend import TpuVmBackend
from console.services.backends.tpu_vm.drain import let_noticed_hosts_go
from console.services.backends.tpu_vm.ray import RayNodeInfo
from console.wiring import make_services
from emulators.tpu_pod import client as pod_client
from emulators.tpu_pod.client import PodInfo
from tests.support.fixtures_pod import ssh_run
from tests.support.waiting import until


def _detached(command: str, *args: str) -> str:
    quoted = " ".join(shlex.quote(a) for a in args)
    return f"nohup bash -c {shlex.quote(command)} {quoted} >/dev/null 2>&1 &"


async def test_noticed_hosts_go_with_their_jobs_unless_their_drain_still_matters(
    pod: PodInfo, tmp_path: Path
) -> None:
    """Three noticed hosts' trainers checkpoint and exit 75 at once, and no drain answers.
    Worker w0's raylet is gone (none runs): nothing can be placed there, so it goes with its
    jobs. Worker w1's raylet ignores the SIGTERM: work could still land there, so it is held
    until its VM stops at the grace's end. The head w2 is not drained at all (the cluster
    goes with it): it goes with its jobs, its raylet up or not.

    Only w1 gets the console's grace from the emulator; w0 and w2 get one they cannot
    outlast. Their verdict is then the console's alone: with the same 6 s, the poll had to
    see their trainers gone (an SSH round trip per check, five per round) before the
    emulator's timer stopped their VMs, which a loaded box lost ("stopped" instead)."""
    grace = 6.0
    # Ends only with the pod: w0 and w2 must be let go on their jobs' exit, long before it.
    unending = 600.0
    config = pod_config(
        pod, tmp_path, recovery={"poll_interval_s": 0.5, "auto": False, "notice_grace_s": grace}
    )
    services = make_services(config, state_dir=tmp_path / "state", autostart_pod=False)
    backend = services.backend
    assert isinstance(backend, TpuVmBackend)
    w0, w1, w2 = (h.name for h in pod.hosts[:3])
    noticed = [w0, w1, w2]
    saved = {h: pod.bucket / f"{h}-checkpoint" for h in noticed}
    # An engine trainer by its command line: on SIGTERM it checkpoints, then exits 75.
    trainer = "trap 'echo step=4096 > \"$0\"; exit 75' TERM; while :; do sleep 0.2; done"
    # What keeps a VM up through its grace (Ray's gcs_server ignores SIGTERM) ...
    gcs = "trap '' TERM; sleep 120"
    # ... and, on w1 and the head, a raylet that has not gone.
    raylet = "trap '' TERM; exec -a /ray/core/src/ray/raylet/raylet sleep 120"
    nodes = [
        RayNodeInfo(node_id=f"{i:02x}" * 28, ip=h.ip, alive=True, is_head=h.name == w2)
        for i, h in enumerate(pod.hosts)  # w3 stays: the drains are not skipped
    ]
    try:
        await services.start()
        await until(lambda: len(backend.notices.listening) == 4, 60, "a watcher on every host")
        for i, host in enumerate(noticed):
            commands = [_detached(gcs), _detached(trainer, str(saved[host]), "-m", "engine.train")]
            if host != w0:
                commands.append(_detached(raylet))
            for command in commands:
                started = await asyncio.to_thread(ssh_run, pod, i, command)
                assert started.returncode == 0, started.stderr
        raylets = "pgrep -f '[r]aylet/raylet'"
        assert (await asyncio.to_thread(ssh_run, pod, 1, raylets)).returncode == 0
        assert (await asyncio.to_thread(ssh_run, pod, 0, raylets)).returncode == 1
        for i, host in enumerate(noticed):
            notice = grace if host == w1 else unending
            await pod_client.async_preempt(pod.run_dir, i, notice=notice, wait=False)
        await until(lambda: set(noticed) <= set(backend.notices.notices), 15, "notices heard")

        went = await let_noticed_hosts_go(
            backend.parts,
            noticed,
            nodes=nodes,
            notice_at=backend.notices.notices,
            grace_s=grace,
        )

        assert went.hosts[w0].how == "jobs exited, raylet gone", went.text()
        assert went.hosts[w1].how == "stopped", went.text()
        assert went.hosts[w2].how == "jobs exited", went.text()
        for path in saved.values():  # no checkpoint was cut short
            assert path.read_text().strip() == "step=4096"
    finally:
        await services.stop()
        services.close_journal()
