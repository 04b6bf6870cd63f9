"""Seed 000's "when a spot VM gets reclaimed", as a table of recovery steps over the pod.

    orphans (alongside, until resubmit) | recreate -> wait_ready -> bootstrap -> head -> tunnel
    -> resubmit -> workers

* a LOST host (VM gone) is recreated, waited for, bootstrapped and rejoined;
* a host whose VM is fine but whose Ray node is gone (or doubled on one IP) only rejoins:
  recreate / wait_ready / bootstrap are skipped with the reason;
* when the head is lost (its host lost, or the GCS unreachable) Ray is rebuilt: the fresh
  VMs bootstrapped (a VM that survived kept its install), a new head, the tunnel re-opened,
  the jobs that were active on the old head resubmitted with the same spec (sweeps keep
  their id) and every worker rejoined.
  Jobs go back as soon as the head answers: their drivers start while the workers join (a
  distributed run's strict placement group, and Tune's trials, wait for the nodes they need),
  so the head's recovery costs little more than bringing the cluster up (where the hosts
  share cores, the workers join one at a time: ``PodAccess.rejoin_parallelism``). The surviving
  workers' raylets belong to the dead cluster: they are force-stopped (``orphans``) while
  the head's VM is recreated, instead of each waiting out a graceful stop at its rejoin.
  ``orphans`` also ends the lost jobs' trainers that outlive their raylet (stragglers,
  ``tpu_vm.stragglers``) and confirms them gone; ``resubmit`` waits for it, so a
  resubmitted job never shares its run with an old trainer still writing to it.

Each step is a function over ``PodOps``, the pod's own parts (``TpuVmBackend`` implements it;
the recovery tests use a small model pod). Every op is idempotent and returns per-host
results; ``recreate`` reports the hosts it really recreated in ``data["hosts"]`` (a provider
that can only recreate whole nodes returns all of them).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from console.services.model import ActionResult, Resubmit
from console.services.observation import Observation
from console.services.recovery.classify import HostCondition
from console.services.recovery.runner import Plan, Round, Skip, StepDef, union


class PodOps(Protocol):
    async def observe(self) -> Observation: ...

    async def recreate(self, hosts: Sequence[str]) -> ActionResult: ...

    async def wait_hosts_ready(self, hosts: Sequence[str], timeout_s: float) -> ActionResult: ...

    async def bootstrap(self, hosts: Sequence[str] | None) -> ActionResult: ...

    async def start_head(self) -> ActionResult: ...

    async def rejoin_workers(self, hosts: Sequence[str]) -> ActionResult: ...

    async def open_tunnel(self) -> ActionResult: ...

    async def stop_orphans(self, hosts: Sequence[str]) -> ActionResult: ...


def pod_plan(ops: PodOps, resubmit: Resubmit, *, ready_timeout_s: float) -> Plan:
    """The TPU VM recovery steps, bound to ``ops``."""

    def recreated(rnd: Round, chosen: Sequence[str], res: ActionResult) -> None:
        rnd.recreated = union(chosen, res.data.get("hosts", ()))

    def resubmitted(rnd: Round, chosen: Sequence[str], res: ActionResult) -> None:
        rnd.resubmitted.update(res.data.get("resubmitted", {}))

    async def wait_ready(hosts: Sequence[str]) -> ActionResult:
        return await ops.wait_hosts_ready(hosts, ready_timeout_s)

    async def head(_: Sequence[str]) -> ActionResult:
        return await ops.start_head()

    async def tunnel(_: Sequence[str]) -> ActionResult:
        return await ops.open_tunnel()

    return Plan(
        (
            StepDef("orphans", _orphans, ops.stop_orphans, overlap_until="resubmit"),
            StepDef("recreate", _to_recreate, ops.recreate, after=recreated),
            StepDef("wait_ready", _coming_up, wait_ready),
            StepDef("bootstrap", _to_bootstrap, ops.bootstrap),
            StepDef("head", _head, head, per_host=False),
            StepDef("tunnel", _tunnel, tunnel, per_host=False),
            StepDef("resubmit", _to_resubmit, resubmit, per_host=False, after=resubmitted),
            StepDef("workers", _to_join, ops.rejoin_workers),
        )
    )


def _fresh(rnd: Round) -> list[str]:
    return union(rnd.recreated, rnd.diagnosis.hosts_in(HostCondition.NOT_READY))


def _to_recreate(rnd: Round) -> Sequence[str] | Skip:
    return list(rnd.diagnosis.to_recreate) or Skip("no host to recreate: every VM is up")


def _coming_up(rnd: Round) -> Sequence[str] | Skip:
    return _fresh(rnd) or Skip("no host coming up")


def _to_bootstrap(rnd: Round) -> Sequence[str] | Skip:
    return _fresh(rnd) or Skip("no fresh VM: every host kept its install")


def _orphans(rnd: Round) -> Sequence[str] | Skip:
    if not rnd.head_lost:
        return Skip(f"head on {rnd.head} is alive: the workers' Ray is part of its cluster")
    lost = set(rnd.diagnosis.to_recreate)
    survivors = [h for h in rnd.workers if h not in lost]
    return survivors or Skip("no surviving worker")


def _head(rnd: Round) -> Sequence[str] | Skip:
    return [rnd.head] if rnd.head_lost else Skip(f"head on {rnd.head} is alive")


def _to_join(rnd: Round) -> Sequence[str] | Skip:
    if rnd.head_lost:
        hosts = rnd.workers
    else:
        needing = rnd.diagnosis.hosts_in(
            HostCondition.RAY_DOWN, HostCondition.DUPLICATE, HostCondition.NOT_READY
        )
        hosts = [h for h in union(rnd.recreated, needing) if h != rnd.head]
    if hosts:
        return hosts
    if not rnd.workers:
        return Skip("single-host pod: no workers")
    return Skip("every worker's Ray node is alive")


def _tunnel(rnd: Round) -> Sequence[str] | Skip:
    if rnd.head_lost or rnd.diagnosis.tunnel_down:
        return []
    return Skip("tunnel up and the head kept its address")


def _to_resubmit(rnd: Round) -> Sequence[str] | Skip:
    if rnd.head_lost and rnd.jobs_at_start:
        return sorted(rnd.jobs_at_start)
    if rnd.head_lost:
        return Skip("no job was active on the lost head")
    if rnd.owed_elsewhere:  # a round (or a process) before rebuilt the head, then ended
        return sorted(rnd.owed_elsewhere)
    return Skip(f"head kept: {len(rnd.jobs_at_start)} active job(s) continue")
