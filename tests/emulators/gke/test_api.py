"""The GKE emulator through kubernetes-asyncio, the console's client: list/watch with
resourceVersion resume, 410 Gone, BOOKMARKs, log follow (closed by the server and resumed
without duplicates), secrets by secretKeyRef, Status errors for bad manifests."""

from __future__ import annotations

import asyncio
import hashlib
import json
import subprocess
import sys
import urllib.error
import urllib.request
from datetime import UTC, datetime
from typing import Any

import pytest
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio import config as k8s_config
from kubernetes_asyncio import watch as k8s_watch
from kubernetes_asyncio.client.exceptions import ApiException

from emulators.gke import client as gke_client
from emulators.gke.workload.grpo import TUNIX_TAGS
from tests.support.fixtures_gke import (
    gke_module,
    start_cluster,
    stop_cluster,
    with_changes,
    xpk_jobset,
)
from tests.support.waiting import until

__all__ = ["gke_module"]

GROUP, VERSION, PLURAL = "jobset.x-k8s.io", "v1alpha2", "jobsets"


async def api_client(info: gke_client.GkeInfo) -> k8s.ApiClient:
    cfg = k8s.Configuration()
    await k8s_config.load_kube_config(config_file=str(info.kubeconfig), client_configuration=cfg)
    return k8s.ApiClient(configuration=cfg)


def cpu_jobset(name: str, command: str, env: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """A one-pod JobSet on the cpu-np pool running ``command``."""
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "JobSet",
        "metadata": {"name": name},
        "spec": {
            "replicatedJobs": [
                {
                    "name": "main",
                    "replicas": 1,
                    "template": {
                        "spec": {
                            "parallelism": 1,
                            "completions": 1,
                            "backoffLimit": 0,
                            "template": {
                                "spec": {
                                    "restartPolicy": "Never",
                                    "terminationGracePeriodSeconds": 5,
                                    "nodeSelector": {"cloud.google.com/gke-nodepool": "cpu-np"},
                                    "containers": [
                                        {
                                            "name": "main",
                                            "image": "python:3.11-slim",
                                            "command": ["bash", "-c", command],
                                            "env": env or [],
                                        }
                                    ],
                                }
                            },
                        }
                    },
                }
            ]
        },
    }


async def pod_of(core: k8s.CoreV1Api, jobset: str, phase: str | None = None) -> Any:
    pods = await core.list_namespaced_pod(
        "default", label_selector=f"jobset.sigs.k8s.io/jobset-name={jobset}"
    )
    for p in pods.items:
        if phase is None or p.status.phase == phase:
            return p
    return None


async def test_list_watch_410_resume_and_bookmark(gke_module: gke_client.GkeInfo) -> None:
    api = await api_client(gke_module)
    async with api:
        core, custom = k8s.CoreV1Api(api), k8s.CustomObjectsApi(api)
        nodes = await core.list_node(label_selector="cloud.google.com/gke-tpu-topology=2x4x4")
        assert len(nodes.items) == 8
        labels = nodes.items[0].metadata.labels
        assert labels["cloud.google.com/gke-tpu-accelerator"] == "tpu-v5p-slice"
        assert labels["cloud.google.com/gke-spot"] == "true"
        assert nodes.items[0].status.allocatable["google.com/tpu"] == "4"
        assert nodes.items[0].spec.taints[0].key == "google.com/tpu"
        listed = await core.list_namespaced_pod("default")
        since = listed.metadata.resource_version
        await custom.create_namespaced_custom_object(
            GROUP, VERSION, "default", PLURAL, cpu_jobset("watched", "sleep 30")
        )
        seen: list[tuple[str, str]] = []
        bookmarks = 0
        w = k8s_watch.Watch()
        async for ev in w.stream(
            core.list_namespaced_pod,
            "default",
            resource_version=since,
            allow_watch_bookmarks=True,
            label_selector="jobset.sigs.k8s.io/jobset-name=watched",
            timeout_seconds=20,
        ):
            if ev["type"] == "BOOKMARK":
                bookmarks += 1
                assert int(ev["raw_object"]["metadata"]["resourceVersion"]) >= int(since)
            else:
                seen.append((ev["type"], ev["object"].status.phase))
            if bookmarks and ("MODIFIED", "Running") in seen:
                break
        w.stop()
        assert seen[0] == ("ADDED", "Pending"), seen
        assert ("MODIFIED", "Running") in seen
        # etcd compaction: the old resourceVersion is gone, the watch says 410 Expired.
        gke_client.compact(gke_module.run_dir)
        w = k8s_watch.Watch()
        with pytest.raises(ApiException) as exc:
            async for _ in w.stream(
                core.list_namespaced_pod, "default", resource_version=since, timeout_seconds=5
            ):
                pass
        assert exc.value.status == 410
        # The client's recovery: relist, then watch from the fresh resourceVersion.
        fresh = await core.list_namespaced_pod("default")
        await custom.delete_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "watched")
        types = []
        w = k8s_watch.Watch()
        async for ev in w.stream(
            core.list_namespaced_pod,
            "default",
            resource_version=fresh.metadata.resource_version,
            timeout_seconds=20,
        ):
            types.append(ev["type"])
            if ev["type"] == "DELETED":
                break
        assert "DELETED" in types


async def test_watch_forever_retries_410_by_itself(gke_module: gke_client.GkeInfo) -> None:
    """kubernetes-asyncio's Watch without timeout_seconds retries one 410 from the last rv."""
    api = await api_client(gke_module)
    async with api:
        core = k8s.CoreV1Api(api)
        stale = (await core.list_node()).metadata.resource_version
        await core.create_namespaced_secret(
            "default", {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "bump"}}
        )
        gke_client.compact(gke_module.run_dir)  # revisions before the secret are gone
        w = k8s_watch.Watch()
        with pytest.raises(ApiException) as exc:
            async for _ in w.stream(core.list_node, resource_version=stale):
                pass
        assert exc.value.status == 410


async def test_log_follow_closed_by_server_resumes_without_duplicates(tmp_path: Any) -> None:
    info = start_cluster(tmp_path / "gke", extra=["--log-max-duration", "1.5"])
    try:
        api = await api_client(info)
        async with api:
            core, custom = k8s.CoreV1Api(api), k8s.CustomObjectsApi(api)
            await custom.create_namespaced_custom_object(
                GROUP,
                VERSION,
                "default",
                PLURAL,
                cpu_jobset("counter", "for i in $(seq 1 40); do echo line $i; sleep 0.1; done"),
            )
            await until(lambda: pod_of(core, "counter", "Running"), 20, "counter pod Running")
            pod = (await pod_of(core, "counter")).metadata.name
            lines: list[str] = []
            last_ts = ""
            follows = 0
            while True:
                follows += 1
                kwargs: dict[str, Any] = {
                    "follow": True,
                    "timestamps": True,
                    "_preload_content": False,
                }
                if last_ts:
                    # kubernetes-asyncio has no since_time: since_seconds reaches back far
                    # enough, then lines at or before the last timestamp seen are dropped.
                    age = (
                        datetime.now(UTC) - datetime.fromisoformat(last_ts[:26] + "+00:00")
                    ).total_seconds()
                    kwargs["since_seconds"] = int(age) + 2
                resp = await core.read_namespaced_pod_log(pod, "default", **kwargs)
                async for raw in resp.content:
                    ts, _, text = raw.decode().rstrip("\n").partition(" ")
                    if last_ts and ts <= last_ts:
                        continue
                    lines.append(text)
                    last_ts = ts
                resp.release()
                p = await core.read_namespaced_pod(pod, "default")
                if p.status.phase == "Succeeded" and lines and lines[-1] == "line 40":
                    break
                assert follows < 30, "the follow never reached the end"
            assert lines == [f"line {i}" for i in range(1, 41)]
            assert follows >= 2, "the server was configured to close follows after 1.5 s"
            tail = await core.read_namespaced_pod_log(pod, "default", tail_lines=2)
            assert tail == "line 39\nline 40\n"
    finally:
        stop_cluster(tmp_path / "gke")


async def test_secret_key_ref_reaches_the_container_not_the_log(
    gke_module: gke_client.GkeInfo,
) -> None:
    token = "hf_emulatedSecretValue123"
    api = await api_client(gke_module)
    async with api:
        core, custom = k8s.CoreV1Api(api), k8s.CustomObjectsApi(api)
        await core.create_namespaced_secret(
            "default",
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": "hf-token"},
                "stringData": {"HF_TOKEN": token},
            },
        )
        env = [
            {
                "name": "HF_TOKEN",
                "valueFrom": {"secretKeyRef": {"name": "hf-token", "key": "HF_TOKEN"}},
            }
        ]
        await custom.create_namespaced_custom_object(
            GROUP,
            VERSION,
            "default",
            PLURAL,
            cpu_jobset("secret-user", 'printf %s "$HF_TOKEN" | sha256sum', env),
        )
        await until(lambda: pod_of(core, "secret-user", "Succeeded"), 20, "pod Succeeded")
        pod = (await pod_of(core, "secret-user")).metadata.name
        log = await core.read_namespaced_pod_log(pod, "default")
        assert hashlib.sha256(token.encode()).hexdigest() in log
        assert token not in log
        # A missing secret keeps the container waiting, as the kubelet does.
        await custom.create_namespaced_custom_object(
            GROUP,
            VERSION,
            "default",
            PLURAL,
            cpu_jobset(
                "no-secret",
                "true",
                [{"name": "X", "valueFrom": {"secretKeyRef": {"name": "absent", "key": "k"}}}],
            ),
        )

        async def waiting_reason() -> bool:
            p = await pod_of(core, "no-secret")
            st = p and p.status.container_statuses
            return bool(
                st
                and st[0].state.waiting
                and st[0].state.waiting.reason == "CreateContainerConfigError"
            )

        await until(waiting_reason, 20, "CreateContainerConfigError")
        await core.delete_namespaced_secret("hf-token", "default")


BAD = [
    ("spec.replicatedJobs[0].replicas", "two", 422, "spec.replicatedJobs[0].replicas"),
    (
        "spec.replicatedJobs[0].template.spec.template.spec.containers[0].image",
        "",
        422,
        "spec.replicatedJobs[0].template.spec.template.spec.containers[0].image: Required value",
    ),
    ("spec.failurePolicy.maxRestarts", -1, 422, "spec.failurePolicy.maxRestarts"),
    (
        "spec.replicatedJobs[0].template.spec.template.spec.restartPolicy",
        "Always",
        422,
        'restartPolicy: Unsupported value: "Always"',
    ),
    ("metadata.name", "Bad_Name", 422, "metadata.name: Invalid value"),
    ("spec.replicatedJobs", [], 422, "spec.replicatedJobs: Required value"),
    ("kind", "Job", 400, 'Job in version "v1alpha2" cannot be handled as a JobSet'),
]


@pytest.mark.parametrize(
    ("path", "value", "code", "needle"),
    BAD,
    ids=[b[0].split(".")[-1] + f"={b[1]!r}"[:20] for b in BAD],
)
def test_bad_manifest_is_rejected_and_creates_nothing(
    gke_module: gke_client.GkeInfo, path: str, value: Any, code: int, needle: str
) -> None:
    manifest = with_changes(xpk_jobset("bad-one", "true"), path, value)
    url = f"{gke_module.server}/apis/{GROUP}/{VERSION}/namespaces/default/{PLURAL}"
    req = urllib.request.Request(
        url,
        data=json.dumps(manifest).encode(),
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    with pytest.raises(urllib.error.HTTPError) as exc:
        urllib.request.urlopen(req, timeout=10)
    status = json.loads(exc.value.read())
    assert exc.value.code == code
    assert status["kind"] == "Status" and status["code"] == code
    assert status["reason"] == ("Invalid" if code == 422 else "BadRequest")
    assert needle in status["message"], status["message"]
    if code == 422:
        assert any(c["field"].startswith(path.split("[")[0]) for c in status["details"]["causes"])
    with urllib.request.urlopen(url, timeout=10) as resp:
        names = [i["metadata"]["name"] for i in json.loads(resp.read())["items"]]
    assert "bad-one" not in names


def test_malformed_image_reference_is_the_kubelets_business(gke_module: gke_client.GkeInfo) -> None:
    """The API accepts any non-empty image (as Kubernetes does); the pod waits on
    InvalidImageName with the kubelet's message."""
    manifest = with_changes(
        xpk_jobset("bad-image", "true", wrapper=False),
        "spec.replicatedJobs[0].template.spec.template.spec.containers[0].image",
        "gcr.io/Proj/UPPER:tag!",
    )
    url = f"{gke_module.server}/apis/{GROUP}/{VERSION}/namespaces/default/{PLURAL}"
    req = urllib.request.Request(
        url,
        data=json.dumps(manifest).encode(),
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    urllib.request.urlopen(req, timeout=10).close()

    def reason() -> str:
        pods_url = (
            f"{gke_module.server}/api/v1/namespaces/default/pods?labelSelector="
            "jobset.sigs.k8s.io/jobset-name%3Dbad-image"
        )
        with urllib.request.urlopen(pods_url, timeout=10) as resp:
            items = json.loads(resp.read())["items"]
        for p in items:
            for cs in p.get("status", {}).get("containerStatuses") or []:
                return str(cs["state"].get("waiting", {}).get("reason", ""))
        return ""

    asyncio.run(until(lambda: reason() == "InvalidImageName", 20, "InvalidImageName"))
    delete = urllib.request.Request(f"{url}/bad-image", method="DELETE")
    urllib.request.urlopen(delete, timeout=10).close()


def test_tunix_tag_names_are_the_ones_tunix_writes() -> None:
    """Tunix logs f"{prefix}/{mode}/{name}" (tunix/sft/metrics_logger.py) after splitting
    the buffered name on its first "/" (tunix/rl/rl_cluster.py)."""
    for doc, tag in [
        ("rewards/mean", "rewards/train/mean"),
        ("score/mean", "rewards/train/score/mean"),
        ("completions/mean_length", "completions/train/mean_length"),
        ("actor_dequeue_time", "global/train/actor_dequeue_time"),
        ("step_time_sec", "perf/train/global_step_time"),
        ("rollout_time", "perf/train/mean/rollout_time"),
    ]:
        assert tag in TUNIX_TAGS, (doc, tag)


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "emulators.gke", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_cli_usage_errors_exit_2_with_the_flag_named(
    gke_module: gke_client.GkeInfo, tmp_path: Any
) -> None:
    r = run_cli("up", "--slices", "0", "--run-dir", str(tmp_path / "x"))
    assert r.returncode == 2 and "--slices" in r.stderr and "Traceback" not in r.stderr
    r = run_cli("preempt", "7", "--run-dir", str(gke_module.run_dir))
    assert r.returncode == 2 and "unknown slice '7'" in r.stderr, r.stderr
    r = run_cli("preempt", "0", "--grace", "-1", "--run-dir", str(gke_module.run_dir))
    assert r.returncode == 2 and "--grace" in r.stderr
    r = run_cli("status", "--run-dir", str(tmp_path / "none"))
    assert r.returncode == 1 and "no GKE emulator is running" in r.stderr
    r = run_cli("status", "--json", "--run-dir", str(gke_module.run_dir))
    assert r.returncode == 0
    status = json.loads(r.stdout)
    assert status["kubeconfig"] == str(gke_module.kubeconfig)
    assert [s["name"] for s in status["slices"]] == ["phantom-gke-np-0"]


async def test_container_restart_keeps_the_previous_log(gke_module: gke_client.GkeInfo) -> None:
    """restartPolicy OnFailure: the kubelet restarts the container in place (restartCount 1,
    lastState terminated), `previous=true` serves the first instance's log, and the
    restart counts towards the Job's backoffLimit."""
    api = await api_client(gke_module)
    async with api:
        core, batch = k8s.CoreV1Api(api), k8s.BatchV1Api(api)
        script = "if [ -f done ]; then echo second; else touch done; echo first; exit 1; fi"
        await batch.create_namespaced_job(
            "default",
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "metadata": {"name": "flaky"},
                "spec": {
                    "backoffLimit": 2,
                    "template": {
                        "spec": {
                            "restartPolicy": "OnFailure",
                            "nodeSelector": {"cloud.google.com/gke-nodepool": "cpu-np"},
                            "containers": [
                                {
                                    "name": "main",
                                    "image": "bash:5",
                                    "command": ["bash", "-c", script],
                                }
                            ],
                        }
                    },
                },
            },
        )

        async def succeeded() -> bool:
            job = await batch.read_namespaced_job("flaky", "default")
            return bool(job.status.succeeded)

        await until(succeeded, 30, "Job flaky Complete")
        pods = await core.list_namespaced_pod("default", label_selector="job-name=flaky")
        assert len(pods.items) == 1
        p = pods.items[0]
        cs = p.status.container_statuses[0]
        assert cs.restart_count == 1
        assert cs.last_state.terminated.exit_code == 1
        assert cs.state.terminated.reason == "Completed"
        name = p.metadata.name
        assert await core.read_namespaced_pod_log(name, "default") == "second\n"
        assert await core.read_namespaced_pod_log(name, "default", previous=True) == "first\n"
        job = await batch.read_namespaced_job("flaky", "default")
        assert [c.type for c in job.status.conditions] == ["SuccessCriteriaMet", "Complete"]


async def test_jobsets_watch_as_custom_objects(gke_module: gke_client.GkeInfo) -> None:
    api = await api_client(gke_module)
    async with api:
        custom = k8s.CustomObjectsApi(api)
        listed = await custom.list_namespaced_custom_object(GROUP, VERSION, "default", PLURAL)
        rv = listed["metadata"]["resourceVersion"]
        await custom.create_namespaced_custom_object(
            GROUP, VERSION, "default", PLURAL, cpu_jobset("short", "echo done")
        )
        w = k8s_watch.Watch()
        states = []
        async for ev in w.stream(
            custom.list_namespaced_custom_object,
            GROUP,
            VERSION,
            "default",
            PLURAL,
            resource_version=rv,
            timeout_seconds=30,
        ):
            obj = ev["object"]
            if obj["metadata"]["name"] != "short":
                continue
            states.append((ev["type"], obj.get("status", {}).get("terminalState")))
            if states[-1][1] == "Completed":
                break
        w.stop()
        assert states[0][0] == "ADDED" and states[-1] == ("MODIFIED", "Completed")
        js = await custom.get_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "short")
        assert js["status"]["replicatedJobsStatus"] == [
            {"name": "main", "ready": 0, "succeeded": 1, "failed": 0, "active": 0, "suspended": 0}
        ]
