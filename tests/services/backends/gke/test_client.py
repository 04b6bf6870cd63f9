"""The backend's Kubernetes client against the GKE emulator: kubernetes-asyncio list/watch
into an informer (resume from its resourceVersion, a relist after 410, BOOKMARKs), Status
errors, and pod log follows that survive the server closing them, a container restart and
a pod replaced by its Job — each line exactly once."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from console.services.backends.gke.client import AsyncioKubeApi
from console.services.backends.gke.informer import Informer
from console.services.backends.gke.kube import (
    Conflict,
    Invalid,
    KubeApi,
    LogRequest,
    NotFound,
    Resource,
)
from console.services.model import LogLine, LogStreamClosed
from emulators.gke import client as gke_client
from tests.support.fixtures_gke import gke, gke_module, start_cluster, stop_cluster, xpk_jobset
from tests.support.gke_services import gke_backend
from tests.support.waiting import until

__all__ = ["gke", "gke_module"]


async def connect(info: gke_client.GkeInfo) -> AsyncioKubeApi:
    return await AsyncioKubeApi.connect(info.kubeconfig, namespace="default", timeout_s=10)


def job(name: str, script: str, restart: str = "Never", backoff: int = 0) -> dict[str, Any]:
    """A standalone Job of one pod on the CPU pool running ``script``."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "backoffLimit": backoff,
            "template": {
                "spec": {
                    "restartPolicy": restart,
                    "terminationGracePeriodSeconds": 2,
                    "nodeSelector": {"cloud.google.com/gke-nodepool": "cpu-np"},
                    "containers": [
                        {"name": "main", "image": "bash:5", "command": ["bash", "-c", script]}
                    ],
                }
            },
        },
    }


def secret(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}}


async def test_informer_lists_watches_and_moves_on_bookmarks(
    gke_module: gke_client.GkeInfo,
) -> None:
    api = await connect(gke_module)
    seen: list[tuple[str, str]] = []
    nodes = Informer(api, Resource.NODES)
    secrets = Informer(api, Resource.SECRETS)
    secrets.add_listener(lambda kind, obj: seen.append((kind, obj["metadata"]["name"])))
    try:
        nodes.start()
        secrets.start()
        assert await nodes.wait_synced(10) and await secrets.wait_synced(10)
        tpu = [
            n
            for n in nodes.values()
            if "cloud.google.com/gke-tpu-topology" in n["metadata"]["labels"]
        ]
        assert len(tpu) == 8 and len(nodes.items) == 9  # a v5p-64 slice and the cpu-np node
        listed_rv = secrets.resource_version
        await api.create(Resource.SECRETS, secret("informed"))
        await until(lambda: ("ADDED", "informed") in seen, 10, "the watch to deliver the Secret")
        await until(lambda: secrets.bookmarks > 0, 10, "a BOOKMARK (every 0.5 s on this emulator)")
        assert int(secrets.resource_version) > int(listed_rv)
        await api.delete(Resource.SECRETS, "informed")
        await until(lambda: ("DELETED", "informed") in seen, 10, "the deletion")
        assert secrets.get("informed") is None
        assert secrets.lists == 1 and secrets.expired == 0, secrets.stats()
    finally:
        await nodes.stop()
        await secrets.stop()
        await api.close()


async def test_a_410_relists_and_replays_what_was_missed(gke: gke_client.GkeInfo) -> None:
    """The watch is down while a Secret comes and another goes and etcd compacts: on resume
    the server answers 410 Expired; the informer relists and its listener still hears both."""
    api = await connect(gke)
    seen: list[tuple[str, str]] = []
    informer = Informer(api, Resource.SECRETS)
    informer.add_listener(lambda kind, obj: seen.append((kind, obj["metadata"]["name"])))
    try:
        await api.create(Resource.SECRETS, secret("doomed"))
        informer.start()
        assert await informer.wait_synced(10)
        await informer.stop()  # the connection is gone; the cache and its version stay
        stale = informer.resource_version
        await api.create(Resource.SECRETS, secret("while-down"))
        await api.delete(Resource.SECRETS, "doomed")
        assert gke_client.compact(gke.run_dir) > int(stale)
        informer.start()
        await until(lambda: informer.expired == 1 and informer.lists == 2, 10, "410 then relist")
        assert ("ADDED", "while-down") in seen and ("DELETED", "doomed") in seen
        assert set(informer.items) >= {"while-down"} and "doomed" not in informer.items
        await api.create(Resource.SECRETS, secret("after"))  # and it watches again
        await until(lambda: ("ADDED", "after") in seen, 10, "the watch after the relist")
    finally:
        await informer.stop()
        await api.close()


async def test_server_ended_watches_resume_without_a_relist(gke_module: gke_client.GkeInfo) -> None:
    api = await connect(gke_module)
    informer = Informer(api, Resource.SECRETS, watch_timeout_s=1)
    names: list[str] = []
    informer.add_listener(lambda kind, obj: names.append(obj["metadata"]["name"]))
    try:
        informer.start()
        assert await informer.wait_synced(10)
        for i in range(3):
            await asyncio.sleep(1.2)  # sleep-noqa: the server ends each watch after 1 s
            await api.create(Resource.SECRETS, secret(f"resumed-{i}"))
        await until(lambda: "resumed-2" in names, 10, "every Secret")
        assert informer.lists == 1, informer.stats()
    finally:
        await informer.stop()
        await api.close()


async def test_refusals_are_typed_and_a_dry_run_stores_nothing(
    gke_module: gke_client.GkeInfo,
) -> None:
    api = await connect(gke_module)
    try:
        with pytest.raises(NotFound):
            await api.get(Resource.JOBSETS, "absent")
        bad = xpk_jobset("bad-grace", "true")
        bad["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"][
            "terminationGracePeriodSeconds"
        ] = -5
        with pytest.raises(Invalid) as err:
            await api.create(Resource.JOBSETS, bad, dry_run=True)
        assert err.value.status == 422 and err.value.causes
        assert any("terminationGracePeriodSeconds" in f for f, _ in err.value.causes), (
            err.value.causes
        )
        ok = xpk_jobset("dry", "true")
        await api.create(Resource.JOBSETS, ok, dry_run=True)
        with pytest.raises(NotFound):
            await api.get(Resource.JOBSETS, "dry")
        await api.create(Resource.SECRETS, secret("twice"))
        with pytest.raises(Conflict):
            await api.create(Resource.SECRETS, secret("twice"))
    finally:
        await api.close()


class CountingApi:
    """The real client, counting the log requests a follow makes."""

    def __init__(self, api: KubeApi) -> None:
        self._api = api
        self.namespace = api.namespace
        self.log_requests: list[LogRequest] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._api, name)

    def log(self, request: LogRequest) -> AsyncIterator[str]:
        self.log_requests.append(request)
        return self._api.log(request)


async def collect(
    stream: AsyncIterator[LogLine | LogStreamClosed], timeout_s: float
) -> tuple[list[str], LogStreamClosed]:
    lines: list[str] = []
    async with asyncio.timeout(timeout_s):
        async for item in stream:
            if isinstance(item, LogStreamClosed):
                return lines, item
            lines.append(item.text)
    raise AssertionError("the stream ended without a LogStreamClosed")


@pytest.mark.slow
async def test_follow_resumes_after_server_closes_with_no_duplicate_line(tmp_path: Path) -> None:
    """The server ends every follow after 1.5 s (as an idle timeout or proxy does in life):
    the follow asks again from its last timestamp; 60 lines arrive once each, in order."""
    info = start_cluster(tmp_path / "gke", extra=["--log-max-duration", "1.5"])
    try:
        async with gke_backend(info) as (backend, _):
            counter = "for i in $(seq 1 60); do echo line $i; sleep 0.1; done"
            api, caches, _ = await backend._ensure()
            counting = CountingApi(api)
            backend.api = counting  # type: ignore[assignment]
            await api.create(Resource.JOBS, job("counter", counter))
            await until(lambda: caches.jobs.get("counter") is not None, 10, "the Job cached")
            lines, closed = await collect(backend.follow_logs("counter"), 60)
        assert lines == [f"line {i}" for i in range(1, 61)]
        follows = [r for r in counting.log_requests if r.follow]
        assert len(follows) >= 3, "the server closed each follow after 1.5 s"
        assert all(r.timestamps for r in counting.log_requests)
        assert any(r.since_seconds for r in follows[1:]), "a resume reaches back past the last line"
        assert closed.job_status == "SUCCEEDED"
    finally:
        stop_cluster(tmp_path / "gke")


async def test_follow_crosses_a_container_restart_and_a_replaced_pod(
    gke_module: gke_client.GkeInfo,
) -> None:
    """restartPolicy OnFailure restarts the container in place; restartPolicy Never makes
    the Job create a new pod: the workload's log goes on through both, each line once."""
    restart = "if [ -f once ]; then echo b1; echo b2; else touch once; echo a1; echo a2; sleep 0.3; exit 3; fi"
    async with gke_backend(gke_module) as (backend, _):
        api, caches, _ = await backend._ensure()
        await api.create(Resource.JOBS, job("restarted", restart, restart="OnFailure", backoff=2))
        await until(lambda: caches.jobs.get("restarted") is not None, 10, "the Job cached")
        lines, closed = await collect(backend.follow_logs("restarted"), 60)
        assert lines == ["a1", "a2", "b1", "b2"], lines
        assert closed.job_status == "SUCCEEDED"
        # A replaced pod: the first pod fails, the Job's second pod succeeds.
        script = (
            "if [ -e /tmp/phantom-test-$JOB_NAME ]; then echo second-pod; "
            "else echo first-pod; touch /tmp/phantom-test-$JOB_NAME; exit 1; fi"
        )
        body = job("replaced", script, backoff=1)
        body["spec"]["template"]["spec"]["containers"][0]["env"] = [
            {"name": "JOB_NAME", "value": f"replaced-{gke_module.pid}"}
        ]
        await api.create(Resource.JOBS, body)
        await until(lambda: caches.jobs.get("replaced") is not None, 10, "the Job cached")
        lines, closed = await collect(backend.follow_logs("replaced"), 60)
        assert lines == ["first-pod", "second-pod"], lines
        assert closed.job_status == "SUCCEEDED"
        pods = [
            p for p in caches.pods.values() if p["metadata"]["labels"].get("job-name") == "replaced"
        ]
        assert len(pods) == 2
    # A pod's working dir is its own: the first pod leaves its mark in /tmp for the second.
    await asyncio.to_thread(Path(f"/tmp/phantom-test-replaced-{gke_module.pid}").unlink, True)
