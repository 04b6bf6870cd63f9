"""One poll of a TPU VM pod through every layer -> one ``Observation``.

TPU API state, health and per-worker symptoms (one call for every host); SSH reachability
of the hosts ``ProbePlanner`` picks among those the API calls READY (a preempted VM is known
down and would only cost a connect timeout; a healthy one is probed round-robin, so the cost
of a poll grows with trouble, not with the pod); Ray node liveness per IP from the head's
state API (one call); the jobs the head knows. Each layer is bounded by the poll budget, and
a layer that does not answer is reported, never raised.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field

from console.services.backends.tpu_vm.jobs import JobError
from console.services.backends.tpu_vm.node import NodeInfo
from console.services.backends.tpu_vm.parts import PodParts
from console.services.backends.tpu_vm.probes import ProbePlanner
from console.services.backends.tpu_vm.ray import RayError, RayNodeInfo, alive_by_ip
from console.services.backends.tpu_vm.tpu import TpuApiError
from console.services.model import LOST_STATES, HostResult, HostState, JobInfo
from console.services.observation import HostObservation, Observation, layer_silent_text


@dataclass
class _HostMemory:
    last_seen: float | None = None
    resources: Mapping[str, float] = field(default_factory=dict)


class PodObserver:
    def __init__(self, parts: PodParts, notices: Mapping[str, float] | None = None) -> None:
        self.parts = parts
        self.notices = notices if notices is not None else {}
        self.tunnel_wanted = False  # from the first open on, a closed tunnel is a problem
        self.last_nodes: list[RayNodeInfo] = []
        # Node ids of raylets whose VM was recreated: dead, though the GCS may list them
        # ALIVE until its health checks time out. Not counted; forgotten once it agrees.
        self.stale: set[str] = set()
        self._memory: dict[str, _HostMemory] = {}
        self.probes = ProbePlanner()
        self._ray_alive: dict[str, int] | None = None  # per host, at the last poll

    async def observe(self, at: float) -> Observation:
        """One poll, within ``poll_budget_s`` as a whole: the TPU API gets half of it (a
        slow or hung API is reported, not waited for), the other layers what is left, each
        host's probe a little less, so every host that answered keeps its result."""
        p = self.parts
        budget = p.poll_budget_s
        loop = asyncio.get_running_loop()
        deadline = loop.time() + budget
        node: NodeInfo | None = None
        tpu_error = ""
        try:
            async with asyncio.timeout(budget / 2):
                node = await p.provider.get_node()
        except TpuApiError as exc:
            tpu_error = str(exc)
        except TimeoutError:
            tpu_error = layer_silent_text(f"TPU API GetNode for {p.provider.node_name}", budget / 2)
        if node is not None and node.endpoints:
            p.set_endpoints(node.endpoints)
        eps = p.endpoints

        def state_of(index: int) -> HostState:
            if node is None:
                return HostState.DELETED if not tpu_error else HostState.UNKNOWN
            return HostState.of(node.host_states.get(index, HostState.UNKNOWN))

        states = {ep.name: state_of(ep.index) for ep in eps}
        usable = (HostState.READY, HostState.UNKNOWN)
        to_probe = self.probes.choose(
            [ep.name for ep in eps if states[ep.name] in usable], states, self._ray_alive
        )
        head_usable = states.get(p.head.name) in usable

        left = max(0.5, deadline - loop.time())

        async def probe() -> dict[str, HostResult]:
            if not to_probe:
                return {}
            try:
                async with asyncio.timeout(left):
                    return await p.probe.probe(to_probe, timeout_s=max(0.4, left * 0.8))
            except TimeoutError:
                return {}

        async def ray_nodes() -> list[RayNodeInfo] | None:
            if not head_usable and not p.tunnel.is_up:
                return None
            try:
                async with asyncio.timeout(left):
                    return await p.ray.nodes()
            except (RayError, TimeoutError):
                return None

        async def job_list() -> list[JobInfo] | None:
            if not p.tunnel.is_up:
                return None
            try:
                async with asyncio.timeout(left):
                    return await p.jobs.list()
            except (JobError, TimeoutError):
                return None

        probes, nodes, jobs = await asyncio.gather(probe(), ray_nodes(), job_list())
        if nodes is not None:
            self.last_nodes = nodes
            self.stale &= {n.node_id for n in nodes if n.alive}
        self.probes.record(states, probes)
        alive = alive_by_ip(nodes or [], ignore=self.stale)
        known_ips = {n.ip for n in nodes or []}
        resources = {n.ip: n.resources for n in nodes or [] if n.alive}
        self._ray_alive = (
            {ep.name: alive.get(ep.ip, 0) for ep in eps} if nodes is not None else None
        )
        hosts = []
        for ep in eps:
            st = states[ep.name]
            ssh_ok = self.probes.last(ep.name) if st in usable else None
            if ssh_ok is None and st in LOST_STATES:
                ssh_ok = False
            error = self.probes.last_error(ep.name)
            mem = self._memory.setdefault(ep.name, _HostMemory())
            if (ep.name in probes and ssh_ok) or alive.get(ep.ip, 0):
                mem.last_seen = at
            if ep.ip in resources:
                mem.resources = resources[ep.ip]
            symptoms = tuple(
                s.details for s in (node.symptoms if node else ()) if s.worker_id == str(ep.index)
            )
            hosts.append(
                HostObservation(
                    name=ep.name,
                    ip=ep.ip,
                    index=ep.index,
                    tpu_state=st,
                    health=node.health if node else "",
                    symptoms=symptoms,
                    ssh_ok=ssh_ok,
                    ssh_error=_cause(error, ep.label) if error and not ssh_ok else "",
                    ray_alive=alive.get(ep.ip, 0),
                    ray_known=ep.ip in known_ips,
                    preempted_at=(
                        node.symptom_time(ep.index) if node and st in LOST_STATES else None
                    ),
                    notice_at=self.notices.get(ep.name),
                    last_seen=mem.last_seen,
                    resources=dict(mem.resources),
                )
            )
        return Observation(
            at=at,
            hosts=tuple(hosts),
            head=p.head.name,
            ray_reachable=nodes is not None,
            tunnel_up=p.tunnel.is_up if self.tunnel_wanted else None,
            jobs=tuple(jobs or ()),
            error=tpu_error,
            node_state=(
                HostState.of(node.state)
                if node
                else (HostState.UNKNOWN if tpu_error else HostState.NOT_FOUND)
            ),
            health=node.health if node else "",
            accelerator_type=(node.accelerator_type if node else "") or p.accelerator_type,
            zone=node.zone if node else "",
            dashboard_url=p.dashboard_url() or "",
            tunnel_error=p.tunnel.last_error or "",
        )


def _cause(error: str, label: str) -> str:
    """A probe's one-line error without the host label it starts with."""
    return error.removeprefix(f"{label}: ").strip() or "SSH failed"
