"""GKE emulator parts without the daemon: kubectl's printer rules, the store's watch
history and selectors, image references, pod failure policy matching, and the emulated
GRPO workload's SIGTERM checkpoint and resume (issue 15) as a real process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from emulators.gke import layout as L
from emulators.gke.events import Recorder
from emulators.gke.jobs import (
    JobController,
    apply_job_defaults,
    label_job,
    match_pod_failure_policy,
)
from emulators.gke.kueue import xpk_cluster_objects
from emulators.gke.nodes import make_node
from emulators.gke.store import Gone, Selector, Store, parse_label_selector
from emulators.gke.tables import human_duration, pod_cells
from emulators.gke.validate import image_reference_error
from emulators.gke.workload.grpo import TUNIX_TAGS


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (5, "5s"),
        (119, "119s"),
        (120, "2m"),
        (150, "2m30s"),
        (600, "10m"),
        (179 * 60, "179m"),
        (3 * 3600, "3h"),
        (3 * 3600 + 60, "3h1m"),
        (9 * 3600, "9h"),
        (50 * 3600, "2d2h"),
        (-5, "<invalid>"),
    ],
)
def test_human_duration_is_apimachinerys(seconds: int, text: str) -> None:
    assert human_duration(seconds) == text


def pod(phase: str, containers: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    spec = {"containers": [{"name": c["name"]} for c in containers], **extra.pop("spec", {})}
    meta = {"name": "p", "creationTimestamp": "2026-01-01T00:00:00Z", **extra.pop("meta", {})}
    status = {"phase": phase, "containerStatuses": containers, **extra}
    return {"metadata": meta, "spec": spec, "status": status}


RUNNING = {"name": "main", "ready": True, "restartCount": 0, "state": {"running": {}}}
KILLED = {
    "name": "main",
    "ready": False,
    "restartCount": 0,
    "state": {"terminated": {"exitCode": 143, "reason": "Error"}},
}


def test_pod_status_column_follows_kubectls_printer() -> None:
    assert pod_cells(pod("Running", [RUNNING]))[1:3] == ["1/1", "Running"]
    shut = pod("Failed", [KILLED], reason="Terminated")
    assert pod_cells(shut)[1:3] == ["0/1", "Error"]  # container reason wins over pod reason
    deleting = pod("Running", [RUNNING], meta={"deletionTimestamp": "2026-01-01T00:00:01Z"})
    assert pod_cells(deleting)[2] == "Terminating"
    assert pod_cells(pod("Pending", []))[1:3] == ["0/0", "Pending"]
    waiting = dict(RUNNING, ready=False, state={"waiting": {"reason": "ContainerCreating"}})
    assert pod_cells(pod("Pending", [waiting]))[2] == "ContainerCreating"
    done = dict(KILLED, state={"terminated": {"exitCode": 0, "reason": "Completed"}})
    assert pod_cells(pod("Succeeded", [done]))[2] == "Completed"
    restarted = dict(
        RUNNING, restartCount=2, lastState={"terminated": {"finishedAt": "2026-01-01T00:00:00Z"}}
    )
    assert pod_cells(pod("Running", [restarted]))[3].startswith("2 (")
    # Pathways head: two sidecars (restartable init containers) count in READY.
    sidecars = [
        {"name": n, "started": True, "ready": True, "restartCount": 0, "state": {"running": {}}}
        for n in ("proxy", "rm")
    ]
    head = pod(
        "Running",
        [RUNNING],
        initContainerStatuses=sidecars,
        conditions=[{"type": "Initialized", "status": "True"}],
        spec={
            "initContainers": [
                {"name": "proxy", "restartPolicy": "Always"},
                {"name": "rm", "restartPolicy": "Always"},
            ]
        },
    )
    assert pod_cells(head)[1:3] == ["3/3", "Running"]
    init = pod(
        "Pending",
        [waiting],
        initContainerStatuses=[
            {
                "name": "setup",
                "restartCount": 0,
                "state": {"waiting": {"reason": "PodInitializing"}},
            }
        ],
        spec={"initContainers": [{"name": "setup"}]},
    )
    assert pod_cells(init)[2] == "Init:0/1"


def obj(name: str, labels: dict[str, str]) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "default", "labels": labels}}


async def test_watch_history_resume_gone_and_selector_transitions() -> None:
    store = Store(history=3)
    store.create("pods", obj("a", {"app": "x"}))
    start = store.rv
    for i in range(2):
        store.create("pods", obj(f"b{i}", {"app": "y"}))
    w = store.watch("pods", Selector.parse("pods", "default", "app=x", ""), start - 1)
    assert [(t, o["metadata"]["name"]) for t, o in [w.queue.get_nowait()]] == [("ADDED", "a")]
    stored = store.get("pods", "default", "a")
    assert stored is not None
    store.mutate("pods", stored, lambda o: o["metadata"]["labels"].update(app="z"))
    t, o = w.queue.get_nowait()
    assert (t, o["metadata"]["name"]) == ("DELETED", "a")  # left the selection
    for i in range(5):
        store.create("pods", obj(f"c{i}", {}))
    with pytest.raises(Gone):
        store.watch("pods", Selector(), start)
    store.compact()
    with pytest.raises(Gone):
        store.watch("pods", Selector(), store.rv - 1)


def test_label_selector_forms() -> None:
    match = parse_label_selector("tier in (a, b),!gone,env!=prod,app")
    assert match({"tier": "a", "env": "dev", "app": "1"})
    assert not match({"tier": "c", "app": "1"})
    assert not match({"tier": "a", "gone": "", "app": "1"})
    assert not match({"tier": "b", "env": "prod", "app": "1"})
    assert not match({"tier": "b"})


@pytest.mark.parametrize(
    "ref",
    [
        "gcr.io/phantom-local/maxtext-rl:latest",
        "python:3.11-slim",
        "ubuntu",
        "us-docker.pkg.dev/cloud-tpu-v2-images/pathways/server:latest",
        "localhost:5000/a/b_c.d-e:v1.2",
        "gcr.io/p/i@sha256:" + "a" * 64,
    ],
)
def test_well_formed_image_references(ref: str) -> None:
    assert image_reference_error(ref) is None


@pytest.mark.parametrize("ref", ["gcr.io/Proj/img", "img:tag!", "a b", "gcr.io/p/", ":tag"])
def test_malformed_image_references_get_the_kubelet_message(ref: str) -> None:
    err = image_reference_error(ref)
    assert err is not None and "invalid reference format" in err and ref in err


XPK_JOB = {
    "spec": {
        "podFailurePolicy": {
            "rules": [
                {
                    "action": "FailJob",
                    "onPodConditions": [],
                    "onExitCodes": {
                        "containerName": "jax-tpu",
                        "operator": "NotIn",
                        "values": [42, *range(127, 256)],
                    },
                }
            ]
        }
    }
}


@pytest.mark.parametrize(("code", "fails_job"), [(1, True), (143, False), (42, False), (0, False)])
def test_xpk_pod_failure_policy_on_exit_codes(code: int, fails_job: bool) -> None:
    p = {
        "status": {
            "containerStatuses": [{"name": "jax-tpu", "state": {"terminated": {"exitCode": code}}}]
        }
    }
    hit = match_pod_failure_policy(XPK_JOB, p)
    assert (hit is not None and hit[1]["action"] == "FailJob") == fails_job


def test_a_pod_that_fails_as_its_node_goes_is_counted_once() -> None:
    """A preempted node's pods fail, then the pod GC removes them with the node. The Job
    counts every one of them (in a cluster its job-tracking finalizer holds each pod until
    the Job has counted it), even when the controller had not synced in between: the
    Pathways e2e test lost 1 of 8 that way."""
    store = Store(history=100)
    jobs = JobController(store, Recorder(store), backoff_base=10.0)
    job: dict[str, Any] = {
        "metadata": {"name": "w", "namespace": "default"},
        "spec": {"parallelism": 2, "completions": 2, "template": {"spec": {"containers": []}}},
    }
    apply_job_defaults(job)
    store.create("jobs", job)
    label_job(job)
    jobs.sync()
    pods = store.list("pods")
    assert len(pods) == 2
    for pod, node in zip(pods, ("n1", "n2"), strict=True):

        def run_on(p: dict[str, Any], node: str = node) -> None:
            p["spec"]["nodeName"] = node
            p.setdefault("status", {})["phase"] = "Running"

        store.mutate("pods", pod, run_on)
    jobs.sync()
    (on_n1,) = [p for p in store.list("pods") if p["spec"]["nodeName"] == "n1"]

    def failed(p: dict[str, Any]) -> None:
        p["status"]["phase"] = "Failed"

    store.mutate("pods", on_n1, failed)  # the kubelet's last word, then the node is gone
    gone = jobs.collect_pods_on({"n1"})
    assert [p["metadata"]["uid"] for p in gone] == [on_n1["metadata"]["uid"]]
    jobs.sync()
    jobs.sync()
    (stored,) = store.list("jobs")
    assert stored["status"]["failed"] == 1  # counted, and only once


def grpo(tmp: Path, *args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "HF_TOKEN": "hf_secretValue42", "PHANTOM_GCS_ROOT": str(tmp / "gcs")}
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "emulators.gke.workload.grpo",
            "base_output_directory=gs://bucket/runs",
            "run_name=r1",
            *args,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )


def test_grpo_sigterm_saves_the_reached_step_and_resumes_there(tmp_path: Path) -> None:
    proc = grpo(tmp_path, "steps=400", "step_time=0.02", "checkpoint_period=1000")
    assert proc.stdout is not None
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if line.startswith("completed step: 15,"):
            proc.send_signal(signal.SIGTERM)
            proc.send_signal(signal.SIGTERM)  # a second notice changes nothing
            break
    rest, _ = proc.communicate(timeout=30)
    out = "".join(lines) + rest
    assert proc.returncode == 143
    ckpts = tmp_path / "gcs" / "bucket" / "runs" / "r1" / "checkpoints"
    saved = [int(p.name) for p in ckpts.iterdir()]
    assert len(saved) == 1 and 15 <= saved[0] <= 16, saved
    assert f"saved a checkpoint at step {saved[0]}" in out
    assert "hf_secretValue42" not in out and "<set from $HF_TOKEN>" in out
    again = grpo(tmp_path, f"steps={saved[0] + 5}", "step_time=0.01", "checkpoint_period=1000")
    out2, _ = again.communicate(timeout=30)
    assert again.returncode == 0, out2
    assert f"Restoring checkpoint from {ckpts / str(saved[0])}" in out2
    assert f"completed step: {saved[0] + 1}," in out2
    assert f"completed step: {saved[0]}," not in out2
    files = sorted((ckpts.parent / "tensorboard").glob("events.out.tfevents.*"))
    assert len(files) == 2
    ea = EventAccumulator(str(files[1]))
    ea.Reload()
    assert set(ea.Tags()["scalars"]) == set(TUNIX_TAGS)
    assert [e.step for e in ea.Scalars("perf/train/global_step_time")] == list(
        range(saved[0] + 1, saved[0] + 6)
    )


def test_conversion_job_stand_in(tmp_path: Path) -> None:
    env = {**os.environ, "PHANTOM_GCS_ROOT": str(tmp_path)}
    env.pop("HF_TOKEN", None)
    cmd = [sys.executable, "-m", "emulators.gke.workload.convert", "layer_time=0"]
    r = subprocess.run(
        [*cmd, "direction=to_maxtext", "base_output_directory=gs://b/ckpt"],
        capture_output=True,
        text=True,
        env=env,
        timeout=30,
    )
    assert r.returncode == 1 and "$HF_TOKEN is not set" in r.stdout
    r = subprocess.run(
        [*cmd, "direction=to_maxtext", "base_output_directory=gs://b/ckpt"],
        capture_output=True,
        text=True,
        env={**env, "HF_TOKEN": "x"},
        timeout=30,
    )
    assert r.returncode == 0, r.stdout
    assert (tmp_path / "b" / "ckpt" / "0" / "items" / "state.json").is_file()
    r = subprocess.run(
        [
            *cmd,
            "direction=to_huggingface",
            "src=gs://b/ckpt/0/items",
            "base_output_directory=gs://b/hf",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=30,
    )
    assert r.returncode == 0, r.stdout
    assert (tmp_path / "b" / "hf" / "config.json").is_file()
    r = subprocess.run(
        [
            *cmd,
            "direction=to_huggingface",
            "src=gs://b/missing",
            "base_output_directory=gs://b/hf2",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=30,
    )
    assert r.returncode == 1 and "does not exist" in r.stdout


@pytest.mark.parametrize(
    ("tpu_type", "accelerator", "topology", "machine", "nodes"),
    [
        ("v4-32", "tpu-v4-podslice", "2x2x4", "ct4p-hightpu-4t", 4),
        ("v5p-64", "tpu-v5p-slice", "2x4x4", "ct5p-hightpu-4t", 8),
        ("v5litepod-16", "tpu-v5-lite-podslice", "4x4", "ct5lp-hightpu-4t", 4),
        ("v6e-16", "tpu-v6e-slice", "4x4", "ct6e-standard-4t", 4),
        ("v6e-4", "tpu-v6e-slice", "2x2", "ct6e-standard-4t", 1),
    ],
)
def test_node_pools_of_each_tpu_type_as_gke_labels_them(
    tpu_type: str, accelerator: str, topology: str, machine: str, nodes: int
) -> None:
    """GKE's labels and hosts per slice for v4, v5p, v5e and v6e (xpk's
    system_characteristics: 4 chips a VM), and what `xpk cluster create` leaves for the type:
    the resources ConfigMap keyed by the type, the Kueue flavor 1x<type>."""
    shape = L.slice_shape(tpu_type)
    assert (shape.accelerator, shape.topology, shape.machine_type, shape.nodes) == (
        accelerator,
        topology,
        machine,
        nodes,
    )
    node = make_node("lab-np-0", 0, "127.0.2.11", True, shape, "lab")
    labels = node["metadata"]["labels"]
    assert labels["cloud.google.com/gke-tpu-accelerator"] == accelerator
    assert labels["cloud.google.com/gke-tpu-topology"] == topology
    assert labels["node.kubernetes.io/instance-type"] == machine
    assert node["status"]["allocatable"]["google.com/tpu"] == "4"
    assert node["metadata"]["name"].startswith("gke-lab-lab-np-0-")
    objs = dict((o["metadata"]["name"], o) for _, o in xpk_cluster_objects(2, shape, "lab"))
    assert objs["lab-resources-configmap"]["data"] == {tpu_type: str(2 * nodes)}
    assert objs[f"1x{tpu_type}"]["spec"]["nodeLabels"] == {
        "cloud.google.com/gke-tpu-accelerator": accelerator,
        "cloud.google.com/gke-tpu-topology": topology,
    }


@pytest.mark.parametrize("bad", ["v6e-1", "v2-8", "v9z-8", "v5p-65", ""])
def test_a_tpu_type_gke_has_no_pool_for_is_refused_by_name(bad: str) -> None:
    with pytest.raises(ValueError, match="not a TPU type of a GKE TPU node pool"):
        L.slice_shape(bad)


@pytest.mark.parametrize(
    ("name", "ok"),
    [("research-v4", True), ("a", True), ("Research", False), ("4cluster", False),
     ("ends-", False), ("x" * 41, False), ("under_score", False)],
)  # fmt: skip
def test_cluster_names_as_gke_accepts_them(name: str, ok: bool) -> None:
    assert (L.cluster_name_problem(name) == "") is ok
