"""kubectl's pod columns, written once: the GKE emulator's server-side Table row and the
console's own reading of a watched pod print the same READY, STATUS and RESTARTS."""

from __future__ import annotations

from typing import Any

import pytest

from console.services.backends.gke.status import pod_status
from emulators.gke.tables import pod_cells
from kubeprint.pod import PodPrint, print_pod

MAIN = {"name": "main", "ready": True, "restartCount": 0, "state": {"running": {}}}


def pod(phase: str, containers: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    spec = {"containers": [{"name": c["name"]} for c in containers], **extra.pop("spec", {})}
    meta = {"name": "p", "creationTimestamp": "2026-01-01T00:00:00Z", **extra.pop("meta", {})}
    return {"metadata": meta, "spec": spec, "status": {"phase": phase, **extra}}


SIDECAR = {"initContainers": [{"name": "proxy", "restartPolicy": "Always"}]}
PODS = {
    "running": pod("Running", [MAIN], containerStatuses=[MAIN]),
    "init failed": pod(
        "Pending",
        [dict(MAIN, ready=False, state={"waiting": {"reason": "PodInitializing"}})],
        spec={"initContainers": [{"name": "setup"}]},
        initContainerStatuses=[
            {"name": "setup", "restartCount": 2, "state": {"terminated": {"exitCode": 3}}}
        ],
    ),
    "sidecar up, main done": pod(
        "Running",
        [MAIN],
        spec=SIDECAR,
        conditions=[{"type": "Initialized", "status": "True"}],
        initContainerStatuses=[dict(MAIN, name="proxy", started=True)],
        containerStatuses=[
            dict(MAIN, ready=False, state={"terminated": {"exitCode": 0, "reason": "Completed"}})
        ],
    ),
    "one done, one running": pod(
        "Running",
        [MAIN, dict(MAIN, name="side")],
        containerStatuses=[
            dict(MAIN, ready=False, state={"terminated": {"exitCode": 0, "reason": "Completed"}}),
            dict(MAIN, name="side"),
        ],
    ),
    "restarted": pod(
        "Running",
        [MAIN],
        containerStatuses=[
            dict(
                MAIN,
                restartCount=4,
                lastState={"terminated": {"finishedAt": "2026-01-01T00:05:00Z"}},
            )
        ],
    ),
}


def test_the_printer_follows_kubectl() -> None:
    assert print_pod(PODS["running"]) == PodPrint("Running", 1, 1, 0)
    assert print_pod(PODS["init failed"]) == PodPrint("Init:ExitCode:3", 0, 1, 2)
    # a started sidecar counts in READY; the app container's reason is the STATUS
    assert print_pod(PODS["sidecar up, main done"]) == PodPrint("Completed", 1, 2, 0)
    # a container done while another still runs: NotReady until the pod is Ready
    assert print_pod(PODS["one done, one running"]) == PodPrint("NotReady", 1, 2, 0)
    assert print_pod(PODS["restarted"]).last_restart == "2026-01-01T00:05:00Z"


@pytest.mark.parametrize("name", sorted(PODS))
def test_the_emulators_table_and_the_console_agree(name: str) -> None:
    row, seen = pod_cells(PODS[name]), pod_status(PODS[name])
    assert row[1:3] == [seen.ready, seen.status]
    assert row[3].split(" ")[0] == str(seen.restarts)
