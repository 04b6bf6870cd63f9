"""Letting a host with a preemption notice go: as soon as its jobs are done, not at its grace.

A noticed VM is still up through its grace period while its trainers write their notice
checkpoint and exit 75; recreating (or deleting) it before that would cut them short. But
the VM itself only stops at the end of its grace (Ray's gcs_server ignores SIGTERM), so
waiting for the API to say PREEMPTED makes every recovery with notice cost the whole grace.
Instead, per noticed host:

1. drain its Ray node (``ray drain-node``, reason PREEMPTION, deadline = the grace's end):
   the GCS schedules nothing new there, so Ray Tune cannot re-place a failed trial on the
   host whose trainers just checkpointed (a trial started after the SIGTERM would never get
   one, and would die unsaved with the VM); skipped when every live node is going, and
   for the head: its GCS goes with it, so does every job, and nothing is placed anywhere
   after it (in the drill a drain sent to a noticed head never answered, and its raylet
   outlived the SIGTERM by 12-13 s when the drain reached it first, 0.3 s otherwise);
2. wait until no engine process (``python -m engine.*``: a job's trainer or driver, a
   trial's zygote and trainers) is left on it, asked over the SSH connection the console
   already holds (a VM shutting down accepts no new one);
3. and then the host may go, once its drain has answered or its raylet is gone: a drain
   can be slow to answer (before heads were left undrained, one took 14-18 s of a 30 s
   grace to fail), and a node without a raylet takes no new work anyway. The grace
   (``recovery.notice_grace_s`` and a margin) stays the bound, and the API saying the VM
   stopped ends the wait as before.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from console.services.backends.tpu_vm import raycmd
from console.services.backends.tpu_vm.parts import PodParts
from console.services.backends.tpu_vm.ray import RayNodeInfo
from console.services.backends.tpu_vm.tpu import TpuApiError
from console.services.model import HostState

GRACE_MARGIN_S = 30.0
# The brackets keep the pattern from matching the shell that runs it (its command line
# holds the pattern itself); ``pgrep`` exits 1 when nothing matches.
ENGINE_PROCESSES = "pgrep -f '[-]m engine[.]'"
# The host's raylet (it exits on the shutdown's SIGTERM): without it nothing more can be
# placed on the host, drained or not.
RAYLET_PROCESS = "pgrep -f '[r]aylet/raylet'"
NO_MATCH = 1


@dataclass
class HostGoing:
    """One noticed host: why it may go, once it may."""

    name: str
    how: str = ""  # "jobs exited", "jobs exited, raylet gone" or "stopped"; "" while waiting
    drain_error: str = ""


@dataclass
class LetGo:
    """The noticed hosts and how long they were waited for (the recreate's message)."""

    hosts: dict[str, HostGoing] = field(default_factory=dict)
    waited_s: float = 0.0

    def text(self) -> str:
        parts = [
            f"{h.name} {h.how or 'grace ended'}"
            + (f" (drain refused: {h.drain_error})" if h.drain_error else "")
            for h in self.hosts.values()
        ]
        return f"after {self.waited_s:.1f}s: " + ", ".join(parts)


async def let_noticed_hosts_go(
    parts: PodParts,
    noticed: Sequence[str],
    *,
    nodes: Sequence[RayNodeInfo],
    notice_at: Mapping[str, float],
    grace_s: float,
    clock: Callable[[], float] = time.time,
    note: Callable[[str], None] = lambda _: None,
) -> LetGo:
    """Drain ``noticed`` in Ray, then wait until each has no engine process left or has
    stopped (the API says so), bounded by the grace since its notice and a margin."""
    t0 = time.monotonic()
    out = LetGo({h: HostGoing(h) for h in noticed})
    if not noticed:
        return out
    now = clock()
    ends = {h: notice_at.get(h, now) + grace_s for h in noticed}
    deadline = t0 + max(0.0, max(ends.values()) - now) + GRACE_MARGIN_S
    note(f"{', '.join(noticed)}: drained in Ray, waiting for its jobs to checkpoint and exit")
    # Draining is for the nodes that stay: when every live node is going, there is nowhere
    # else to place work, and each `ray drain-node` is a Python start-up on a busy VM.
    going_ips = {parts.ssh.endpoint(h).ip for h in noticed}
    if not any(n.alive and n.ip not in going_ips for n in nodes):
        nodes = []
    drains = {
        h: asyncio.create_task(_drain(parts, out.hosts[h], nodes, ends[h] - now)) for h in noticed
    }
    try:
        while time.monotonic() < deadline:
            stopped = await _stopped(parts, noticed)
            for h, going in out.hosts.items():
                if going.how:
                    continue
                if h in stopped:
                    going.how = "stopped"
                elif not await _running(parts, h, ENGINE_PROCESSES):
                    if drains[h].done():
                        going.how = "jobs exited"
                    elif not await _running(parts, h, RAYLET_PROCESS):
                        going.how = "jobs exited, raylet gone"
            if all(g.how for g in out.hosts.values()):
                break
            await asyncio.sleep(parts.polling.retry_s)
    finally:
        for task in drains.values():
            task.cancel()
    out.waited_s = time.monotonic() - t0
    return out


async def _drain(
    parts: PodParts, going: HostGoing, nodes: Sequence[RayNodeInfo], left_s: float
) -> None:
    """``ray drain-node`` for each live Ray node on the host, run on the host itself."""
    ray = parts.ray
    ip = parts.ssh.endpoint(going.name).ip
    for node in nodes:
        if not node.alive or node.ip != ip or node.is_head:
            continue
        command = raycmd.drain_command(
            node.node_id,
            ray.gcs_address,
            max(0, int(left_s)),
            "preemption notice",
            ray=ray.ray,
            user_path=ray.user_path,
        )
        res = await parts.ssh.run_one(going.name, f"{command} 2>&1", timeout_s=60.0)
        if not res.ok:  # a refused drain still lets the jobs exit: only slower to be sure
            going.drain_error = (res.stdout_tail.strip().splitlines() or [res.error])[-1]


async def _running(parts: PodParts, host: str, pgrep: str) -> bool:
    """False only when the host answered that no process matches ``pgrep``."""
    res = await parts.ssh.run_one(host, pgrep, timeout_s=15.0)
    return res.exit_status != NO_MATCH


async def _stopped(parts: PodParts, noticed: Sequence[str]) -> set[str]:
    """The noticed hosts the API no longer calls READY (all of them when the node is gone)."""
    try:
        node = await parts.provider.get_node()
    except TpuApiError:
        return set()
    if node is None:
        return set(noticed)
    index = {ep.name: ep.index for ep in parts.endpoints}
    return {h for h in noticed if node.host_states.get(index.get(h, -1)) != HostState.READY}
