"""Asking a workload's trainers for a checkpoint now, where they offer a way to be asked.

A pod's trainer offers one by naming the signal that asks in its container's environment
(``ASK_ENV``, e.g. ``PHANTOM_CHECKPOINT_SIGNAL=SIGUSR2``; the GKE emulator's GRPO workload
takes it). Kubernetes has no call that signals a container: the console can only where it is
handed a way to (``SignalContainer``: the local GKE emulator's own client); on a real cluster
it cannot, and says so. Each asked pod answers with one log line (``ASKED_LINE_RE``): the
coordinator's names the checkpoint it saved.
"""

from __future__ import annotations

import asyncio
import re
import signal
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from console.services.backends.gke import status as S
from console.services.backends.gke.kube import KubeApi, NotFound, Obj
from console.services.backends.gke.logs import read_log
from console.services.backends.gke.observe import Caches
from console.services.jobs.workload import ASK_ENV
from console.services.model import ActionResult, HostResult

ASKED_LINE_RE = re.compile(
    r"Asked for a checkpoint \((?P<signal>[A-Z0-9]+)\): (?:saved a checkpoint to "
    r"(?P<path>\S+)|the coordinator saves it) at step (?P<step>\d+); training on"
)
NO_SIGNAL = (
    "phantom cannot signal a pod's trainer on a real GKE cluster (Kubernetes has no call "
    "for it, and phantom runs no exec in your pods); MaxText checkpoints every "
    "checkpoint_period steps on its own"
)

# (pod, container, signal number) -> the container's main process was sent it
SignalContainer = Callable[[str, str, int], Awaitable[None]]


@dataclass(frozen=True)
class Askable:
    pod: str
    container: str
    signal: str


def askable(caches: Caches, workload: str) -> tuple[list[str], list[Askable]]:
    """The workload's running pods, and those whose trainer names the signal that asks."""
    running: list[str] = []
    found: list[Askable] = []
    for raw in caches.pods.values():
        p = S.pod_status(raw)
        if p.workload != workload or p.phase != "Running" or S.meta(raw).get("deletionTimestamp"):
            continue
        running.append(p.name)
        for container in (raw.get("spec") or {}).get("containers") or []:
            sig = _declared(container)
            if sig:
                found.append(Askable(p.name, str(container.get("name", "")), sig))
                break
    return running, found


def _declared(container: Obj) -> str:
    for env in container.get("env") or []:
        value = str(env.get("value") or "")
        if (
            env.get("name") == ASK_ENV
            and value.startswith("SIG")
            and value in signal.Signals.__members__
        ):
            return value
    return ""


async def ask_workload(
    api: KubeApi,
    caches: Caches,
    workload: str,
    signal_container: SignalContainer,
    timeout_s: float,
    *,
    poll_s: float = 0.5,
) -> ActionResult:
    """Signal every askable pod of ``workload`` and wait for each one's answer. A pod that
    goes away or whose container ends before it answers (a restart replaces every pod of
    the workload; the replacements were not asked) is reported gone, saying why."""
    t0 = time.monotonic()
    running, asked = askable(caches, workload)
    if not running:
        raise ValueError(f"checkpoint: workload {workload!r} has no running pod to ask")
    if not asked:
        raise ValueError(
            f"checkpoint: workload {workload!r}'s trainer offers no way to be asked for a "
            f"checkpoint (its containers do not set {ASK_ENV}; a trainer that checkpoints "
            "on a signal names it there)"
        )
    gone: dict[str, str] = {}  # pod -> why it cannot answer
    before: dict[str, int] = {}
    for a in asked:
        try:
            before[a.pod] = len(await _answers(api, a))
        except NotFound:
            gone[a.pod] = _ended(caches, a) or DELETED
    for a in asked:
        if a.pod in gone:
            continue
        try:
            await signal_container(a.pod, a.container, int(signal.Signals[a.signal]))
        except ValueError as exc:  # it stopped running since the cache said it ran
            gone[a.pod] = f"not signalled: {exc}"
    answers: dict[str, re.Match[str]] = {}
    deadline = time.monotonic() + timeout_s
    while len(answers) + len(gone) < len(asked) and time.monotonic() < deadline:
        await asyncio.sleep(poll_s)
        for a in asked:
            if a.pod in answers or a.pod in gone:
                continue
            ended = _ended(caches, a)  # before the read: an answer it wrote is in the log
            try:
                found = await _answers(api, a)
            except NotFound:
                gone[a.pod] = _ended(caches, a) or DELETED
                continue
            if len(found) > before[a.pod]:
                answers[a.pod] = found[-1]
            elif ended:
                gone[a.pod] = ended
    per_host: dict[str, HostResult] = {}
    checkpoints = []
    for a in asked:
        m = answers.get(a.pod)
        error = "" if m is not None else gone.get(a.pod, "did not answer in time")
        per_host[a.pod] = HostResult(a.pod, m is not None, error=error)
        if m is not None and m["path"]:
            checkpoints.append(
                {"host": a.pod, "run": workload, "step": int(m["step"]), "uri": m["path"]}
            )
    late = [
        {"host": a.pod, "run": workload}
        for a in asked
        if a.pod not in answers and a.pod not in gone
    ]
    lost = [{"host": a.pod, "run": workload, "why": gone[a.pod]} for a in asked if a.pod in gone]
    ok = not late and not lost and bool(checkpoints)
    steps = ", ".join(f"{c['run']}@{c['step']}" for c in checkpoints)
    message = f"{len(asked)} pod(s) of workload {workload} asked; checkpointed: {steps or 'none'}"
    if late:
        message += f"; {len(late)} did not answer"
    if lost:
        message += f"; {len(lost)} gone before answering ({lost[0]['host']}: {lost[0]['why']})"
    return ActionResult(
        action="checkpoint",
        ok=ok,
        elapsed_s=time.monotonic() - t0,
        per_host=per_host,
        message=message,
        data={"job": workload, "checkpoints": checkpoints, "late": late, "gone": lost},
    )


DELETED = (
    "deleted before it answered (a restart replaces every pod of the workload; the new "
    "pods were not asked)"
)


def _ended(caches: Caches, a: Askable) -> str:
    """Why the asked pod can no longer answer, as its watch cache last saw it ("" while it
    can): deleted, or its container ended (by the asking signal: the container's main
    process did not pass it on to the trainer)."""
    raw = caches.pods.get(a.pod)
    if raw is None:
        return DELETED
    for cs in (raw.get("status") or {}).get("containerStatuses") or []:
        if cs.get("name") != a.container:
            continue
        ended = (cs.get("state") or {}).get("terminated")
        if not ended:
            return ""
        code = ended.get("exitCode")
        if code == 128 + int(signal.Signals[a.signal]):
            return (
                f"its container ended by {a.signal} (exit {code}) before it answered: its "
                f"main process does not pass {a.signal} on to the trainer (a workload "
                "phantom makes has xpk's wrapper pass it on)"
            )
        return f"its container ended (exit {code}) before it answered"
    return ""


async def _answers(api: KubeApi, a: Askable) -> list[re.Match[str]]:
    return list(ASKED_LINE_RE.finditer(await read_log(api, a.pod, a.container)))
