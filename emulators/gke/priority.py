"""PriorityClasses as `xpk cluster create` leaves them, and the API server's Priority
admission: a pod's ``priorityClassName`` resolved to its ``priority`` (and preemption policy)
when the pod is created, by the API or by the Job controller.

xpk's five (its ``kueue_config.yaml.j2``): very-low 100, low 250, medium 500, high 750,
very-high 1000; none is the global default, so a pod without a class has priority 0.
"""

from __future__ import annotations

from emulators.gke.store import Obj, Store

# (name, value, description) as xpk writes them.
XPK_PRIORITY_CLASSES = (
    ("very-low", 100, "Very Low"),
    ("low", 250, "Low"),
    ("medium", 500, "Medium"),
    ("high", 750, "High"),
    ("very-high", 1000, "Very High"),
)


class UnknownPriorityClass(Exception):
    """A pod names a PriorityClass the cluster does not have (the API answers 403)."""


def priority_classes() -> list[tuple[str, Obj]]:
    """(resource, object) pairs for xpk's PriorityClasses."""
    return [
        (
            "priorityclasses",
            {
                "apiVersion": "scheduling.k8s.io/v1",
                "kind": "PriorityClass",
                "metadata": {"name": name},
                "value": value,
                "globalDefault": False,
                "description": description,
                "preemptionPolicy": "PreemptLowerPriority",
            },
        )
        for name, value, description in XPK_PRIORITY_CLASSES
    ]


def resolve_priority(store: Store, spec: Obj) -> None:
    """Set ``spec.priority`` from ``spec.priorityClassName`` (as the Priority admission
    plugin does); raises ``UnknownPriorityClass`` naming the class when there is none."""
    name = spec.get("priorityClassName")
    if not name:
        return
    pc = store.get("priorityclasses", "", str(name))
    if pc is None:
        raise UnknownPriorityClass(f"no PriorityClass with name {name} was found")
    spec["priority"] = int(pc.get("value", 0))
    spec.setdefault("preemptionPolicy", pc.get("preemptionPolicy", "PreemptLowerPriority"))
