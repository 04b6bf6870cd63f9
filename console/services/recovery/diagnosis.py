"""The one place the state of the cluster is worded. It only formats: what is wrong and
where is decided by ``classify`` (typed values), and this module turns that into words.

Every sentence a user reads about the state of the cluster is made here: the symptoms that
trigger and explain a recovery, the warnings on the overview and in ``phantom status``, the
unmet criteria while a recovery verifies, and the per-host text of detection events. Two
front ends and the journal show the same words for the same observation.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from dataclasses import replace
from enum import StrEnum

from console.services.model import (
    EventKind,
    HostState,
    JobStatus,
    PodFailure,
    PodStatus,
    WorkloadStatus,
)
from console.services.observation import HostObservation, Observation
from console.services.recovery.classify import (
    Diagnosis,
    HeadLoss,
    HostCondition,
    WorkloadCondition,
    classify,
    ray_alive_hosts,
)


def diagnose(obs: Observation) -> Diagnosis:
    """Every layer of one observation -> what is wrong and where, with its words."""
    diag = classify(obs)
    return replace(diag, symptoms=tuple(text for _, text in _lines(obs, diag)))


class _Line(StrEnum):
    """What a symptom line is about (``warnings`` shows some of them differently)."""

    HOST = "host"
    WORKLOAD = "workload"
    HEAD = "head"
    TUNNEL = "tunnel"
    STALLED = "stalled"


def _lines(obs: Observation, diag: Diagnosis) -> Iterator[tuple[_Line, str]]:
    pooled: dict[tuple[str, HostCondition], list[HostObservation]] = {}
    for h in obs.hosts:
        cond = diag.conditions[h.name]
        if cond is HostCondition.OK:
            continue
        if h.pool:  # a slice's nodes go together: one line per slice
            pooled.setdefault((h.pool, cond), []).append(h)
            continue
        extra = f" [{', '.join(h.symptoms)}]" if h.symptoms else ""
        yield _Line.HOST, f"{h.name}: {condition_text(cond, h)}{extra}"
    for (pool, cond), hosts in pooled.items():
        size = sum(1 for h in obs.hosts if h.pool == pool)
        yield _Line.HOST, slice_text(pool, cond, hosts, size)
    for w in obs.workloads:
        if diag.workloads[w.name] is not WorkloadCondition.OK:
            yield _Line.WORKLOAD, workload_text(diag.workloads[w.name], w, obs)
    if diag.head_lost:
        yield _Line.HEAD, f"head lost: {head_text(diag)}"
    if diag.tunnel_down:
        yield _Line.TUNNEL, "dashboard tunnel down"
    if obs.stalled_runs:
        yield _Line.STALLED, f"metrics stalled: {', '.join(_run_names(obs, obs.stalled_runs))}"


def head_text(diag: Diagnosis) -> str:
    """Why the head counts as lost."""
    if diag.head_loss is HeadLoss.HOST:
        return f"head host {diag.head} is {diag.head_condition}"
    if diag.head_loss is HeadLoss.GCS_SILENT:
        return "Ray GCS on the head does not answer"
    if diag.head_loss is HeadLoss.RAY_DOWN:
        return f"no live Ray node on head host {diag.head}"
    return ""


def workload_text(cond: WorkloadCondition, w: WorkloadStatus, obs: Observation) -> str:
    """What a workload's condition means, with what to do about it."""
    name = f"workload {w.name}"
    if cond is WorkloadCondition.FAILED:
        why = f" ({w.failed_reason})" if w.failed_reason else ""
        return (
            f"{name}: JobSet Failed{why} after {w.restarts} restart(s); recovery resubmits it "
            f"as run {w.run_name or w.name} (it resumes from its last checkpoint)"
        )
    if cond is WorkloadCondition.CAPACITY:
        waited = obs.at - (w.unschedulable_since or obs.at)
        return (
            f"{name}: {w.unschedulable} pod(s) Pending for {waited:.0f}s, unschedulable "
            f"({w.scheduler_message or 'no node fits'}): no TPU capacity for it (spot "
            "capacity or TPU quota exhausted); the console cannot fix this: wait for "
            "capacity, raise the TPU quota (IAM & Admin > Quotas), use on-demand or a "
            "reservation (spot = false), or resubmit with fewer slices"
        )
    if cond is WorkloadCondition.HEAD_FAILED:
        return f"{name}: head failing: {w.head_failed}"
    if cond is WorkloadCondition.HELD:
        return (
            f"{name}: restart held by {len(w.held)} pod(s) stuck Terminating, their "
            f"containers gone, held by finalizers: {'; '.join(w.held)}; recovery releases "
            "them (by hand: kubectl patch pod POD --type merge -p "
            """'{"metadata":{"finalizers":null}}')"""
        )
    if cond is WorkloadCondition.RESTARTING:
        return (
            f"{name}: JobSet restarting itself (restart {w.restarts}, "
            f"{w.pods_running}/{w.pods_total} pods Running)"
        )
    return f"{name}: ok"


def workload_event(kind: str, w: WorkloadStatus, before: WorkloadStatus, obs: Observation) -> str:
    """The journal's message for a workload event (``detector``)."""
    name = f"workload {w.name}"
    if kind == EventKind.JOBSET_RESTARTED:
        why = f" ({w.disrupted} pod(s) disrupted: slice preempted)" if w.disrupted else ""
        return f"{name}: JobSet restarted ({before.restarts} -> {w.restarts}){why}"
    if kind == EventKind.JOBSET_FAILED:
        why = f" ({w.failed_reason})" if w.failed_reason else ""
        return f"{name}: JobSet Failed{why}: {w.message}".rstrip(": ")
    if kind == EventKind.QUOTA_PENDING:
        return workload_text(WorkloadCondition.CAPACITY, w, obs)
    if kind == EventKind.WORKER_REPLACED:
        n = w.worker_replacements - before.worker_replacements
        return (
            f"{name}: {n} Pathways worker pod(s) replaced by their Job while the JobSet "
            f"reports no restart (restarts still {w.restarts})"
        )
    if kind == EventKind.HEAD_FAILED:
        return f"{name}: head failing: {w.head_failed}"
    return f"{name}: {kind}"


def slice_text(
    pool: str, cond: HostCondition, hosts: list[HostObservation], size: int, pods: int = 0
) -> str:
    """One slice's nodes in one condition, in one line (``pods``: the pods they took)."""
    n = f"{len(hosts)}/{size} nodes"
    if cond is HostCondition.LOST:
        states = sorted({str(h.tpu_state) for h in hosts})
        when = min((h.preempted_at for h in hosts if h.preempted_at), default=None)
        at = f" at {_clock(when)}" if when else ""
        what = (
            "preempted (spot capacity reclaimed; GKE recreates the nodes)"
            if HostState.PREEMPTED in states
            else "node failure (the slice is repaired: its nodes deleted, GKE recreates them)"
        )
        took = f", {_count(pods, 'pod')} stopped" if pods else ""
        return f"slice {pool}: {n} lost{took}, {what}{at}"
    if cond is HostCondition.NOT_READY:
        return f"slice {pool}: {n} not Ready yet ({hosts[0].health or hosts[0].tpu_state})"
    return f"slice {pool}: {n} {cond} ({hosts[0].health or hosts[0].tpu_state})"


def slice_state_text(pool: str, before: str, after: str, n: int, pods: int = 0) -> str:
    took = f" ({_count(pods, 'pod')} on them)" if pods else ""
    return f"slice {pool}: {_count(n, 'node')} {before} -> {after}{took}"


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def pod_failure_text(pod: PodStatus) -> str:
    """A pod's failure in one line: the cause its status gives, the exit code, what follows."""
    what = {
        PodFailure.OOM_KILLED: "OOMKilled",
        PodFailure.EVICTED: "evicted",
        PodFailure.CRASH: "crashed",
    }.get(PodFailure(pod.failure), pod.failure)
    code = f" (exit {pod.exit_code})" if pod.exit_code is not None else ""
    where = f" on {pod.node}" if pod.node else ""
    why = f": {pod.message}" if pod.failure == PodFailure.EVICTED and pod.message else ""
    then = ""
    if pod.restartable is not None:
        then = "; it is retried" if pod.restartable else "; not restartable: its workload fails"
    return f"pod {pod.name}{where}: {what}{code}{why}{then}"


def condition_text(cond: HostCondition, h: HostObservation) -> str:
    """What a host's condition means, in the words every screen and event uses."""
    if h.pool:
        return slice_text(h.pool, cond, [h], 1).split(": ", 1)[1]
    if cond is HostCondition.LOST:
        when = f" at {_clock(h.preempted_at)}" if h.preempted_at else ""
        return f"VM lost ({h.ip}, TPU state {h.tpu_state}{when})"
    if cond is HostCondition.NOTICE:
        what = f"{h.notice_reason} notice" if h.notice_reason else "preemption notice"
        return (
            f"{what} at {_clock(h.notice_at)} ({h.ip}): shutting down within "
            "its grace period, jobs checkpointing"
        )
    seen = f" ({h.ssh_error})" if h.ssh_error else ""
    return {
        HostCondition.OK: "ok",
        HostCondition.NOT_READY: f"TPU state {h.tpu_state}",
        HostCondition.UNREACHABLE: (
            f"unreachable over SSH{seen} and no live Ray node (TPU state {h.tpu_state})"
        ),
        HostCondition.SSH_DOWN: f"SSH does not answer{seen}; its Ray node is alive",
        HostCondition.RAY_DOWN: "Ray node down (VM fine)",
        HostCondition.DUPLICATE: f"{h.ray_alive} live Ray nodes on {h.ip}: duplicate",
        HostCondition.UNKNOWN: f"TPU state {h.tpu_state}",
    }[cond]


def warnings(obs: Observation, diag: Diagnosis, *, ray_expected: bool) -> tuple[str, ...]:
    """The overview's and ``phantom status``'s warning lines for this observation.

    ``ray_expected``: Ray was formed and should be up (the watchdog is armed). Before that, a
    silent GCS is the expected state of a fresh pod (the overview says how to start Ray),
    not a warning.
    """
    out: list[str] = [obs.error] if obs.error else []
    for what, line in _lines(obs, diag):
        if what is _Line.HEAD and not (ray_expected or diag.hard):
            continue
        if what is _Line.TUNNEL:
            line = f"dashboard tunnel down ({obs.tunnel_error or 'not connected'})"
        out.append(line)
    return tuple(out)


def unmet(
    obs: Observation,
    n_hosts: int,
    resubmitted: Mapping[str, str],
    stalled_before: set[str],
) -> list[str]:
    """What still keeps a recovery from being verified (empty: the cluster is back)."""
    out: list[str] = []
    not_ready = [h for h in obs.hosts if str(h.tpu_state) != HostState.READY]
    pools = sorted({h.pool for h in not_ready if h.pool})
    for pool in pools:
        n = sum(1 for h in not_ready if h.pool == pool)
        out.append(f"slice {pool}: {n} node(s) not Ready")
    if any(not h.pool for h in not_ready):
        out.append(f"not READY: {', '.join(h.name for h in not_ready if not h.pool)}")
    unreachable = [h.name for h in obs.hosts if h.ssh_ok is False]
    if unreachable:
        out.append(f"SSH down: {', '.join(unreachable)}")
    if obs.head and not obs.ray_reachable:
        out.append("Ray GCS not answering")
    elif obs.head:
        alive = ray_alive_hosts(obs)
        if alive < n_hosts:
            missing = [h.name for h in obs.hosts if h.ray_alive == 0]
            out.append(f"{alive}/{n_hosts} Ray nodes alive (missing {', '.join(missing)})")
        dup = [h.name for h in obs.hosts if h.ray_alive > 1]
        if dup:
            out.append(f"duplicate Ray nodes on {', '.join(dup)}")
    if obs.tunnel_up is False:
        out.append("tunnel down")
    status = {j.job_id: j.status for j in obs.jobs}
    for old, new in resubmitted.items():
        st = status.get(new, JobStatus.UNKNOWN)
        if st in (JobStatus.FAILED, JobStatus.PREEMPTED, JobStatus.STOPPED):
            out.append(f"resubmitted job {new} (was {old}) is {st}")
        elif st not in (JobStatus.RUNNING, JobStatus.SUCCEEDED):
            out.append(f"resubmitted job {new} is {st}")
    for w in obs.workloads:
        if w.owned and w.status == JobStatus.PENDING and w.name not in resubmitted:
            out.append(f"workload {w.name}: {w.pods_running}/{w.pods_total} pods Running")
    new_stalls = sorted(set(obs.stalled_runs) - stalled_before)
    if new_stalls:
        out.append(f"metrics stalled: {', '.join(_run_names(obs, new_stalls))}")
    return out


def verified_text(
    obs: Observation, n_hosts: int, resubmitted: Mapping[str, str], stalled_before: set[str]
) -> str:
    """What a verified recovery reports."""
    if obs.head:
        msg = f"{ray_alive_hosts(obs)}/{n_hosts} Ray nodes alive"
    elif any(h.pool for h in obs.hosts):
        ready = sum(1 for h in obs.hosts if h.tpu_state == HostState.READY)
        running = sum(1 for w in obs.workloads if w.owned and w.status == JobStatus.RUNNING)
        msg = f"{ready}/{len(obs.hosts)} nodes Ready, {running} workload(s) Running"
    else:
        msg = "cluster up"
    if obs.tunnel_up:
        msg += ", tunnel up"
    if resubmitted:
        msg += f", {len(resubmitted)} job(s) running again"
    silent = sorted(set(obs.stalled_runs) & stalled_before)
    if silent:
        msg += f"; still silent (superseded by resubmission): {', '.join(silent)}"
    return msg


def job_env_problems(env: Mapping[str, str], expected: Mapping[str, str | None]) -> tuple[str, ...]:
    """What a job's runtime env lacks of what the console expected (the seed's checklist: "did
    the job start with the expected env vars?"). An expected value of None (a secret, or a
    ``$NAME`` reference) must be set and non-empty; its value is never compared or shown."""
    out: list[str] = []
    for name, want in expected.items():
        got = env.get(name)
        if got is None:
            out.append(f"{name} not set")
        elif want is None:
            if not got:
                out.append(f"{name} is empty")
        elif got != want:
            out.append(f"{name}={got!r}, expected {want!r}")
    return tuple(out)


def job_env_text(job_id: str, problems: tuple[str, ...] | list[str]) -> str:
    """The journal's and the screens' sentence for a job started without the expected env."""
    return f"job {job_id} started without the expected env: {'; '.join(problems)}"


def resubmitted_text(old: str, new: str) -> str:
    """The journal's line for a job the recovery submitted again."""
    if old == new:
        return f"workload {old} failed, resubmitted under the same run name (resumes from its checkpoints)"
    return f"job {old} lost with the head, resubmitted as {new}"


def _run_names(obs: Observation, run_ids: tuple[str, ...] | list[str]) -> list[str]:
    return [obs.run_names.get(r) or r for r in run_ids]


def _clock(at: float | None) -> str:
    return time.strftime("%H:%M:%S", time.localtime(at)) if at else ""
