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

_STATE = {s.value: s for s in HostState}  # HostState.of without its exception per miss


@dataclass
class _HostMemory:
    last_seen: float | None = None
    resources: Mapping[str, float] = field(default_factory=dict)


class PodObserver:
    def __init__(
        self,
        parts: PodParts,
        notices: Mapping[str, float] | None = None,
        dropped: Mapping[str, float] | None = None,
        notice_reasons: Mapping[str, str] | None = None,
    ) -> None:
        self.parts = parts
        self.notices = notices if notices is not None else {}
        self.notice_reasons = notice_reasons if notice_reasons is not None else {}
        # When each host's SSH dropped from the far end: the loss's date where the API
        # gives none (the real one reports a preempted slice without a time).
        self.dropped = dropped if dropped is not None else {}
        self.tunnel_wanted = False  # from the first open on, a closed tunnel is a problem
        self.last_nodes: list[RayNodeInfo] = []
        # Node ids of raylets whose VM was recreated: dead, though the GCS may list them
        # ALIVE until its health checks time out. Not counted; forgotten once it agrees.
        self.stale: set[str] = set()
        self._memory: dict[str, _HostMemory] = {}
        self.probes = ProbePlanner()
        self._ray_alive: dict[str, int] | None = None  # per host, at the last poll
        self._last_hosts: dict[str, tuple[tuple[object, ...], HostObservation]] = {}

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
            return _STATE.get(node.host_states.get(index, ""), HostState.UNKNOWN)

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
        # Per host, only lookups: a 1,024-host pod makes this loop the poll's own cost. A
        # host whose every field is as at the last poll keeps its observation object (a
        # frozen dataclass costs ~4 us to build; most hosts change nothing between polls).
        symptoms_of: dict[str, list[str]] = {}
        for s in node.symptoms if node else ():
            symptoms_of.setdefault(s.worker_id, []).append(s.details)
        health = node.health if node else ""
        notices = self.notices
        hosts = []
        for ep in eps:
            name, ip = ep.name, ep.ip
            st = states[name]
            ssh_ok = self.probes.last(name) if st in usable else None
            if ssh_ok is None and st in LOST_STATES:
                ssh_ok = False
            error = self.probes.last_error(name) if not ssh_ok else ""
            mem = self._memory.get(name)
            if mem is None:
                mem = self._memory[name] = _HostMemory()
            ray_alive = alive.get(ip, 0)
            if (ssh_ok and name in probes) or ray_alive:
                mem.last_seen = at
            if ip in resources:
                mem.resources = resources[ip]
            symptoms = tuple(symptoms_of.get(str(ep.index), ()))
            preempted_at = (
                node.symptom_time(ep.index) or self.dropped.get(name)
                if node and st in LOST_STATES
                else None
            )
            key = (
                ep,
                st,
                health,
                symptoms,
                ssh_ok,
                error,
                ray_alive,
                ip in known_ips,
                notices.get(name),
                self.notice_reasons.get(name, ""),
                mem.last_seen,
                mem.resources,
                preempted_at,
            )
            last = self._last_hosts.get(name)
            if last is not None and last[0] == key:
                hosts.append(last[1])
                continue
            host = HostObservation(
                name=name,
                ip=ip,
                index=ep.index,
                tpu_state=st,
                health=health,
                symptoms=symptoms,
                ssh_ok=ssh_ok,
                ssh_error=_cause(error, ep.label) if error else "",
                ray_alive=ray_alive,
                ray_known=ip in known_ips,
                preempted_at=preempted_at,
                notice_at=notices.get(name),
                notice_reason=self.notice_reasons.get(name, "") if name in notices else "",
                last_seen=mem.last_seen,
                resources=dict(mem.resources),
            )
            self._last_hosts[name] = (key, host)
            hosts.append(host)
        if len(self._last_hosts) > len(eps):
            wanted = {ep.name for ep in eps}
            self._last_hosts = {k: v for k, v in self._last_hosts.items() if k in wanted}
        return Observation(
            at=at,
            hosts=tuple(hosts),
            head=p.head.name,
            ray_reachable=nodes is not None,
            tunnel_up=p.tunnel.is_up if self.tunnel_wanted else None,
            jobs=tuple(jobs or ()),
            jobs_read=jobs is not None,
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
