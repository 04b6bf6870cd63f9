"""Seed 004's recovery on GKE, as a table of steps: the JobSet restarts itself; the console
waits for the slice, resubmits what failed and reports what it cannot fix.

    nodes -> release -> resubmit

* ``nodes``: a preempted slice's nodes are recreated by GKE (a spot slice comes back when
  there is capacity): wait until they are Ready. When the workloads' pods stay
  unschedulable past the capacity wait, no step can help: the step fails at once with the
  diagnosis' words (quota or capacity, and the fix) instead of waiting out its timeout;
* ``release``: pods of the console's workloads stuck Terminating, their containers gone,
  held by finalizers (a log shipper's, a webhook's, a stuck Job controller's) past
  ``HELD_AFTER_S``: their finalizers are taken off, so the Job's foreground deletion ends
  and the JobSet recreates its Jobs (it cannot while a Job of the same name remains);
* ``resubmit``: a JobSet of this console that is Failed (ReachedMaxRestarts, or a failure
  policy) is deleted and created again from its recorded spec, under the same name and run
  name, so it resumes from its last checkpoint.

VERIFY (the runner's) then waits until every node is Ready and the console's workloads run
again. Each step is a function over ``GkeOps`` (``GkeBackend`` implements it).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from console.services.model import ActionResult, JobStatus
from console.services.recovery.classify import HostCondition
from console.services.recovery.runner import Plan, Round, Skip, StepDef


class GkeOps(Protocol):
    async def wait_nodes(self, pools: Sequence[str], timeout_s: float) -> ActionResult: ...

    async def resubmit_workloads(self, names: Sequence[str]) -> ActionResult: ...

    async def release_held(self, names: Sequence[str]) -> ActionResult: ...


def gke_plan(ops: GkeOps, *, ready_timeout_s: float) -> Plan:
    def resubmitted(rnd: Round, chosen: Sequence[str], res: ActionResult) -> None:
        rnd.resubmitted.update(res.data.get("resubmitted", {}))

    async def wait_nodes(pools: Sequence[str]) -> ActionResult:
        return await ops.wait_nodes(pools, ready_timeout_s)

    return Plan(
        (
            StepDef("nodes", _slices_down, wait_nodes),
            StepDef("release", _held_workloads, ops.release_held, per_host=False),
            StepDef(
                "resubmit",
                _failed_workloads,
                ops.resubmit_workloads,
                per_host=False,
                after=resubmitted,
            ),
        )
    )


def _slices_down(rnd: Round) -> Sequence[str] | Skip:
    down = rnd.diagnosis.hosts_in(HostCondition.LOST, HostCondition.NOT_READY)
    pools = sorted({h.pool for h in rnd.observation.hosts if h.name in down and h.pool})
    return pools or Skip("every slice's nodes are Ready")


def _held_workloads(rnd: Round) -> Sequence[str] | Skip:
    held = rnd.diagnosis.to_release
    return list(held) if held else Skip("no pod held Terminating")


def _failed_workloads(rnd: Round) -> Sequence[str] | Skip:
    failed = rnd.diagnosis.to_resubmit
    if failed:
        return list(failed)
    restarting = [
        w.name for w in rnd.observation.workloads if w.restarts and w.status is not JobStatus.FAILED
    ]
    if restarting:
        return Skip(f"no failed workload: the JobSets restart themselves ({', '.join(restarting)})")
    return Skip("no failed workload of this console")
