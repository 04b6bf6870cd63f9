"""A pod's READY, STATUS and RESTARTS as kubectl prints them (kubernetes
pkg/printers/internalversion ``printPod``).

STATUS is the pod's reason or phase, overridden by the first init container that is not done
(restartable sidecars count once started), then by the containers' waiting/terminated reasons
(``ExitCode:N`` without one), ``Terminating`` while deleted. RESTARTS counts the containers'
restarts (the init containers' while initializing, else the sidecars' and the app
containers'), with the time of the latest restart.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

Obj = Mapping[str, Any]


@dataclass(frozen=True)
class PodPrint:
    status: str  # the STATUS column
    ready: int  # READY is "ready/total"
    total: int
    restarts: int
    last_restart: str = ""  # RFC 3339 finishedAt of the latest restart ("" when none)


def _condition_true(pod: Obj, type_: str) -> bool:
    return any(
        c.get("type") == type_ and c.get("status") == "True"
        for c in (pod.get("status") or {}).get("conditions") or []
    )


def _restartable(spec: Obj, name: str) -> bool:
    for c in spec.get("initContainers") or []:
        if c.get("name") == name:
            return bool(c.get("restartPolicy") == "Always")
    return False


def _finished(cs: Obj) -> str:
    last = (cs.get("lastState") or {}).get("terminated") or {}
    return str(last.get("finishedAt") or "")


def print_pod(pod: Obj) -> PodPrint:
    """The printer's columns of one pod (its JSON, as the API serves it)."""
    spec, st = pod.get("spec") or {}, pod.get("status") or {}
    total = len(spec.get("containers") or []) + sum(
        1 for c in spec.get("initContainers") or [] if c.get("restartPolicy") == "Always"
    )
    ready = restarts = side_restarts = 0
    last_restart = side_last = ""
    reason = st.get("reason") or st.get("phase") or "Pending"
    initializing = False
    n_inits = len(spec.get("initContainers") or [])
    for i, cs in enumerate(st.get("initContainerStatuses") or []):
        restarts += int(cs.get("restartCount", 0))
        last_restart = max(last_restart, _finished(cs))
        side = _restartable(spec, cs.get("name", ""))
        if side:
            side_restarts += int(cs.get("restartCount", 0))
            side_last = max(side_last, _finished(cs))
        state = cs.get("state") or {}
        term, wait = state.get("terminated"), state.get("waiting")
        if term is not None and int(term.get("exitCode", 0)) == 0:
            continue
        if side and cs.get("started"):
            ready += 1 if cs.get("ready") else 0
            continue
        if term is not None:
            reason = "Init:" + (term.get("reason") or f"ExitCode:{term.get('exitCode', 0)}")
        elif wait is not None and wait.get("reason") and wait["reason"] != "PodInitializing":
            reason = "Init:" + wait["reason"]
        else:
            reason = f"Init:{i}/{n_inits}"
        initializing = True
        break
    if not initializing or _condition_true(pod, "Initialized"):
        restarts, last_restart = side_restarts, side_last
        has_running = False
        for cs in reversed(st.get("containerStatuses") or []):
            restarts += int(cs.get("restartCount", 0))
            last_restart = max(last_restart, _finished(cs))
            state = cs.get("state") or {}
            wait, term = state.get("waiting"), state.get("terminated")
            if wait is not None and wait.get("reason"):
                reason = wait["reason"]
            elif term is not None and term.get("reason"):
                reason = term["reason"]
            elif term is not None:
                reason = f"ExitCode:{term.get('exitCode', 0)}"
            elif cs.get("ready") and "running" in state:
                has_running = True
                ready += 1
        if reason == "Completed" and has_running:
            reason = "Running" if _condition_true(pod, "Ready") else "NotReady"
    meta = pod.get("metadata") or {}
    if meta.get("deletionTimestamp") and st.get("phase") not in ("Succeeded", "Failed"):
        reason = "Terminating"
    return PodPrint(str(reason), ready, total, restarts, last_restart)
