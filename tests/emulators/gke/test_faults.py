"""Faults other than a spot reclaim on the GKE emulator (``emulators/gke/faults.py``): a
container whose main process is killed while its child still holds the log pipe (xpk's
wrapper around the trainer) fails its pod with 137 and restarts the JobSet; a node whose VM
dies goes Ready=Unknown, and GKE's repair of the slice fails its pods (DeletionByPodGC),
restarts the JobSet and brings the nodes back."""

from __future__ import annotations

import urllib.parse

import pytest

from emulators.gke import client as gke_client
from tests.emulators.gke.test_e2e import COUNTER, http, jobset_status, pods
from tests.support.fixtures_gke import gke, xpk_jobset
from tests.support.waiting import wait_until

__all__ = ["gke"]

JS = "/apis/jobset.x-k8s.io/v1alpha2/namespaces/default/jobsets"
INDEX = "batch.kubernetes.io/job-completion-index"


def running(info: gke_client.GkeInfo, name: str, attempt: int) -> list[dict]:
    sel = urllib.parse.quote(
        f"jobset.sigs.k8s.io/jobset-name={name},jobset.sigs.k8s.io/restart-attempt={attempt}"
    )
    return [p for p in pods(info, sel) if p.get("status", {}).get("phase") == "Running"]


def test_a_crash_and_a_dead_node_each_restart_the_jobset(gke: gke_client.GkeInfo) -> None:
    http(gke, "POST", JS, xpk_jobset("faulty", COUNTER, max_restarts=5, grace=2))
    wait_until(lambda: len(running(gke, "faulty", 0)) == 8, 60, "8 pods Running")
    worker = next(p for p in running(gke, "faulty", 0) if p["metadata"]["labels"][INDEX] == "1")
    crash = gke_client.crash_container(gke.run_dir, worker["metadata"]["name"])
    assert (crash["container"], crash["signal"]) == ("jax-tpu", "SIGKILL")
    wait_until(lambda: jobset_status(gke, "faulty").get("restarts") == 1, 30, "restart 1")
    wait_until(lambda: len(running(gke, "faulty", 1)) == 8, 60, "8 pods Running again")

    coord = next(p for p in running(gke, "faulty", 1) if p["metadata"]["labels"][INDEX] == "0")
    node = coord["spec"]["nodeName"]
    failure = gke_client.fail_node(gke.run_dir, node, repair_after_s=0.5)
    assert failure["pods"] == [coord["metadata"]["name"]]
    ready = next(
        c
        for c in http(gke, "GET", f"/api/v1/nodes/{node}")["status"]["conditions"]
        if c["type"] == "Ready"
    )
    assert (ready["status"], ready["reason"]) == ("Unknown", "NodeStatusUnknown")
    wait_until(lambda: jobset_status(gke, "faulty").get("restarts") == 2, 30, "restart 2")
    wait_until(lambda: len(running(gke, "faulty", 2)) == 8, 60, "8 pods Running on the new slice")
    with pytest.raises(gke_client.GkeUsageError, match="unknown node 'nope'"):
        gke_client.fail_node(gke.run_dir, "nope")
    with pytest.raises(gke_client.GkeUsageError, match="has no running container"):
        gke_client.crash_container(gke.run_dir, "nope")
