"""The disruptions a GKE workload meets, as the real kubectl shows them on the GKE emulator,
and as the console's GKE client reads each pod (``status.pod_failure``): an OOM kill (the
container terminated ``OOMKilled``, exit 137; the node's ``OOMKilling`` event), a node
failure (``NotReady``), and a node cordoned and drained by `kubectl drain` (the Eviction
API: the pod ``DisruptionTarget`` ``EvictionByEvictionAPI``; the node ``SchedulingDisabled``
with its ``unschedulable`` taint, so the restarted JobSet waits ``Pending`` until `kubectl
uncordon`). Before, kubectl could not cordon (nodes took no patch), found no Eviction API,
and no container ever ended ``OOMKilled``."""

from __future__ import annotations

import json
import os
import subprocess
import threading
from pathlib import Path
from typing import Any

from console.services.backends.gke import status as S
from console.services.model import PodFailure
from emulators.gke import client as gke_client
from tests.emulators.gke.test_e2e import COUNTER, http, jobset_status
from tests.emulators.gke.test_kubectl import run
from tests.support.fixtures_gke import gke, kubectl, xpk_jobset
from tests.support.waiting import wait_until

# The bound of a wait for the emulator's controllers (a kill -> Failed, a restart): only a
# failure waits it out. At 30 s, under a loaded `make test` (four workers and more on two
# cores) the OOM kill's restart was not seen in time once, while alone it takes about a second.
BOUND_S = 120

__all__ = ["gke"]

JS = "/apis/jobset.x-k8s.io/v1alpha2/namespaces/default/jobsets"
INDEX = "batch.kubernetes.io/job-completion-index"


class PodWatch:
    """`kubectl get pods -l SEL -w -o json --output-watch-events` in the background."""

    def __init__(self, k: str, info: gke_client.GkeInfo, selector: str) -> None:
        env = {**os.environ, "KUBECONFIG": str(info.kubeconfig), "HOME": str(info.run_dir)}
        self.proc = subprocess.Popen(
            [k, "get", "pods", "-l", selector, "-w", "-o", "json", "--output-watch-events"],
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        self.chunks: list[str] = []
        self.reader = threading.Thread(
            target=lambda: self.chunks.extend(self.proc.stdout or ()), daemon=True
        )
        self.reader.start()

    def objects(self) -> list[dict[str, Any]]:
        """Every object the watch has printed whole so far (the last may be half written)."""
        text, out, at = "".join(self.chunks), [], 0
        decoder = json.JSONDecoder()
        while text[at:].strip():
            at += len(text[at:]) - len(text[at:].lstrip())
            try:
                doc, at = decoder.raw_decode(text, at)
            except json.JSONDecodeError:
                break
            out.append(doc["object"])
        return out

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)
        self.reader.join(timeout=10)


def _pods(k: str, info: gke_client.GkeInfo, selector: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = json.loads(
        run(k, info, "get", "pods", "-l", selector, "-o", "json").stdout
    )["items"]
    return items


def _running(k: str, info: gke_client.GkeInfo, name: str, attempt: int) -> list[dict[str, Any]]:
    sel = f"jobset.sigs.k8s.io/jobset-name={name},jobset.sigs.k8s.io/restart-attempt={attempt}"
    return [
        p
        for p in _pods(k, info, sel)
        if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
    ]


def test_oom_kill_node_failure_and_drain_as_kubectl_shows_them(
    gke: gke_client.GkeInfo, tmp_path: Path
) -> None:
    k = kubectl("1.33")
    name = "disrupted"
    http(gke, "POST", JS, xpk_jobset(name, COUNTER, max_restarts=6, grace=2))
    wait_until(lambda: len(_running(k, gke, name, 0)) == 8, 60, "8 pods Running")
    watch = PodWatch(k, gke, f"jobset.sigs.k8s.io/jobset-name={name}")
    try:
        # The watch lists before it watches (kubectl's list, then a watch from its
        # resourceVersion): once it printed the 8 pods, no later change can be missed. A
        # kill sent before that (a kubectl start slower than the kill, the JobSet's restart
        # and the pod's deletion) left the OOMKilled pod out of what it printed.
        wait_until(
            lambda: len({o["metadata"]["name"] for o in watch.objects()}) >= 8,
            BOUND_S,
            "the watch to list the 8 pods",
        )
        # -- an OOM kill: a worker's container, exit 137 reason OOMKilled ----------------
        worker = next(p for p in _running(k, gke, name, 0) if p["metadata"]["labels"][INDEX] == "1")
        victim = worker["metadata"]["name"]
        oom = gke_client.oom_kill(gke.run_dir, victim)
        assert (oom["pod"], oom["container"], oom["signal"]) == (victim, "jax-tpu", "SIGKILL")

        def oom_seen() -> list[dict[str, Any]]:
            return [
                p
                for p in watch.objects()
                if p["metadata"]["name"] == victim
                and any(
                    (cs.get("state") or {}).get("terminated", {}).get("reason") == "OOMKilled"
                    for cs in p["status"].get("containerStatuses") or []
                )
            ]

        def failed() -> list[dict[str, Any]]:
            return [p for p in oom_seen() if p["status"].get("phase") == "Failed"]

        wait_until(lambda: bool(failed()), BOUND_S, "the pod Failed, its container OOMKilled")
        seen = failed()[0]
        (cs,) = seen["status"]["containerStatuses"]
        assert cs["state"]["terminated"]["exitCode"] == 137
        assert (S.pod_failure(seen)[0], S.pod_failure(seen)[1]) == (PodFailure.OOM_KILLED, 137)
        node_events = json.loads(
            run(
                k,
                gke,
                "get",
                "events",
                "--field-selector",
                "involvedObject.kind=Node",
                "-o",
                "json",
            ).stdout
        )["items"]
        assert any(
            e["reason"] == "OOMKilling"
            and e["type"] == "Warning"
            and e["involvedObject"]["name"] == worker["spec"]["nodeName"]
            for e in node_events
        )
        wait_until(lambda: jobset_status(gke, name).get("restarts") == 1, BOUND_S, "restart 1")
        wait_until(lambda: len(_running(k, gke, name, 1)) == 8, 60, "8 pods Running again")

        # -- a drain: cordon, then the Eviction API for each pod on the node -------------
        target = next(p for p in _running(k, gke, name, 1) if p["metadata"]["labels"][INDEX] == "2")
        node, evicted = target["spec"]["nodeName"], target["metadata"]["name"]
        out = run(
            k, gke, "drain", node, "--ignore-daemonsets", "--delete-emptydir-data", timeout=120
        ).stdout
        assert f"node/{node} cordoned" in out and f"node/{node} drained" in out, out
        assert f"pod/{evicted} evicted" in out, out
        shown = [
            p
            for p in watch.objects()
            if p["metadata"]["name"] == evicted
            and (S.condition(p, "DisruptionTarget") or {}).get("reason") == "EvictionByEvictionAPI"
        ]
        assert shown, "no DisruptionTarget EvictionByEvictionAPI on the evicted pod"
        assert S.pod_failure(shown[-1])[0] == PodFailure.EVICTED
        line = next(
            ln for ln in run(k, gke, "get", "nodes").stdout.splitlines() if ln.startswith(node)
        )
        assert "Ready,SchedulingDisabled" in line, line
        taints = http(gke, "GET", f"/api/v1/nodes/{node}")["spec"].get("taints") or []
        assert {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"} in [
            {"key": t["key"], "effect": t["effect"]} for t in taints
        ]
        wait_until(lambda: jobset_status(gke, name).get("restarts") == 2, BOUND_S, "restart 2")
        # the slice has a cordoned node: the new attempt cannot be placed until uncordon
        sel2 = f"jobset.sigs.k8s.io/jobset-name={name},jobset.sigs.k8s.io/restart-attempt=2"
        wait_until(
            lambda: any(
                "unschedulable" in (c.get("message") or "")
                for p in _pods(k, gke, sel2)
                for c in p["status"].get("conditions") or []
                if c["type"] == "PodScheduled" and c["status"] == "False"
            ),
            BOUND_S,
            "the restarted pods Pending: a node unschedulable",
        )
        assert run(k, gke, "uncordon", node).stdout.strip() == f"node/{node} uncordoned"
        assert "taints" not in http(gke, "GET", f"/api/v1/nodes/{node}")["spec"] or not [
            t
            for t in http(gke, "GET", f"/api/v1/nodes/{node}")["spec"]["taints"]
            if t["key"] == "node.kubernetes.io/unschedulable"
        ]
        wait_until(lambda: len(_running(k, gke, name, 2)) == 8, 60, "8 pods Running after uncordon")

        # -- a node failure: NotReady as kubectl prints it ------------------------------
        coord = next(p for p in _running(k, gke, name, 2) if p["metadata"]["labels"][INDEX] == "0")
        dead = coord["spec"]["nodeName"]
        gke_client.fail_node(gke.run_dir, dead, repair_after_s=30)
        line = next(
            ln for ln in run(k, gke, "get", "nodes").stdout.splitlines() if ln.startswith(dead)
        )
        assert line.split()[1] == "NotReady", line
    finally:
        watch.stop()
