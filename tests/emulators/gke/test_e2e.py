"""Seed 004 end to end on the GKE emulator: an xpk JobSet running the emulated GRPO
workload through a slice preemption with notice (issue 15: the SIGTERM checkpoint loses no
step), a Pathways worker replaced by its Job while the JobSet never restarts, and a quota
stall that leaves the restarted pods Pending with FailedScheduling events."""

from __future__ import annotations

import json
import re
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from emulators.gke import client as gke_client
from emulators.gke.workload.grpo import TUNIX_TAGS
from tests.support.fixtures_gke import gke, pathways_jobset, xpk_jobset
from tests.support.waiting import wait_until

__all__ = ["gke"]

JS = "/apis/jobset.x-k8s.io/v1alpha2/namespaces/default/jobsets"
COUNTER = "exec python -c \"import time\nfor i in range(1, 4000):\n    print('step', i, flush=True)\n    time.sleep(0.1)\""  # sleep-noqa: the workload's pace


def http(info: gke_client.GkeInfo, method: str, path: str, body: Any = None) -> Any:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(
        f"{info.server}{path}",
        data=data,
        method=method,
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=10) as resp:
        raw = resp.read()
    return json.loads(raw) if raw.startswith(b"{") else raw.decode()


def jobset_status(info: gke_client.GkeInfo, name: str) -> dict[str, Any]:
    return dict(http(info, "GET", f"{JS}/{name}").get("status") or {})


def pods(info: gke_client.GkeInfo, selector: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = http(
        info, "GET", f"/api/v1/namespaces/default/pods?labelSelector={selector}"
    )["items"]
    return items


def phases(info: gke_client.GkeInfo, selector: str) -> list[str]:
    return [p.get("status", {}).get("phase", "") for p in pods(info, selector)]


def scalars(tb_dir: Path) -> dict[Path, dict[str, list[int]]]:
    """Steps per tag in each event file (one file per process start)."""
    out: dict[Path, dict[str, list[int]]] = {}
    for f in sorted(tb_dir.glob("events.out.tfevents.*")):
        ea = EventAccumulator(str(f))
        ea.Reload()
        out[f] = {t: [e.step for e in ea.Scalars(t)] for t in ea.Tags()["scalars"]}
    return out


@pytest.mark.slow
def test_grpo_survives_a_preemption_with_notice_losing_no_step(gke: gke_client.GkeInfo) -> None:
    name = "gptoss-grpo"
    ckpt_in = gke.bucket / "phantom-bucket" / "gpt-oss-20b" / "0" / "items"
    ckpt_in.mkdir(parents=True)
    http(
        gke,
        "POST",
        "/api/v1/namespaces/default/secrets",
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "hf-token"},
            "stringData": {"HF_TOKEN": "hf_notARealToken"},
        },
    )
    env = {
        "BASE_OUTPUT_DIRECTORY": "gs://phantom-bucket/maxtext-runs",
        "RUN_NAME": name,
        "MAXTEXT_CKPT_PATH": "gs://phantom-bucket/gpt-oss-20b/0/items",
        "STEPS": "60",
        "STEP_TIME": "0.25",
        "CHECKPOINT_PERIOD": "25",
    }
    manifest = xpk_jobset(
        name,
        "bash run_gptoss_20b_rl.sh",
        env=env,
        secret_env={"HF_TOKEN": ("hf-token", "HF_TOKEN")},
    )
    http(gke, "POST", JS, manifest)
    sel = f"jobset.sigs.k8s.io/jobset-name%3D{name}"
    wait_until(lambda: phases(gke, sel).count("Running") == 8, 120, "8 pods Running")
    out = gke.bucket / "phantom-bucket" / "maxtext-runs" / name
    tb_dir, ckpt_dir = out / "tensorboard", out / "checkpoints"

    def reached(step: int) -> bool:
        files = scalars(tb_dir)
        return (
            bool(files) and max(files[f].get("rewards/train/mean", [0])[-1] for f in files) >= step
        )

    wait_until(lambda: reached(30), 180, "step 30 in TensorBoard")
    assert (ckpt_dir / "25").is_dir()
    first = scalars(tb_dir)
    assert set(TUNIX_TAGS) <= set(next(iter(first.values())))
    gke_client.preempt_slice(gke.run_dir, "phantom-gke-np-0", grace_s=30)
    wait_until(lambda: jobset_status(gke, name).get("restarts") == 1, 180, "JobSet restart")
    notice = sorted(
        int(p.name) for p in ckpt_dir.iterdir() if p.name.isdigit() and int(p.name) % 25
    )
    assert len(notice) == 1 and notice[0] > 30, notice  # beyond the periodic checkpoint 25
    saved = notice[0]
    wait_until(
        lambda: jobset_status(gke, name).get("terminalState") == "Completed", 90, "JobSet Completed"
    )
    status = jobset_status(gke, name)
    assert status["restarts"] == 1
    assert any(c["type"] == "Completed" and c["status"] == "True" for c in status["conditions"])
    files = scalars(tb_dir)
    assert len(files) == 2, "one event file per attempt"
    before, after = (files[f]["rewards/train/mean"] for f in sorted(files))
    assert before[-1] == saved, "the notice checkpoint holds the last step logged"
    assert after[0] == saved + 1, "resumed exactly after the notice checkpoint"
    assert sorted(set(before) | set(after)) == list(range(1, 61))
    logs = "".join(p.read_text() for p in (gke.run_dir / "logs").rglob("*.log"))
    assert f"Preemption notice (SIGTERM): saved a checkpoint at step {saved}" in logs
    assert f"Restoring checkpoint from {ckpt_dir / str(saved)}" in logs
    assert "EXIT_CODE=143" in logs and "hf_notARealToken" not in logs


def test_pathways_worker_replaced_while_jobset_restarts_stays_zero(gke: gke_client.GkeInfo) -> None:
    name = "pw-grpo"
    http(gke, "POST", JS, pathways_jobset(name, COUNTER))
    head_sel = "jobset.sigs.k8s.io/replicatedjob-name%3Dpathways-head"
    worker_sel = "jobset.sigs.k8s.io/replicatedjob-name%3Dworker"
    wait_until(lambda: phases(gke, head_sel) == ["Running"], 120, "head Running")
    wait_until(lambda: phases(gke, worker_sel).count("Running") == 8, 120, "workers Running")
    head = pods(gke, head_sel)[0]
    assert head["metadata"]["labels"]["jobset.sigs.k8s.io/coordinator"] == (
        f"{name}-pathways-head-0-0.{name}"
    )
    env_args = head["spec"]["initContainers"][0]["args"]
    assert "--resource_manager_address=$(PATHWAYS_HEAD):29001" in env_args
    old = {p["metadata"]["uid"] for p in pods(gke, worker_sel)}
    gke_client.preempt_slice(gke.run_dir, 0, grace_s=2)

    def replaced() -> bool:
        now = pods(gke, worker_sel)
        fresh = [p for p in now if p["metadata"]["uid"] not in old]
        return len(fresh) == 8 and all(p["status"]["phase"] == "Running" for p in fresh)

    wait_until(replaced, 180, "8 replacement workers Running")
    status = jobset_status(gke, name)
    assert status["restarts"] == 0
    assert not status.get("terminalState")
    job = http(gke, "GET", f"/apis/batch/v1/namespaces/default/jobs/{name}-worker-0")
    assert job["status"]["failed"] == 8
    assert job["metadata"]["labels"]["jobset.sigs.k8s.io/restart-attempt"] == "0"
    assert pods(gke, head_sel)[0]["metadata"]["uid"] == head["metadata"]["uid"]
    head_log = http(
        gke,
        "GET",
        f"/api/v1/namespaces/default/pods/{head['metadata']['name']}/log?container=pathways-rm",
    )
    assert "Pathways pathways-server" in head_log


def test_quota_stall_leaves_pods_pending_with_failed_scheduling(gke: gke_client.GkeInfo) -> None:
    gke_client.set_quota_stall(gke.run_dir, True)
    http(gke, "POST", JS, xpk_jobset("stalled", COUNTER, wrapper=False, grace=5))
    sel = "jobset.sigs.k8s.io/jobset-name%3Dstalled"
    wait_until(lambda: phases(gke, sel).count("Running") == 8, 120, "8 pods Running")
    result = gke_client.preempt_slice(gke.run_dir, 0, grace_s=0)
    assert len(result["pods"]) == 8 and len(result["nodes"]) == 8
    wait_until(lambda: jobset_status(gke, "stalled").get("restarts") == 1, 120, "restart")
    wait_until(lambda: phases(gke, sel) == ["Pending"] * 8, 120, "8 pods Pending")

    def slice_state() -> str:
        info = gke_client.status(gke.run_dir)
        assert info is not None
        return info.slices[0].state

    # The restarted pods can be Pending while the shut nodes are still listed (the slice
    # PREEMPTING); the pool is STALLED once they are gone and no node comes back.
    wait_until(lambda: slice_state() == "STALLED", 60, "the slice STALLED")
    assert phases(gke, sel) == ["Pending"] * 8

    def failed_scheduling() -> list[str]:
        events = http(
            gke, "GET", "/api/v1/namespaces/default/events?fieldSelector=reason%3DFailedScheduling"
        )["items"]
        return [e["message"] for e in events]

    # Pods recreated while the shut nodes are still listed first see "0/9 ... not-ready", as
    # a real scheduler would; once the node pool is gone, each pod's retry says 0/1.
    settled = re.compile(
        r"0/1 nodes are available: 1 node\(s\) didn't match Pod's node "
        r"affinity/selector\. preemption: 0/1 nodes are available: 1 "
        r"Preemption is not helpful for scheduling\."
    )
    early = re.compile(r"0/\d+ nodes are available: .*not-ready.*")

    def settled_events() -> list[str]:
        return [m for m in failed_scheduling() if settled.fullmatch(m)]

    wait_until(lambda: len(settled_events()) >= 8, 120, "8 FailedScheduling events, 0/1 nodes")
    for msg in failed_scheduling():
        assert settled.fullmatch(msg) or early.fullmatch(msg), msg
    pod = pods(gke, sel)[0]
    cond = next(c for c in pod["status"]["conditions"] if c["type"] == "PodScheduled")
    assert (cond["status"], cond["reason"]) == ("False", "Unschedulable")
    gke_client.set_quota_stall(gke.run_dir, False)
    wait_until(lambda: phases(gke, sel).count("Running") == 8, 120, "Running after quota")


def test_preempted_pod_status_is_what_gke_reports(gke: gke_client.GkeInfo) -> None:
    """DisruptionTarget/TerminationByKubelet, phase Failed, reason Terminated, exit 143."""
    http(gke, "POST", JS, xpk_jobset("shut", COUNTER, wrapper=False, grace=5, max_restarts=0))
    sel = "jobset.sigs.k8s.io/jobset-name%3Dshut"
    wait_until(lambda: phases(gke, sel).count("Running") == 8, 120, "8 pods Running")
    listed = http(gke, "GET", f"/api/v1/namespaces/default/pods?labelSelector={sel}")
    rv = listed["metadata"]["resourceVersion"]
    seen: dict[str, dict[str, Any]] = {}
    gke_client.preempt_slice(gke.run_dir, 0, grace_s=5)
    # Watch rather than poll: the pods are gone soon after they fail (node deleted).
    url = (
        f"{gke.server}/api/v1/namespaces/default/pods?watch=true&labelSelector={sel}"
        f"&resourceVersion={rv}&timeoutSeconds=30"
    )
    with urllib.request.urlopen(url, timeout=40) as stream:
        for line in stream:
            obj = json.loads(line)["object"]
            if obj.get("status", {}).get("phase") == "Failed":
                seen[obj["metadata"]["uid"]] = obj
            if len(seen) == 8:
                break
    assert len(seen) == 8
    for p in seen.values():
        st = p["status"]
        assert (st["reason"], st["message"]) == (
            "Terminated",
            "Pod was terminated in response to imminent node shutdown.",
        )
        dt = next(c for c in st["conditions"] if c["type"] == "DisruptionTarget")
        assert (dt["status"], dt["reason"]) == ("True", "TerminationByKubelet")
        term = st["containerStatuses"][0]["state"]["terminated"]
        assert (term["exitCode"], term["reason"]) == (143, "Error")
    wait_until(
        lambda: jobset_status(gke, "shut").get("terminalState") == "Failed", 30, "JobSet Failed"
    )
    cond = next(c for c in jobset_status(gke, "shut")["conditions"] if c["type"] == "Failed")
    assert cond["reason"] == "ReachedMaxRestarts"
    assert cond["message"].startswith("jobset failed due to reaching max number of restarts")


def test_a_real_failure_fails_the_jobset_without_restart(gke: gke_client.GkeInfo) -> None:
    """Exit 3 is not in xpk's restart codes: podFailurePolicy FailJob, then FailJobSet."""
    http(gke, "POST", JS, xpk_jobset("crash", "sleep 0.5; exit 3", wrapper=False))
    wait_until(
        lambda: jobset_status(gke, "crash").get("terminalState") == "Failed", 30, "JobSet Failed"
    )
    status = jobset_status(gke, "crash")
    assert status["restarts"] == 0
    cond = next(c for c in status["conditions"] if c["type"] == "Failed")
    assert cond["reason"] == "FailJobSetFailurePolicyAction"
    job = http(gke, "GET", "/apis/batch/v1/namespaces/default/jobs/crash-slice-job-0")
    failed = next(c for c in job["status"]["conditions"] if c["type"] == "Failed")
    assert failed["reason"] == "PodFailurePolicy"
    assert re.fullmatch(
        r"Container jax-tpu for pod default/crash-slice-job-0-\d-\w{5} failed "
        r"with exit code 3 matching FailJob rule at index 0",
        failed["message"],
    )


def test_suspend_and_resume(gke: gke_client.GkeInfo) -> None:
    http(gke, "POST", JS, xpk_jobset("nap", COUNTER, wrapper=False, grace=1))
    sel = "jobset.sigs.k8s.io/jobset-name%3Dnap"
    wait_until(lambda: phases(gke, sel).count("Running") == 8, 120, "8 pods Running")
    req = urllib.request.Request(
        f"{gke.server}{JS}/nap",
        method="PATCH",
        data=json.dumps({"spec": {"suspend": True}}).encode(),
        headers={"Content-Type": "application/merge-patch+json"},
    )
    urllib.request.urlopen(req, timeout=10).close()
    wait_until(lambda: not pods(gke, sel), 120, "pods deleted while suspended")
    cond = [c for c in jobset_status(gke, "nap")["conditions"] if c["type"] == "Suspended"]
    assert cond and cond[0]["status"] == "True" and cond[0]["reason"] == "SuspendedJobs"
    req = urllib.request.Request(
        f"{gke.server}{JS}/nap",
        method="PATCH",
        data=json.dumps({"spec": {"suspend": False}}).encode(),
        headers={"Content-Type": "application/merge-patch+json"},
    )
    urllib.request.urlopen(req, timeout=10).close()
    wait_until(lambda: phases(gke, sel).count("Running") == 8, 120, "Running after resume")
    assert jobset_status(gke, "nap")["restarts"] == 0


def test_checkpoint_conversion_runs_as_a_job(gke: gke_client.GkeInfo) -> None:
    """The MaxText -> HF conversion stand-in as a batch Job the console can track."""
    src = gke.bucket / "phantom-bucket" / "runs" / "r" / "checkpoints" / "40" / "items"
    src.mkdir(parents=True)
    (src / "state.json").write_text("{}")
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "to-hf"},
        "spec": {
            "backoffLimit": 0,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "nodeSelector": {"cloud.google.com/gke-nodepool": "cpu-np"},
                    "containers": [
                        {
                            "name": "convert",
                            "image": "gcr.io/p/maxtext:1",
                            "command": [
                                "bash",
                                "-c",
                                "convert_checkpoint.sh direction=to_huggingface layer_time=0 "
                                "src=gs://phantom-bucket/runs/r/checkpoints/40/items "
                                "base_output_directory=gs://phantom-bucket/hf/gpt-oss-20b",
                            ],
                        }
                    ],
                }
            },
        },
    }
    http(gke, "POST", "/apis/batch/v1/namespaces/default/jobs", job)

    def complete() -> bool:
        st = http(gke, "GET", "/apis/batch/v1/namespaces/default/jobs/to-hf").get("status", {})
        return any(c["type"] == "Complete" for c in st.get("conditions", []))

    wait_until(complete, 120, "conversion Job Complete")
    assert (gke.bucket / "phantom-bucket" / "hf" / "gpt-oss-20b" / "config.json").is_file()
    pod = pods(gke, "job-name%3Dto-hf")[0]["metadata"]["name"]
    log = http(gke, "GET", f"/api/v1/namespaces/default/pods/{pod}/log")
    assert "Converting layer 24/24" in log and "Conversion complete" in log
