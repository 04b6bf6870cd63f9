"""A JobSet with replicated jobs named neither `slice-job` nor `pathways-head`, made by
hand (not by the console): its logs URL names its coordinator pod and following its logs
reads that pod, through the console's services on the GKE emulator."""

from __future__ import annotations

import asyncio
import json
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from console.services.model import LogLine, LogStreamClosed
from emulators.gke import client as gke_client
from tests.support.fixtures_gke import gke_module
from tests.support.gke_services import gke_config, gke_services
from tests.support.waiting import until

__all__ = ["gke_module"]


def job(rjob: str, pods: int) -> dict[str, Any]:
    script = f"echo role={rjob} pod=$JOB_COMPLETION_INDEX; exec sleep 120"
    return {
        "name": rjob,
        "replicas": 1,
        "template": {
            "spec": {
                "parallelism": pods,
                "completions": pods,
                "backoffLimit": 0,
                "template": {
                    "spec": {
                        "restartPolicy": "Never",
                        "nodeSelector": {"cloud.google.com/gke-nodepool": "cpu-np"},
                        "containers": [
                            {
                                "name": "main",
                                "image": "python:3.11",
                                "command": ["bash", "-c", script],
                            }
                        ],
                    }
                },
            }
        },
    }


def create_jobset(info: gke_client.GkeInfo, name: str, spec: dict[str, Any]) -> None:
    body = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": name}}
    req = urllib.request.Request(
        f"{info.server}/apis/jobset.x-k8s.io/v1alpha2/namespaces/default/jobsets",
        data=json.dumps({**body, "spec": spec}).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(req, timeout=10) as resp:
        assert resp.status == 201


def pod_prefix(logs_url: str) -> str:
    query = urllib.parse.unquote(logs_url.partition("query=")[2].split(";")[0])
    (line,) = [ln for ln in query.splitlines() if ln.startswith("resource.labels.pod_name:")]
    return line.split('"')[1]


async def first_line(svc: Any, name: str) -> str:
    async for item in svc.follow_logs(name):
        if isinstance(item, LogLine):
            return str(item.text)
        assert not isinstance(item, LogStreamClosed), item
    raise AssertionError("the follow ended without a line")


async def test_logs_of_a_jobset_with_any_replicated_job_names(
    gke_module: gke_client.GkeInfo, tmp_path: Path
) -> None:
    create_jobset(gke_module, "solo", {"replicatedJobs": [job("workers", 2)]})
    # two replicated jobs, the coordinator named by spec.coordinator
    create_jobset(
        gke_module,
        "duo",
        {
            "coordinator": {"replicatedJob": "evaluator"},
            "replicatedJobs": [job("workers", 2), job("evaluator", 1)],
        },
    )
    config = gke_config(gke_module.run_dir)
    async with gke_services(config, tmp_path / "state") as (svc, _seen):

        def running(name: str, pods: int) -> bool:
            return any(w.name == name and w.pods_running == pods for w in svc.snapshot().workloads)

        await until(lambda: running("solo", 2) and running("duo", 3), 30, "both JobSets running")
        workloads = {w.name: w for w in svc.snapshot().workloads}
        pods = [p.name for p in svc.snapshot().pods]
        assert pod_prefix(workloads["solo"].logs_url) == "solo-workers-0-0-"
        assert pod_prefix(workloads["duo"].logs_url) == "duo-evaluator-0-0-"
        for name in ("solo", "duo"):
            prefix = pod_prefix(workloads[name].logs_url)
            assert len([p for p in pods if p.startswith(prefix)]) == 1, (prefix, pods)
        assert await asyncio.wait_for(first_line(svc, "solo"), 20) == "role=workers pod=0"
        assert await asyncio.wait_for(first_line(svc, "duo"), 20) == "role=evaluator pod=0"
