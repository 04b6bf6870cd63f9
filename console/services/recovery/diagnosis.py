"""Observation -> Diagnosis: what is wrong and where. Pure, and the ONE place it is worded.

Every sentence a user reads about the state of the cluster is made here: the symptoms that
trigger and explain a recovery, the warnings on the overview and in ``phantom status``, the
unmet criteria while a recovery verifies, and the per-host text of detection events. Two
front ends and the journal show the same words for the same observation.

Host conditions, from the layers of one poll:

* NOTICE: the VM got its preemption notice (its metadata says so, its processes have
  SIGTERM): it is still up, for its grace period, and then LOST;
* LOST: the TPU state says the VM is gone (PREEMPTED/TERMINATED/DELETED/DELETING);
* NOT_READY: the API says it is on its way up (CREATING, REPAIRING...);
* UNREACHABLE: READY, but SSH fails and no Ray node lives on it;
* SSH_DOWN: READY and its Ray node alive, but SSH fails (a hung sshd): shown, not recovered
  (its jobs run on; recreating the VM would kill them);
* RAY_DOWN: VM fine, no live Ray node on its IP (while the GCS answers);
* DUPLICATE: two or more live Ray nodes on one IP (the seed's checklist);
* UNKNOWN: the API did not answer for it.

LOST and NOTICE are hard (the provider says so); UNREACHABLE/RAY_DOWN/DUPLICATE are soft: they could be a
slow SSH handshake or a state query racing a registration, so auto recovery waits for them
to persist (``detector``).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from console.services.model import (
    LOST_STATES,
    TRANSITIONAL_STATES,
    HostState,
    JobStatus,
)
from console.services.observation import HostObservation, Observation


class HostCondition(StrEnum):
    OK = "ok"
    NOTICE = "notice"
    LOST = "lost"
    NOT_READY = "not_ready"
    UNREACHABLE = "unreachable"
    RAY_DOWN = "ray_down"
    DUPLICATE = "duplicate"
    SSH_DOWN = "ssh_down"
    UNKNOWN = "unknown"


HARD_CONDITIONS = frozenset({HostCondition.LOST, HostCondition.NOTICE})
SOFT_CONDITIONS = frozenset(
    {HostCondition.UNREACHABLE, HostCondition.RAY_DOWN, HostCondition.DUPLICATE}
)
# The journal's event kind for a host entering a condition (see ``event_kind``).
_CONDITION_EVENTS = {
    HostCondition.NOTICE: "preemption_notice",
    HostCondition.UNREACHABLE: "host_unreachable",
    HostCondition.RAY_DOWN: "ray_node_down",
    HostCondition.DUPLICATE: "duplicate_ray_node",
    HostCondition.SSH_DOWN: "ssh_down",
    HostCondition.UNKNOWN: "host_unknown",
}


@dataclass(frozen=True)
class Diagnosis:
    conditions: Mapping[str, HostCondition]
    head: str
    head_lost: bool
    head_reason: str
    tunnel_down: bool
    stalled_runs: tuple[str, ...] = ()
    symptoms: tuple[str, ...] = ()

    def hosts_in(self, *conds: HostCondition) -> tuple[str, ...]:
        return tuple(h for h, c in self.conditions.items() if c in conds)

    @property
    def to_recreate(self) -> tuple[str, ...]:
        return self.hosts_in(HostCondition.LOST, HostCondition.NOTICE, HostCondition.UNREACHABLE)

    @property
    def needs_recovery(self) -> bool:
        """Something a recovery step can fix (a stall alone is reported, not "fixed")."""
        bad = {HostCondition.LOST, HostCondition.NOTICE, HostCondition.NOT_READY} | SOFT_CONDITIONS
        return self.head_lost or self.tunnel_down or any(c in bad for c in self.conditions.values())

    @property
    def hard(self) -> bool:
        return any(c in HARD_CONDITIONS for c in self.conditions.values())

    @property
    def healthy(self) -> bool:
        return not self.needs_recovery and not self.stalled_runs

    def summary(self) -> str:
        return "; ".join(self.symptoms) if self.symptoms else "healthy"


def classify_host(h: HostObservation, ray_reachable: bool) -> HostCondition:
    state = str(h.tpu_state)
    if state in LOST_STATES:
        return HostCondition.LOST
    if h.notice_at is not None:
        return HostCondition.NOTICE
    if state in TRANSITIONAL_STATES:
        return HostCondition.NOT_READY
    if state != HostState.READY:
        return HostCondition.UNKNOWN
    if h.ssh_ok is False and h.ray_alive == 0:
        return HostCondition.UNREACHABLE
    if ray_reachable and h.ray_alive == 0:
        return HostCondition.RAY_DOWN
    if h.ray_alive > 1:
        return HostCondition.DUPLICATE
    if h.ssh_ok is False:
        return HostCondition.SSH_DOWN
    return HostCondition.OK


def diagnose(obs: Observation) -> Diagnosis:
    """Every layer of one observation -> what is wrong and where."""
    conditions = {h.name: classify_host(h, obs.ray_reachable) for h in obs.hosts}
    symptoms: list[str] = []
    for h in obs.hosts:
        cond = conditions[h.name]
        if cond is not HostCondition.OK:
            extra = f" [{', '.join(h.symptoms)}]" if h.symptoms else ""
            symptoms.append(f"{h.name}: {condition_text(cond, h)}{extra}")
    head_cond = conditions.get(obs.head, HostCondition.UNKNOWN)
    head_lost, head_reason = False, ""
    if not obs.head:
        pass  # a backend without a Ray head
    elif head_cond in (
        HostCondition.LOST,
        HostCondition.NOTICE,
        HostCondition.NOT_READY,
        HostCondition.UNREACHABLE,
    ):
        head_lost, head_reason = True, f"head host {obs.head} is {head_cond}"
    elif not obs.ray_reachable and head_cond is not HostCondition.UNKNOWN:
        head_lost, head_reason = True, "Ray GCS on the head does not answer"
    elif head_cond is HostCondition.RAY_DOWN:
        head_lost, head_reason = True, f"no live Ray node on head host {obs.head}"
    if head_lost:
        symptoms.append(f"head lost: {head_reason}")
    tunnel_down = obs.tunnel_up is False and not head_lost
    if tunnel_down:
        symptoms.append("dashboard tunnel down")
    if obs.stalled_runs:
        symptoms.append(f"metrics stalled: {', '.join(_run_names(obs, obs.stalled_runs))}")
    return Diagnosis(
        conditions=conditions,
        head=obs.head,
        head_lost=head_lost,
        head_reason=head_reason,
        tunnel_down=tunnel_down,
        stalled_runs=tuple(obs.stalled_runs),
        symptoms=tuple(symptoms),
    )


def condition_text(cond: HostCondition, h: HostObservation) -> str:
    """What a host's condition means, in the words every screen and event uses."""
    if cond is HostCondition.LOST:
        when = f" at {_clock(h.preempted_at)}" if h.preempted_at else ""
        return f"VM lost ({h.ip}, TPU state {h.tpu_state}{when})"
    if cond is HostCondition.NOTICE:
        return (
            f"preemption notice at {_clock(h.notice_at)} ({h.ip}): shutting down within "
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


def layer_silent_text(layer: str, budget_s: float) -> str:
    """A layer that did not answer within the poll's budget (a slow or hung API)."""
    return f"{layer} did not answer within {budget_s:g}s"


def event_kind(cond: HostCondition, h: HostObservation) -> str:
    """The journal's kind for a host entering ``cond`` (a preemption is ``preempted``)."""
    if cond is HostCondition.LOST:
        return "preempted" if str(h.tpu_state) == HostState.PREEMPTED else "host_lost"
    return _CONDITION_EVENTS.get(cond, str(cond))


def warnings(obs: Observation, diag: Diagnosis, *, ray_expected: bool) -> tuple[str, ...]:
    """The overview's and ``phantom status``'s warning lines for this observation.

    ``ray_expected``: Ray was formed and should be up (the watchdog is armed). Before that, a
    silent GCS is the expected state of a fresh pod (the overview says how to start Ray),
    not a warning.
    """
    out: list[str] = [obs.error] if obs.error else []
    for line in diag.symptoms:
        if line.startswith("head lost: ") and not (ray_expected or diag.hard):
            continue
        if line == "dashboard tunnel down":
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
    not_ready = [h.name for h in obs.hosts if str(h.tpu_state) != HostState.READY]
    if not_ready:
        out.append(f"not READY: {', '.join(not_ready)}")
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
        if st in (JobStatus.FAILED, JobStatus.STOPPED):
            out.append(f"resubmitted job {new} (was {old}) is {st}")
        elif st not in (JobStatus.RUNNING, JobStatus.SUCCEEDED):
            out.append(f"resubmitted job {new} is {st}")
    new_stalls = sorted(set(obs.stalled_runs) - stalled_before)
    if new_stalls:
        out.append(f"metrics stalled: {', '.join(_run_names(obs, new_stalls))}")
    return out


def verified_text(
    obs: Observation, n_hosts: int, resubmitted: Mapping[str, str], stalled_before: set[str]
) -> str:
    """What a verified recovery reports."""
    msg = f"{ray_alive_hosts(obs)}/{n_hosts} Ray nodes alive" if obs.head else "cluster up"
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


def ray_alive_hosts(obs: Observation) -> int:
    return sum(1 for h in obs.hosts if h.ray_alive >= 1)


def fully_formed(obs: Observation) -> bool:
    """Ray up with exactly one live node on every host."""
    return bool(obs.hosts) and obs.ray_reachable and all(h.ray_alive == 1 for h in obs.hosts)


def _run_names(obs: Observation, run_ids: tuple[str, ...] | list[str]) -> list[str]:
    return [obs.run_names.get(r) or r for r in run_ids]


def _clock(at: float | None) -> str:
    return time.strftime("%H:%M:%S", time.localtime(at)) if at else ""
