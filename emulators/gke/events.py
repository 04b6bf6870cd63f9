"""core/v1 Events as the components record them: one object per (object, reason, message),
its ``count`` and ``lastTimestamp`` bumped on repeats, like client-go's event correlator."""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from typing import Any

from emulators.gke.layout import NAMESPACE
from emulators.gke.store import Obj, Store, now_iso

KIND_API = {
    "Pod": "v1",
    "Node": "v1",
    "Job": "batch/v1",
    "JobSet": "jobset.x-k8s.io/v1alpha2",
}


class Recorder:
    def __init__(self, store: Store) -> None:
        self.store = store
        self._index: dict[tuple[str, str, str], tuple[str, str]] = {}
        self._seq = 0

    def emit(
        self,
        obj: Obj,
        kind: str,
        type_: str,
        reason: str,
        message: str,
        component: str,
        host: str = "",
    ) -> None:
        meta = obj["metadata"]
        uid = meta.get("uid", "")
        key = (uid, reason, message)
        ns = meta.get("namespace") or NAMESPACE
        known = self._index.get(key)
        if known is not None:
            ev = self.store.get("events", *known)
            if ev is not None:
                stamp = now_iso()

                def bump(e: Obj) -> None:
                    e["count"] = int(e.get("count", 1)) + 1
                    e["lastTimestamp"] = stamp

                self.store.mutate("events", ev, bump)
                return
        # client-go names events <object>.<UnixNano in hex>: listing order is time order.
        self._seq = max(self._seq + 1, time.time_ns())
        name = f"{meta['name']}.{self._seq:x}"
        stamp = now_iso()
        event: dict[str, Any] = {
            "kind": "Event",
            "apiVersion": "v1",
            "metadata": {"name": name, "namespace": ns},
            "involvedObject": {
                "kind": kind,
                "namespace": meta.get("namespace", ""),
                "name": meta["name"],
                "uid": uid,
                "apiVersion": KIND_API.get(kind, "v1"),
                "resourceVersion": meta.get("resourceVersion", ""),
            },
            "reason": reason,
            "message": message,
            "source": {"component": component, **({"host": host} if host else {})},
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "eventTime": None,
            "count": 1,
            "type": type_,
            "reportingComponent": component,
            "reportingInstance": host,
        }
        if not event["involvedObject"]["namespace"]:
            del event["involvedObject"]["namespace"]
        self.store.create("events", copy.deepcopy(event))
        self._index[key] = (ns, name)


def condition(
    type_: str, status: str, reason: str = "", message: str = "", probe: bool = False
) -> Obj:
    """A pod/node/job condition dict (``probe`` adds lastProbeTime as pod conditions have)."""
    c: Obj = {"type": type_, "status": status, "lastTransitionTime": now_iso()}
    if probe:
        c["lastProbeTime"] = None
    if reason:
        c["reason"] = reason
    if message:
        c["message"] = message
    return c


def set_condition(conds: list[Obj], new: Obj) -> bool:
    """Insert or update ``new`` by type; keeps lastTransitionTime when the status is unchanged."""
    for i, c in enumerate(conds):
        if c.get("type") == new["type"]:
            if (c.get("status"), c.get("reason"), c.get("message")) == (
                new.get("status"),
                new.get("reason"),
                new.get("message"),
            ):
                return False
            if c.get("status") == new.get("status"):
                new["lastTransitionTime"] = c.get("lastTransitionTime", new["lastTransitionTime"])
            conds[i] = new
            return True
    conds.append(new)
    return True


def get_condition(obj: Obj, type_: str) -> Obj | None:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == type_:
            return c
    return None


def disruption_target(reason: str, message: str) -> Callable[[Obj], None]:
    """A store mutation marking a pod as Kubernetes does before it goes for a disruption:
    the ``DisruptionTarget`` condition with ``reason`` (the kubelet's node shutdown, the
    Eviction API, ...)."""

    def mark(pod: Obj) -> None:
        conds = pod.setdefault("status", {}).setdefault("conditions", [])
        set_condition(conds, condition("DisruptionTarget", "True", reason, message, probe=True))

    return mark


def condition_true(obj: Obj, type_: str) -> bool:
    c = get_condition(obj, type_)
    return c is not None and c.get("status") == "True"
