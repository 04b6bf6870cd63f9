"""Seed 004's own tools against the GKE emulator: the real gcloud on its GKE API (clusters,
node pools, get-credentials over TLS with the cluster's CA), its Kueue Workloads (what
`xpk workload list` reads), and the real xpk 1.16 running the console's previewed
`xpk workload create` and `create-pathways` lines, listing with --filter-by-status and
deleting, while the console sees each workload as one of its kind: template, logs, Tunix
metrics, and a slice preemption journaled with the JobSet's restart."""

from __future__ import annotations

import asyncio
import json
import re
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from console.services.model import JobStatus, RunMetrics
from console.services.record.incidents import incident_of
from console.wiring.settings import workload_defaults
from emulators.gke import client as gke_client
from tests.support.fixtures_gke import gke, gke_module, start_cluster, stop_cluster, xpk_jobset
from tests.support.gke_services import events, gke_backend, gke_config, gke_services
from tests.support.waiting import until, wait_until
from tests.support.xpk import gcloud_env, gcloud_or_skip, run, xpk_args, xpk_or_skip

__all__ = ["gke", "gke_module"]

KUEUE = "apis/kueue.x-k8s.io/v1beta1/namespaces/default/workloads"
JOBSETS = "apis/jobset.x-k8s.io/v1alpha2/namespaces/default/jobsets"
# Outside gcr.io / docker.pkg.dev: xpk validates those with `gcloud container images
# describe`, which asks the registry itself (README, "xpk").
IMAGE = "phantom-local/maxtext-rl:latest"


def get(info: gke_client.GkeInfo, path: str) -> Any:
    with urllib.request.urlopen(f"{info.server}/{path}", timeout=10) as resp:
        return json.loads(resp.read())


def delete(info: gke_client.GkeInfo, path: str) -> None:
    req = urllib.request.Request(f"{info.server}/{path}", method="DELETE")
    with urllib.request.urlopen(req, timeout=10):
        pass


def post(info: gke_client.GkeInfo, path: str, body: Any) -> None:
    req = urllib.request.Request(
        f"{info.server}/{path}",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(req, timeout=10):
        pass


def workloads_of(info: gke_client.GkeInfo, jobset: str) -> list[Any]:
    items = get(info, KUEUE)["items"]
    return [w for w in items if w["metadata"]["ownerReferences"][0]["name"] == jobset]


def test_gcloud_lists_the_cluster_and_gets_credentials_over_tls(
    gke_module: gke_client.GkeInfo, tmp_path: Path
) -> None:
    gcloud = gcloud_or_skip()
    env = gcloud_env(gke_module, tmp_path / "home")
    # xpk's first question: where is the cluster?
    found = run(
        [
            gcloud,
            "container",
            "clusters",
            "list",
            f"--project={gke_module.project}",
            f"--filter=name={gke_module.cluster}",
            "--format=value(location)",
        ],
        env,
        timeout=60,
    )
    assert found.returncode == 0, found.stderr
    assert found.stdout.strip() == gke_module.location
    pools = run(
        [gcloud, "container", "node-pools", "list", f"--cluster={gke_module.cluster}",
         f"--location={gke_module.location}", "--format=json"],
        env,
        timeout=60,
    )  # fmt: skip
    assert pools.returncode == 0, pools.stderr
    by_name = {p["name"]: p for p in json.loads(pools.stdout)}
    assert set(by_name) == {"cpu-np", *gke_module.slice_names}
    # `gcloud beta container node-pools list` (xpk's check before a Pathways workload)
    beta = get(
        gke_module,
        f"v1beta1/projects/{gke_module.project}/locations/{gke_module.location}/clusters/"
        f"{gke_module.cluster}/nodePools",
    )
    assert {p["name"] for p in beta["nodePools"]} == set(by_name)
    assert by_name["phantom-gke-np-0"]["placementPolicy"]["tpuTopology"] == "2x4x4"
    creds = run(
        [gcloud, "container", "clusters", "get-credentials", gke_module.cluster,
         f"--location={gke_module.location}"],
        env,
        timeout=60,
    )  # fmt: skip
    assert creds.returncode == 0, creds.stderr
    kubeconfig = yaml.safe_load(Path(env["KUBECONFIG"]).read_text())
    (cluster,) = kubeconfig["clusters"]
    assert re.fullmatch(r"https://127\.0\.0\.1:\d+", cluster["cluster"]["server"])
    assert cluster["cluster"]["certificate-authority-data"]
    nodes = run(["kubectl", "get", "nodes", "-o", "name"], env, timeout=60)
    assert nodes.returncode == 0, nodes.stderr
    assert len(nodes.stdout.split()) == 1 + 8 * len(gke_module.slice_names)


async def test_kueue_keeps_one_admitted_workload_per_queued_jobset(
    gke_module: gke_client.GkeInfo,
) -> None:
    post(gke_module, JOBSETS, xpk_jobset("queued", "echo done", max_restarts=0))
    post(
        gke_module,
        JOBSETS,
        {**xpk_jobset("unqueued", "echo done"), "metadata": {"name": "unqueued"}},
    )

    def finished() -> bool:
        wls = workloads_of(gke_module, "queued")
        conds = {c["type"]: c for c in (wls[0]["status"]["conditions"] if wls else [])}
        return "Finished" in conds

    await until(finished, 30, "the queued JobSet's Workload marked Finished")
    (wl,) = workloads_of(gke_module, "queued")
    assert wl["metadata"]["name"].startswith("jobset-queued-")
    assert wl["spec"]["queueName"] == "multislice-queue"
    assert [(p["name"], p["count"]) for p in wl["spec"]["podSets"]] == [("slice-job", 8)]
    assignments = wl["status"]["admission"]["podSetAssignments"]
    assert [(a["name"], a["count"]) for a in assignments] == [("slice-job", 8)]
    conds = {c["type"]: c for c in wl["status"]["conditions"]}
    assert conds["Admitted"]["status"] == conds["QuotaReserved"]["status"] == "True"
    assert conds["Finished"]["message"] == "jobset completed successfully"
    assert workloads_of(gke_module, "unqueued") == []  # no queue label: Kueue leaves it alone
    delete(gke_module, f"{JOBSETS}/queued")
    delete(gke_module, f"{JOBSETS}/unqueued")
    await until(lambda: not workloads_of(gke_module, "queued"), 20, "the Workload collected")


def container(js: dict[str, Any]) -> dict[str, Any]:
    pod = js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    return dict(pod["containers"][0])


def essentials(js: dict[str, Any]) -> dict[str, Any]:
    """What decides where and how the workload runs and restarts."""
    spec = js["spec"]
    rjob = spec["replicatedJobs"][0]
    job = rjob["template"]["spec"]
    pod = job["template"]["spec"]
    main = container(js)
    labels = js["metadata"]["labels"]
    return {
        "labels": {k: labels[k] for k in ("kueue.x-k8s.io/queue-name", "xpk.google.com/workload")},
        "exclusive": js["metadata"]["annotations"]["alpha.jobset.sigs.k8s.io/exclusive-topology"],
        "maxRestarts": spec["failurePolicy"]["maxRestarts"],
        "failure rules": [
            (r["action"], r["onJobFailureReasons"]) for r in spec["failurePolicy"]["rules"]
        ],
        "replicatedJob": (rjob["name"], rjob["replicas"]),
        "pods": (job["parallelism"], job["completions"], job["backoffLimit"]),
        "podFailurePolicy": job["podFailurePolicy"],
        "tpu selector": {k: v for k, v in pod["nodeSelector"].items() if "gke-tpu" in k},
        "tolerations": pod["tolerations"],
        "pod": {
            k: pod[k]
            for k in (
                "restartPolicy",
                "hostNetwork",
                "dnsPolicy",
                "priorityClassName",
                "terminationGracePeriodSeconds",
            )
        },
        "container": (
            main["name"],
            main["image"],
            int(main["resources"]["limits"]["google.com/tpu"]),
        ),
        "env": {e["name"]: e["value"] for e in main["env"]},
        # xpk's wrapper has blank lines the console's copy leaves out
        "command": [ln for ln in "\n".join(main["command"]).splitlines() if ln.strip()],
        "ttl": spec["ttlSecondsAfterFinished"],
    }


def pathways_essentials(js: dict[str, Any]) -> dict[str, Any]:
    """What decides where a Pathways workload's head and workers run and what the head runs."""
    rjobs = {rj["name"]: rj for rj in js["spec"]["replicatedJobs"]}
    labels = js["metadata"]["labels"]
    out: dict[str, Any] = {
        "labels": {k: labels[k] for k in ("kueue.x-k8s.io/queue-name", "xpk.google.com/workload")},
        "coordinator": js["spec"]["coordinator"],
        "success": js["spec"].get("successPolicy"),
        "startup": js["spec"].get("startupPolicy"),
    }
    for name, rj in rjobs.items():
        job = rj["template"]["spec"]
        pod = job["template"]["spec"]
        out[name] = {
            "replicas": rj["replicas"],
            "pods": (job["parallelism"], job["completions"], job["backoffLimit"]),
            "selector": pod["nodeSelector"],
            "sidecars": [(c["name"], c["image"]) for c in pod.get("initContainers") or []],
            "containers": [(c["name"], c["image"]) for c in pod["containers"]],
        }
    head = rjobs["pathways-head"]["template"]["spec"]["template"]["spec"]["containers"][0]
    out["head env"] = {e["name"]: e.get("value") for e in head["env"]}
    out["head command"] = [ln for ln in "\n".join(head["command"]).splitlines() if ln.strip()]
    return out


@pytest.mark.slow
async def test_xpk_runs_the_consoles_line_lists_and_deletes_and_the_console_sees_it(
    gke: gke_client.GkeInfo, tmp_path: Path
) -> None:
    xpk_or_skip()
    gcloud_or_skip()
    env = gcloud_env(gke, tmp_path / "home")
    config = gke_config(gke.run_dir)
    spec = workload_defaults(config).but(
        "xpk-line",
        image=IMAGE,
        hf_token_env="",  # a Secret would be a secretKeyRef; xpk's --env carries the value
        env={"STEPS": "2000", "STEP_TIME": "0.25", "CHECKPOINT_PERIOD": "50"},
    )
    async with gke_backend(gke, config) as (backend, _):
        preview = backend.preview(spec)
    assert preview.command_line.startswith("xpk workload create")
    # The previewed line as a user pastes it; --project-number only because xpk would look
    # the number up with Resource Manager over gRPC, which needs a real Google token.
    line = f"{preview.command_line} \\\n  --project-number {xpk_args(gke)[-1]}"
    created = await asyncio.to_thread(run, ["bash", "-c", line], env)
    assert created.returncode == 0, created.stdout[-3000:] + created.stderr[-3000:]
    assert "jobset.jobset.x-k8s.io/xpk-line created" in created.stdout

    made = get(gke, f"{JOBSETS}/xpk-line")
    mine, theirs = essentials(preview.manifest), essentials(made)
    # The one difference: the console also selects spot nodes; xpk adds that selector only
    # with node auto-provisioning (capacity.py), on fixed spot pools it selects the TPU alone.
    assert (
        preview.manifest["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"][
            "nodeSelector"
        ].get("cloud.google.com/gke-spot")
        == "true"
    )
    assert theirs == mine

    async with gke_services(config, tmp_path / "state") as (svc, seen):

        def seen_running() -> bool:
            return any(
                w.name == "xpk-line" and w.status == JobStatus.RUNNING and w.pods_running == 8
                for w in svc.snapshot().workloads
            )

        await until(seen_running, 60, "the console lists the xpk-made workload, 8 pods running")
        (wl,) = [w for w in svc.snapshot().workloads if w.name == "xpk-line"]
        assert wl.template == "standard" and wl.kind == "JobSet" and not wl.owned
        assert wl.run_name == "xpk-line"
        assert "xpk-line-slice-job-0-0-" in wl.logs_url

        # Its Tunix metrics, read where its env says the run writes (the console has no
        # record of it), then a spot reclaim of its slice journaled as the console's own.
        def last_step() -> int:
            m = [u for u in seen if isinstance(u, RunMetrics) and u.run_id == "xpk-line"]
            return (m[-1].last_step or 0) if m else 0

        await until(lambda: last_step() >= 3, 60, "the xpk-made workload's Tunix metrics")
        cad = next(c for c in svc.cadence() if c.run_id == "xpk-line")
        assert cad.source == "tensorboard" and cad.state == "running"
        await asyncio.to_thread(gke_client.preempt_slice, gke.run_dir, "phantom-gke-np-0", 0)
        await until(lambda: events(seen, "jobset_restarted"), 60, "the JobSet restart journaled")
        (preempted,) = events(seen, "preempted")
        (restart,) = events(seen, "jobset_restarted")
        assert preempted.host == "phantom-gke-np-0" and restart.host == "xpk-line"
        assert restart.data["restarts"] == 1
        assert incident_of(preempted) and incident_of(restart) == incident_of(preempted)
        await until(seen_running, 60, "the restarted attempt running")

        # Pathways as xpk 1.16 makes it: a plain JobSet (no PathwaysJob controller), made
        # while the standard workload holds the only slice: its head runs on cpu-np, its
        # workers wait. Its own HOME: two xpk runs must not share one kubeconfig.
        pw_spec = workload_defaults(config).but(
            "xpk-pw", template="pathways", image=IMAGE, hf_token_env="",
            env={"STEPS": "2000", "STEP_TIME": "0.25"},
        )  # fmt: skip
        async with gke_backend(gke, config) as (backend, _):
            pw_preview = backend.preview(pw_spec)
        assert pw_preview.command_line.startswith("xpk workload create-pathways")
        pw_line = f"{pw_preview.command_line} \\\n  --project-number {xpk_args(gke)[-1]}"
        listed, pw_created = await asyncio.gather(
            asyncio.to_thread(
                run,
                ["xpk", "workload", "list", *xpk_args(gke), "--filter-by-status=RUNNING"],
                env,
            ),
            asyncio.to_thread(run, ["bash", "-c", pw_line], gcloud_env(gke, tmp_path / "pw")),
        )
        assert listed.returncode == 0, listed.stdout[-3000:]
        rows = [ln for ln in listed.stdout.splitlines() if ln.startswith("xpk-line ")]
        assert len(rows) == 1, listed.stdout[-3000:]
        assert re.search(r"\b8\s+8\s+<none>\s+Admitted\b", rows[0]), rows[0]
        assert pw_created.returncode == 0, pw_created.stdout[-3000:] + pw_created.stderr[-3000:]
        assert "jobset.jobset.x-k8s.io/xpk-pw created" in pw_created.stdout
        pw_made = get(gke, f"{JOBSETS}/xpk-pw")

        def pathways_seen() -> bool:
            return any(
                w.name == "xpk-pw" and w.template == "pathways" and w.pods_running >= 1
                for w in svc.snapshot().workloads
            )

        await until(pathways_seen, 60, "the console lists the Pathways workload, head running")
        (pw,) = [w for w in svc.snapshot().workloads if w.name == "xpk-pw"]
        assert pw.kind == "JobSet" and "xpk-pw-pathways-head-0-0-" in pw.logs_url

        # One delete for both (it checks pathways-job-system first, which is empty).
        deleted = await asyncio.to_thread(
            run,
            ["xpk", "workload", "delete", *xpk_args(gke), "--filter-by-job", "xpk-", "--force"],
            env,
        )
        assert deleted.returncode == 0, deleted.stdout[-3000:]
        await until(
            lambda: all(w.name not in ("xpk-line", "xpk-pw") for w in svc.snapshot().workloads),
            30,
            "the console no longer lists the deleted workloads",
        )
    assert get(gke, JOBSETS)["items"] == []
    assert workloads_of(gke, "xpk-line") == [] and workloads_of(gke, "xpk-pw") == []
    # As for the standard workload, the console alone selects spot nodes for the workers.
    mine, theirs = pathways_essentials(pw_preview.manifest), pathways_essentials(pw_made)
    assert mine["worker"]["selector"].pop("cloud.google.com/gke-spot") == "true"
    assert theirs == mine


@pytest.mark.slow
def test_xpk_runs_a_v4_workload_on_a_cluster_of_the_users_name(tmp_path: Path) -> None:
    """`phantom gke up --tpu-type v4-32 --cluster research-v4 --slices 2`, judged by the real
    gcloud and xpk 1.16 with flags of their own (not the console's line): node pools named
    after the cluster, with GKE's v4 machine type and topology; `xpk workload create
    --tpu-type v4-32` runs 4 pods (one per v4-32 host) on one pool, `xpk workload list`
    shows it, and a type the cluster does not have is refused by xpk. Before, the emulator
    had only v5p-64 pools in a cluster named phantom-gke."""
    xpk_or_skip()
    gcloud = gcloud_or_skip()
    run_dir = tmp_path / "gke"
    info = start_cluster(run_dir, slices=2, tpu_type="v4-32", cluster="research-v4")
    try:
        assert (info.cluster, info.context) == (
            "research-v4",
            "gke_phantom-local_us-east5_research-v4",
        )
        env = gcloud_env(info, tmp_path / "home")
        pools = run(
            [gcloud, "container", "node-pools", "list", "--cluster=research-v4",
             f"--location={info.location}", "--format=json"],
            env,
            timeout=60,
        )  # fmt: skip
        assert pools.returncode == 0, pools.stderr
        by_name = {p["name"]: p for p in json.loads(pools.stdout)}
        assert set(by_name) == {"cpu-np", "research-v4-np-0", "research-v4-np-1"}
        v4 = by_name["research-v4-np-0"]
        assert v4["config"]["machineType"] == "ct4p-hightpu-4t"
        assert v4["placementPolicy"]["tpuTopology"] == "2x2x4"
        assert v4["initialNodeCount"] == 4

        create = [
            "xpk", "workload", "create", *xpk_args(info), "--workload", "v4-run",
            "--tpu-type", "v4-32", "--num-slices", "1", "--docker-image", IMAGE,
            "--command", "echo v4 host $JOB_COMPLETION_INDEX; sleep 120",
        ]  # fmt: skip
        created = run(create, env)
        assert created.returncode == 0, created.stdout[-3000:] + created.stderr[-3000:]
        assert "jobset.jobset.x-k8s.io/v4-run created" in created.stdout
        pods_path = (
            "api/v1/namespaces/default/pods?labelSelector=jobset.sigs.k8s.io/jobset-name%3Dv4-run"
        )
        nodes = {n["metadata"]["name"]: n for n in get(info, "api/v1/nodes")["items"]}

        def running() -> list[Any]:
            return [
                p for p in get(info, pods_path)["items"] if p["status"].get("phase") == "Running"
            ]

        wait_until(lambda: len(running()) == 4, 90, "the v4-32 workload's 4 pods Running")
        pools_used = {
            nodes[p["spec"]["nodeName"]]["metadata"]["labels"]["cloud.google.com/gke-nodepool"]
            for p in running()
        }
        assert len(pools_used) == 1 and pools_used <= {"research-v4-np-0", "research-v4-np-1"}
        labels = nodes[running()[0]["spec"]["nodeName"]]["metadata"]["labels"]
        assert labels["cloud.google.com/gke-tpu-accelerator"] == "tpu-v4-podslice"
        assert labels["node.kubernetes.io/instance-type"] == "ct4p-hightpu-4t"

        listed = run(["xpk", "workload", "list", *xpk_args(info)], env)
        assert listed.returncode == 0, listed.stdout[-3000:]
        assert [ln for ln in listed.stdout.splitlines() if ln.startswith("v4-run ")]

        wrong = run([*create[:12], "v5-run", "--tpu-type", "v5p-64", *create[15:]], env)
        assert wrong.returncode != 0, wrong.stdout[-3000:]
        assert (
            "The nodepool for the requested device type v5p-64 is not present on the cluster "
            "research-v4" in wrong.stdout
        ), wrong.stdout[-3000:]
        assert get(info, f"{JOBSETS}/v4-run")["metadata"]["name"] == "v4-run"
        assert "v5-run" not in {j["metadata"]["name"] for j in get(info, JOBSETS)["items"]}
    finally:
        stop_cluster(run_dir)
