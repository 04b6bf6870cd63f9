"""The real kubectl (1.33 and 1.27 from the google-cloud-sdk image) against the GKE
emulator: the seed's three commands, xpk's plain `kubectl apply -f`, delete, a 422 as
kubectl prints it, and `kubectl get pods -w` through a slice preemption."""

from __future__ import annotations

import json
import os
import re
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest
import yaml

from emulators.gke import client as gke_client
from tests.support.fixtures_gke import gke, gke_module, kubectl, with_changes, xpk_jobset
from tests.support.waiting import wait_until

__all__ = ["gke", "gke_module"]

VERSIONS = ["1.33", "1.27"]

# A short stand-in for the seed's command: steps with output, SIGTERM-aware via exec.
COUNTER = "exec python -c \"import time\nfor i in range(1, 400):\n    print('step', i, flush=True)\n    time.sleep(0.1)\""  # sleep-noqa: the workload's pace


def json_stream(text: str) -> list[Any]:
    """The JSON documents `kubectl get -w -o json` wrote one after another."""
    out: list[Any] = []
    decoder, at = json.JSONDecoder(), 0
    while text[at:].strip():
        at += len(text[at:]) - len(text[at:].lstrip())
        doc, at = decoder.raw_decode(text, at)
        out.append(doc)
    return out


def run(
    k: str, info: gke_client.GkeInfo, *args: str, timeout: float = 60, check: bool = True
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "KUBECONFIG": str(info.kubeconfig), "HOME": str(info.run_dir)}
    proc = subprocess.run([k, *args], capture_output=True, text=True, timeout=timeout, env=env)
    if check:
        assert proc.returncode == 0, f"kubectl {' '.join(args)}: {proc.stderr}"
    return proc


def write_manifest(tmp: Path, manifest: dict[str, Any]) -> Path:
    path = tmp / f"{manifest['metadata']['name']}.yaml"
    path.write_text(yaml.safe_dump(manifest, sort_keys=False))
    return path


def columns(line: str) -> list[str]:
    return re.split(r"\s{2,}", line.strip())


@pytest.mark.parametrize("version", VERSIONS)
def test_seed_commands_print_what_a_gke_user_sees(
    gke_module: gke_client.GkeInfo, tmp_path: Path, version: str
) -> None:
    k = kubectl(version)
    name = f"seed-{version.replace('.', '')}"
    manifest = write_manifest(tmp_path, xpk_jobset(name, COUNTER, grace=2))
    out = run(k, gke_module, "apply", "--validate=false", "-f", str(manifest)).stdout
    assert out.strip() == f"jobset.jobset.x-k8s.io/{name} created"

    # kubectl get jobset -n default ${WORKLOAD_NAME}
    js = run(k, gke_module, "get", "jobset", "-n", "default", name).stdout.splitlines()
    assert columns(js[0]) == ["NAME", "TERMINALSTATE", "RESTARTS", "COMPLETED", "SUSPENDED", "AGE"]
    assert js[1].split()[:2] == [name, "0"]  # TerminalState and Completed stay empty

    # kubectl get pods | grep ${WORKLOAD_NAME}
    def running() -> list[str]:
        lines = run(k, gke_module, "get", "pods").stdout.splitlines()
        return [ln for ln in lines if name in ln and " Running " in ln]

    wait_until(lambda: len(running()) == 8, 30, "8 pods Running")
    header = run(k, gke_module, "get", "pods").stdout.splitlines()[0]
    assert columns(header) == ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    pods = sorted(ln.split()[0] for ln in running())
    for i, pod in enumerate(pods):
        assert re.fullmatch(rf"{name}-slice-job-0-{i}-[a-z0-9]{{5}}", pod), pod
    assert all(columns(ln)[1:4] == ["1/1", "Running", "0"] for ln in running())

    # kubectl logs -f <POD_NAME>: streams until the server or the container ends it.
    follow = subprocess.Popen(
        [k, "logs", "-f", pods[0]],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "KUBECONFIG": str(gke_module.kubeconfig)},
    )
    try:
        assert follow.stdout is not None
        first = [follow.stdout.readline() for _ in range(4)]
    finally:
        follow.terminate()
        follow.wait(10)
    assert first[0].startswith("XPK Start: ")
    assert [ln.strip() for ln in first[1:]] == ["step 1", "step 2", "step 3"]

    wide = run(k, gke_module, "get", "pods", "-o", "wide").stdout.splitlines()
    assert "NODE" in columns(wide[0])
    nodes = {columns(ln)[6] for ln in wide[1:] if name in ln}
    assert len(nodes) == 8 and all("phantom-gke-np-0" in n for n in nodes)

    out = run(k, gke_module, "delete", "jobset", name).stdout
    assert out.strip() == f'jobset.jobset.x-k8s.io "{name}" deleted'
    # Graceful deletion: the pods show Terminating while xpk's wrapper passes SIGTERM on.
    left = [
        columns(ln) for ln in run(k, gke_module, "get", "pods").stdout.splitlines() if name in ln
    ]
    assert all(c[2] in ("Terminating", "Error", "Completed") for c in left), left


@pytest.mark.parametrize("version", VERSIONS)
def test_plain_apply_validates_on_the_server(
    gke_module: gke_client.GkeInfo, tmp_path: Path, version: str
) -> None:
    """xpk runs `kubectl apply -f` without --validate=false: kubectl finds fieldValidation
    in /openapi/v3 and lets the server validate (Strict)."""
    k = kubectl(version)
    name = f"plain-{version.replace('.', '')}"
    good = xpk_jobset(name, "sleep 60", wrapper=False)
    path = write_manifest(tmp_path, good)
    assert run(k, gke_module, "apply", "-f", str(path)).stdout.strip() == (
        f"jobset.jobset.x-k8s.io/{name} created"
    )
    again = run(k, gke_module, "apply", "-f", str(path)).stdout.strip()
    assert again in (
        f"jobset.jobset.x-k8s.io/{name} configured",
        f"jobset.jobset.x-k8s.io/{name} unchanged",
    )
    run(k, gke_module, "delete", "jobset", name)

    typo = with_changes(xpk_jobset(f"typo-{name}", "true"), "spec.replicatedJob", [])
    bad = run(k, gke_module, "apply", "-f", str(write_manifest(tmp_path, typo)), check=False)
    assert bad.returncode == 1
    assert 'strict decoding error: unknown field "spec.replicatedJob"' in bad.stderr

    invalid = with_changes(xpk_jobset(f"neg-{name}", "true"), "spec.failurePolicy.maxRestarts", -2)
    bad = run(k, gke_module, "apply", "-f", str(write_manifest(tmp_path, invalid)), check=False)
    assert bad.returncode == 1
    assert f'The JobSet "neg-{name}" is invalid' in bad.stderr
    assert "spec.failurePolicy.maxRestarts" in bad.stderr
    listed = json.loads(run(k, gke_module, "get", "jobsets", "-o", "json").stdout)["items"]
    assert not [j for j in listed if j["metadata"]["name"] in (f"typo-{name}", f"neg-{name}")]


def test_get_pods_watch_shows_a_preemption(gke: gke_client.GkeInfo, tmp_path: Path) -> None:
    """Pods go Error (Failed, exit 143 after SIGTERM), the JobSet restarts, new pods go
    Pending -> ContainerCreating -> Running once the slice is back."""
    k = kubectl("1.33")
    manifest = write_manifest(tmp_path, xpk_jobset("watched", COUNTER, wrapper=False, grace=5))
    run(k, gke, "apply", "--validate=false", "-f", str(manifest))
    wait_until(
        lambda: run(k, gke, "get", "pods").stdout.count(" Running ") == 8, 30, "8 pods Running"
    )
    env = {**os.environ, "KUBECONFIG": str(gke.kubeconfig)}
    watch = subprocess.Popen([k, "get", "pods", "-w"], stdout=subprocess.PIPE, text=True, env=env)
    assert watch.stdout is not None
    lines: list[str] = []  # what the watch printed so far (read as it prints)
    reader = threading.Thread(target=lambda: lines.extend(watch.stdout or ()), daemon=True)
    reader.start()

    def running(besides: frozenset[str] = frozenset()) -> set[str]:
        rows = [columns(ln) for ln in list(lines)[1:] if ln.strip()]
        return {r[0] for r in rows if r[2] == "Running" and r[0] not in besides}

    try:
        # the watch lists the 8 pods first: from then on it sees every change
        wait_until(lambda: len(running()) == 8, 30, "the watch to list the 8 pods")
        first = frozenset(running())
        gke_client.preempt_slice(gke.run_dir, 0, grace_s=5)

        def restarted() -> bool:
            st = json.loads(run(k, gke, "get", "jobset", "watched", "-o", "json").stdout)
            return int(st.get("status", {}).get("restarts", 0)) == 1

        wait_until(restarted, 60, "JobSet restarts == 1")
        wait_until(lambda: len(running(first)) == 8, 60, "the watch to show 8 new pods Running")
    finally:
        watch.terminate()
        watch.wait(timeout=10)
        reader.join(timeout=10)
    out = "".join(lines)
    rows = [columns(ln) for ln in out.splitlines()[1:] if ln.strip()]
    statuses = [(r[0], r[2]) for r in rows]
    old = {n for n, s in statuses if s == "Error"}
    assert len(old) == 8, statuses
    new = [n for n, _ in statuses if n not in old]
    assert {s for n, s in statuses if n in new} >= {"Pending", "ContainerCreating", "Running"}
    assert len(set(new)) == 8
    pod = json.loads(run(k, gke, "get", "pods", "-o", "json").stdout)["items"][0]
    assert pod["metadata"]["labels"]["jobset.sigs.k8s.io/restart-attempt"] == "1"


def test_xpk_priority_classes_and_their_values_on_the_pods(
    gke_module: gke_client.GkeInfo, tmp_path: Path
) -> None:
    """`xpk cluster create` leaves five PriorityClasses (its kueue_config.yaml.j2); a pod
    naming one (xpk's `--priority very-high`) runs with its value, an unknown one is refused
    by name. Before, `kubectl get priorityclasses` was an unknown resource and the pod's
    priority 0."""
    k = kubectl(VERSIONS[0])
    out = run(k, gke_module, "get", "priorityclasses", "-o", "json").stdout
    values = {i["metadata"]["name"]: i["value"] for i in json.loads(out)["items"]}
    assert values == {"very-low": 100, "low": 250, "medium": 500, "high": 750, "very-high": 1000}
    table = run(k, gke_module, "get", "pc").stdout.splitlines()
    assert columns(table[0])[:3] == ["NAME", "VALUE", "GLOBAL-DEFAULT"]

    js = xpk_jobset("urgent", COUNTER, grace=2)
    pod_spec = js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    pod_spec["priorityClassName"] = "very-high"
    run(k, gke_module, "apply", "--validate=false", "-f", str(write_manifest(tmp_path, js)))
    sel = "jobset.sigs.k8s.io/jobset-name=urgent"

    def priorities() -> list[int]:
        got = run(k, gke_module, "get", "pods", "-l", sel, "-o", "json").stdout
        return [p["spec"].get("priority") for p in json.loads(got)["items"]]

    wait_until(lambda: len(priorities()) == 8, 60, "the JobSet's 8 pods")
    assert set(priorities()) == {1000}
    run(k, gke_module, "delete", "jobset", "urgent", "--wait=false")

    bad = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "nobody", "namespace": "default"},
        "spec": {
            "priorityClassName": "ultra",
            "containers": [{"name": "c", "image": "busybox", "command": ["true"]}],
        },
    }
    proc = run(
        k,
        gke_module,
        "apply",
        "--validate=false",
        "-f",
        str(write_manifest(tmp_path, bad)),
        check=False,
    )
    assert proc.returncode != 0 and "no PriorityClass with name ultra was found" in proc.stderr


def test_deleting_a_running_pod_fails_its_job_and_the_jobset_restarts(
    gke_module: gke_client.GkeInfo, tmp_path: Path
) -> None:
    """`kubectl delete pod` of a running xpk pod, as GKE answers it: the kubelet SIGTERMs
    the container (xpk's wrapper passes it on: exit 143), the pod ends Failed before it
    goes (the kubelet's terminal phase since 1.27; the Job's tracking finalizer holds it
    until counted), 143 is outside xpk's FailJob rule so it counts against backoffLimit 0,
    the Job fails (BackoffLimitExceeded) and the JobSet's failurePolicy restarts it. Before,
    the pod vanished uncounted and the Job made a replacement inside the same attempt."""
    k = kubectl(VERSIONS[0])
    name = "deleted"
    # xpk's own grace (30 s): its wrapper's SIGTERM trap runs only once its `sleep 5` ends,
    # so a 5 s grace raced that sleep and, on a loaded machine, the kubelet's SIGKILL won (137)
    manifest = write_manifest(tmp_path, xpk_jobset(name, COUNTER, grace=30))
    run(k, gke_module, "apply", "--validate=false", "-f", str(manifest))
    sel = f"jobset.sigs.k8s.io/jobset-name={name}"

    def pods(phase: str = "Running") -> list[str]:
        got = run(k, gke_module, "get", "pods", "-l", sel, "-o", "json").stdout
        items = json.loads(got)["items"]
        return sorted(p["metadata"]["name"] for p in items if p["status"].get("phase") == phase)

    wait_until(lambda: len(pods()) == 8, 60, "the JobSet's 8 pods Running")
    victim = pods()[0]
    env = {**os.environ, "KUBECONFIG": str(gke_module.kubeconfig)}
    watch = subprocess.Popen(
        [k, "get", "pod", victim, "-w", "-o", "json", "--output-watch-events"],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    chunks: list[str] = []
    reader = threading.Thread(target=lambda: chunks.extend(watch.stdout or ()), daemon=True)
    reader.start()
    try:
        wait_until(lambda: bool(chunks), 30, "the watch's first event")
        out = run(k, gke_module, "delete", "pod", victim).stdout
        assert out.strip() == f'pod "{victim}" deleted'

        def restarted() -> bool:
            st = json.loads(run(k, gke_module, "get", "jobset", name, "-o", "json").stdout)
            return int(st.get("status", {}).get("restarts", 0)) == 1

        wait_until(restarted, 60, "the JobSet's restarts == 1")
    finally:
        watch.terminate()
        watch.wait(timeout=10)
        reader.join(timeout=10)
    events = json_stream("".join(chunks))
    # Failed (exit 143) while the finalizer still holds it, then released and gone.
    held = [
        e["object"]
        for e in events
        if e["type"] == "MODIFIED"
        and e["object"]["status"].get("phase") == "Failed"
        and "batch.kubernetes.io/job-tracking" in e["object"]["metadata"].get("finalizers", [])
    ]
    assert held, [e["type"] for e in events]
    (cs,) = held[0]["status"]["containerStatuses"]
    assert cs["state"]["terminated"]["exitCode"] == 143
    assert events[-1]["type"] == "DELETED"

    got = run(k, gke_module, "get", "events", "-o", "json").stdout
    reasons = {
        (e["involvedObject"]["kind"], e["involvedObject"]["name"], e["reason"])
        for e in json.loads(got)["items"]
    }
    assert ("Job", f"{name}-slice-job-0", "BackoffLimitExceeded") in reasons
    assert ("JobSet", name, "RestartJobSetFailurePolicyAction") in reasons
    wait_until(lambda: len(pods()) == 8, 60, "8 pods of the second attempt Running")
    got = run(k, gke_module, "get", "pods", "-l", sel, "-o", "json").stdout
    attempts = {
        p["metadata"]["labels"]["jobset.sigs.k8s.io/restart-attempt"]
        for p in json.loads(got)["items"]
        if p["status"].get("phase") == "Running"
    }
    assert attempts == {"1"}
    run(k, gke_module, "delete", "jobset", name, "--wait=false")


def test_a_higher_priority_workload_preempts_a_full_pool(
    gke_module: gke_client.GkeInfo, tmp_path: Path
) -> None:
    """The one slice runs a `low` JobSet; a `very-high` one (xpk's `--priority very-high`)
    fits nowhere, so the scheduler preempts: every low pod of the pool gets DisruptionTarget
    PreemptionByScheduler and a `Preempted` event and is deleted gracefully (Failed, exit
    143, its Job fails and the low JobSet restarts once into Pending pods), and the very-high
    pods take the pool. Before, the very-high pods stayed Pending behind priority-250 pods."""
    k = kubectl(VERSIONS[0])

    def jobset(name: str, priority: str) -> Path:
        js = xpk_jobset(name, COUNTER.replace("400", "4000"), grace=10)
        pod_spec = js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
        pod_spec["priorityClassName"] = priority
        return write_manifest(tmp_path, js)

    def phases(name: str) -> list[str]:
        sel = f"jobset.sigs.k8s.io/jobset-name={name}"
        got = run(k, gke_module, "get", "pods", "-l", sel, "-o", "json").stdout
        return [p["status"].get("phase", "") for p in json.loads(got)["items"]]

    run(k, gke_module, "apply", "--validate=false", "-f", str(jobset("lowly", "low")))
    wait_until(lambda: phases("lowly").count("Running") == 8, 60, "the low JobSet's 8 pods")
    env = {**os.environ, "KUBECONFIG": str(gke_module.kubeconfig)}
    watch = subprocess.Popen(
        [k, "get", "pods", "-l", "jobset.sigs.k8s.io/jobset-name=lowly", "-w", "-o", "json"],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    chunks: list[str] = []
    reader = threading.Thread(target=lambda: chunks.extend(watch.stdout or ()), daemon=True)
    reader.start()
    try:
        wait_until(lambda: bool(chunks), 30, "the watch's first pods")
        run(k, gke_module, "apply", "--validate=false", "-f", str(jobset("boss", "very-high")))
        wait_until(lambda: phases("boss").count("Running") == 8, 90, "the very-high pods Running")
    finally:
        watch.terminate()
        watch.wait(timeout=10)
        reader.join(timeout=10)
    seen = json_stream("".join(chunks))
    preempted: dict[str, dict[str, Any]] = {}
    for pod in seen:
        for c in pod["status"].get("conditions") or []:
            if c["type"] == "DisruptionTarget":
                preempted[pod["metadata"]["name"]] = c
    assert len(preempted) == 8, sorted(preempted)
    assert {(c["reason"], c["message"]) for c in preempted.values()} == {
        (
            "PreemptionByScheduler",
            "default-scheduler: preempting to accommodate a higher priority pod",
        )
    }
    ended = {
        p["metadata"]["name"]: p["status"]["containerStatuses"][0]["state"]["terminated"]
        for p in seen
        if p["status"].get("phase") == "Failed" and p["metadata"]["name"] in preempted
    }
    assert set(ended) == set(preempted) and {t["exitCode"] for t in ended.values()} == {143}

    got = json.loads(run(k, gke_module, "get", "events", "-o", "json").stdout)["items"]
    messages = [
        e["message"]
        for e in got
        if e["reason"] == "Preempted" and e["involvedObject"]["name"] in preempted
    ]
    assert len(messages) == 8
    assert all(
        re.fullmatch(r"Preempted by default/boss-slice-job-0-\d+-\w+ on node gke-\S+", m)
        for m in messages
    ), messages
    wait_until(lambda: phases("lowly") == ["Pending"] * 8, 60, "the low JobSet's new pods Pending")
    # One restart, as on GKE: the very-high pods hold the nodes they were nominated to while
    # the low pods terminate, so the low JobSet's restarted pods never bind first (and get
    # preempted again: a second restart, seen under coverage before the emulator held them).
    low = json.loads(run(k, gke_module, "get", "jobset", "lowly", "-o", "json").stdout)
    assert low["status"].get("restarts", 0) == 1
    got = run(
        k, gke_module, "get", "pods", "-l", "jobset.sigs.k8s.io/jobset-name=boss", "-o", "json"
    )
    assert {p["spec"]["priority"] for p in json.loads(got.stdout)["items"]} == {1000}
    run(k, gke_module, "delete", "jobset", "boss", "lowly", "--wait=false")
