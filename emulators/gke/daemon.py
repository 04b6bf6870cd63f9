"""The emulated cluster's daemon: API server, controllers, kubelet, node pools, preemption.

Started detached by ``client.start`` as ``python -m emulators.gke serve``. One
asyncio loop owns all state; a reconcile loop runs the controllers after every change
(JobSet -> Job -> scheduler -> kubelet), and the CLI talks to it over a JSON-lines unix
socket, like the pod emulator's.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import secrets
import shutil
import signal
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from aiohttp import web

from emulators.gke import faults
from emulators.gke import layout as L
from emulators.gke.api import Api
from emulators.gke.dns import RESOLVER_DIR, HostsFile
from emulators.gke.events import Recorder, disruption_target
from emulators.gke.jobs import JobController
from emulators.gke.jobset import JobSetController
from emulators.gke.kubelet import SHUTDOWN_MESSAGE, SYSTEM_PATH, Kubelet
from emulators.gke.kueue import KueueController, xpk_cluster_objects
from emulators.gke.nodes import (
    Scheduler,
    make_node,
    node_ip,
    node_ready,
    pool_nodes,
    set_ready,
)
from emulators.gke.priority import priority_classes
from emulators.gke.services import kubernetes_service
from emulators.gke.store import Obj, Store
from emulators.gke.tls import ClusterTls, make_cluster_tls
from emulators.gke.workload.scripts import install_scripts
from emulators.kit.control import start_control_server
from emulators.kit.layout import read_path
from emulators.tpu_pod.procs import kill_marked, make_run_cgroup, remove_cgroup

log = logging.getLogger("phantom.gke")


class UsageError(Exception):
    """A bad request on the control channel (exit code 2 in the CLI)."""


@dataclass(frozen=True)
class DaemonConfig:
    run_dir: Path
    slices: int = L.DEFAULT_SLICES
    port: int = 0
    recreate_delay: float = L.DEFAULT_RECREATE_DELAY
    quota_stall: bool = False
    shutdown_grace: float = L.DEFAULT_SHUTDOWN_GRACE
    bookmark_interval: float = L.DEFAULT_BOOKMARK_INTERVAL
    log_idle_timeout: float = L.DEFAULT_LOG_IDLE_TIMEOUT
    log_max_duration: float = 0.0
    watch_history: int = L.DEFAULT_WATCH_HISTORY
    job_backoff: float = 10.0
    crash_backoff: float = 10.0
    schedule_retry: float = 10.0
    tpu_type: str = L.DEFAULT_TPU_TYPE
    cluster: str = L.CLUSTER


class Cluster:
    def __init__(self, cfg: DaemonConfig) -> None:
        self.cfg = cfg
        self.layout = L.RunLayout(cfg.run_dir)
        self.hosts = HostsFile(self.layout.hosts_file)
        self.run_id = secrets.token_hex(6)
        self.store = Store(cfg.watch_history)
        self.recorder = Recorder(self.store)
        self.scheduler = Scheduler(self.store, self.recorder, cfg.schedule_retry)
        self.jobs = JobController(self.store, self.recorder, cfg.job_backoff)
        self.jobsets = JobSetController(self.store, self.recorder, self.jobs)
        self.shape = L.slice_shape(cfg.tpu_type)
        self.name = cfg.cluster
        self.kueue = KueueController(self.store, self.shape)
        self.run_cgroup: Path | None = None
        self.port = cfg.port
        self.tls_port = 0
        self.tls: ClusterTls = None  # type: ignore[assignment]  # set in run() (run dir)
        self.kubelet: Kubelet = None  # type: ignore[assignment]  # set in run() (needs port)
        self.pools = [L.slice_pool(i, cfg.cluster) for i in range(cfg.slices)]
        self.quota_stall = cfg.quota_stall
        self.preemptions: list[dict[str, Any]] = []
        self._ips: dict[str, str] = {}
        self._stop = asyncio.Event()
        self._tasks: set[asyncio.Task[Any]] = set()

    # --- nodes --------------------------------------------------------------------------

    def _add_pool(self, pool: str, tpu: bool) -> None:
        count = self.shape.nodes if tpu else 1
        base = 0 if not tpu else 1 + self.shape.nodes * self.pools.index(pool)
        for i in range(count):
            ip = node_ip(base + i)
            node = make_node(pool, i, ip, tpu, self.shape, self.name)
            set_ready(node, True)
            self._ips[node["metadata"]["name"]] = ip
            if self.store.get("nodes", "", node["metadata"]["name"]) is None:
                self.store.create("nodes", node)
                self.recorder.emit(
                    node,
                    "Node",
                    "Normal",
                    "RegisteredNode",
                    f"Node {node['metadata']['name']} event: Registered Node "
                    f"{node['metadata']['name']} in Controller",
                    "node-controller",
                )

    def _spawn(self, coro: Any) -> asyncio.Task[Any]:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def resolve_slice(self, ref: str) -> str:
        ref = ref.strip()
        if ref.isdigit() and int(ref) < len(self.pools):
            return self.pools[int(ref)]
        if ref in self.pools:
            return ref
        raise UsageError(
            f"unknown slice {ref!r}: use an index 0..{len(self.pools) - 1} or a "
            f"node pool name {self.pools[0]!r}..{self.pools[-1]!r}"
        )

    def slice_state(self, pool: str) -> str:
        nodes = pool_nodes(self.store, pool)
        if not nodes:
            return "STALLED" if self.quota_stall else "RECREATING"
        if all(node_ready(n) for n in nodes):
            return "READY"
        return "PREEMPTING"

    async def preempt(self, ref: str, grace: float | None) -> dict[str, Any]:
        """GKE spot preemption of a whole slice: notice, grace, kill, nodes gone, maybe back."""
        pool = self.resolve_slice(ref)
        nodes = [n for n in pool_nodes(self.store, pool) if node_ready(n)]
        if not nodes:
            raise UsageError(f"slice {pool} has no Ready nodes ({self.slice_state(pool)})")
        cap = self.cfg.shutdown_grace if grace is None else grace
        record = self.shut_down(pool, nodes, cap, spot=True)
        self.preemptions.append(record)
        return record

    def shut_down(
        self,
        pool: str,
        nodes: list[Obj],
        cap: float,
        *,
        spot: bool,
        also: frozenset[str] = frozenset(),
    ) -> dict[str, Any]:
        """The kubelet's graceful node shutdown on ``nodes`` (a VM being deleted: a spot
        reclaim, or GKE repairing the slice), then the nodes (and ``also``) deleted and the
        slice recreated. Only a spot reclaim carries GKE's impending-termination taint."""
        names = {n["metadata"]["name"] for n in nodes}
        for node in nodes:

            def shut(n: Obj) -> None:
                set_ready(n, False, "node is shutting down")
                taints = n["spec"].setdefault("taints", [])
                keys = ["node.kubernetes.io/not-ready"]
                if spot:
                    keys.append("cloud.google.com/impending-node-termination")
                for key in keys:
                    if not any(t["key"] == key for t in taints):
                        taints.append({"key": key, "effect": "NoSchedule"})

            self.store.mutate("nodes", node, shut)
            self.recorder.emit(
                node,
                "Node",
                "Normal",
                "Shutdown",
                "Shutdown manager detected shutdown event",
                "kubelet",
                node["metadata"]["name"],
            )
            self.recorder.emit(
                node,
                "Node",
                "Normal",
                "NodeNotReady",
                f"Node {node['metadata']['name']} status is now: NodeNotReady",
                "node-controller",
            )
        stops = []
        pods = [
            p
            for p in self.store.list("pods")
            if p["spec"].get("nodeName") in names
            and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
        ]
        for pod in pods:
            shutdown = disruption_target("TerminationByKubelet", SHUTDOWN_MESSAGE)
            pod = self.store.mutate("pods", pod, shutdown)
            pgrace = min(float(pod["spec"].get("terminationGracePeriodSeconds", 30)), cap)
            if self.kubelet.is_running(pod["metadata"]["uid"]):
                stops.append(self.kubelet.stop_pod(pod["metadata"]["uid"], pgrace, "shutdown"))
            else:

                def failed(p: Obj) -> None:
                    p["status"].update(
                        phase="Failed", reason="Terminated", message=SHUTDOWN_MESSAGE
                    )

                self.store.mutate("pods", pod, failed)
        record = {
            "slice": pool,
            "at": time.time(),
            "grace": cap,
            "nodes": sorted(names),
            "pods": [p["metadata"]["name"] for p in pods],
        }
        self._spawn(self._finish_preemption(pool, names | also, stops))
        return record

    async def _finish_preemption(self, pool: str, names: set[str], stops: list[Any]) -> None:
        if stops:
            await asyncio.gather(*stops, return_exceptions=True)
        for name in sorted(names):
            self.store.delete("nodes", "", name)
        # The pod GC removes pods bound to nodes that no longer exist.
        for pod in self.jobs.collect_pods_on(names):
            self.kubelet.forget(pod["metadata"]["uid"])
        log.info("slice %s: nodes deleted", pool)
        if self.quota_stall:
            return
        await asyncio.sleep(self.cfg.recreate_delay)
        if not self.quota_stall and not pool_nodes(self.store, pool):
            self._add_pool(pool, tpu=True)
            log.info("slice %s: nodes back", pool)

    def restore(self, ref: str) -> None:
        pool = self.resolve_slice(ref)
        if not pool_nodes(self.store, pool):
            self._add_pool(pool, tpu=True)

    # --- reconcile ----------------------------------------------------------------------

    async def _reconcile(self) -> None:
        while not self._stop.is_set():
            await self.store.changed.wait()
            for _ in range(50):  # settle: run until a pass writes nothing
                self.store.changed.clear()
                for step in (
                    self.jobsets.sync,
                    self.kueue.sync,
                    self.jobs.sync,
                    self.scheduler.schedule_all,
                    self.kubelet.sync,
                    self._sync_hosts,
                ):
                    try:
                        step()
                    except Exception:  # one bad object must not stop every controller
                        log.exception("reconcile %s", step.__qualname__)
                if not self.store.changed.is_set():
                    break
            await asyncio.sleep(0.02)

    def _sync_hosts(self) -> None:
        self.hosts.sync(self.store)

    async def _tick(self) -> None:
        """Time-driven work: back-off expiries and the scheduler's retry queue."""
        while not self._stop.is_set():
            await asyncio.sleep(0.5)
            self.store.changed.set()

    # --- status & control ---------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        return {
            "run_dir": str(self.cfg.run_dir),
            "pid": os.getpid(),
            "run_id": self.run_id,
            "server": f"http://127.0.0.1:{self.port}",
            "tls_server": f"https://127.0.0.1:{self.tls_port}",
            "kubeconfig": str(self.layout.kubeconfig),
            "context": L.context_name(self.name),
            "project": L.PROJECT,
            "location": L.LOCATION,
            "cluster": self.name,
            "tpu_type": self.shape.tpu_type,
            "bucket": str(self.layout.bucket),
            "bin_dir": str(self.layout.bin_dir),
            "quota_stall": self.quota_stall,
            "slices": [
                {
                    "name": p,
                    "state": self.slice_state(p),
                    "nodes": [n["metadata"]["name"] for n in pool_nodes(self.store, p)],
                }
                for p in self.pools
            ],
            "preemptions": self.preemptions[-20:],
            "config": {
                k: str(v) if isinstance(v, Path) else v for k, v in asdict(self.cfg).items()
            },
        }

    async def _dispatch(self, req: dict[str, Any]) -> dict[str, Any]:
        op = req.get("op")
        try:
            extra: dict[str, Any] = {}
            if op == "status":
                pass
            elif op == "preempt":
                grace = req.get("grace")
                extra["preemption"] = await self.preempt(
                    str(req.get("slice", "")), None if grace is None else float(grace)
                )
            elif op == "fail-node":
                after = float(req.get("repair_after", 2.0))
                extra["failure"] = faults.fail_node(self, str(req.get("node", "")), after)
            elif op == "crash":
                extra["crash"] = faults.crash(
                    self,
                    str(req.get("pod", "")),
                    str(req.get("container", "")),
                    int(req.get("signal", signal.SIGKILL)),
                )
            elif op == "oom":
                extra["crash"] = faults.oom_kill(
                    self, str(req.get("pod", "")), str(req.get("container", ""))
                )
            elif op == "restore":
                self.restore(str(req.get("slice", "")))
            elif op == "quota":
                self.quota_stall = bool(req.get("stall"))
                if not self.quota_stall:
                    for pool in self.pools:
                        self.restore(pool)
            elif op == "compact":
                extra["compacted"] = self.store.compact()
            elif op == "shutdown":
                self._stop.set()
                return {"ok": True, "pid": os.getpid()}
            else:
                return {"ok": False, "code": 2, "error": f"unknown op {op!r}"}
        except (UsageError, faults.FaultError) as exc:
            return {"ok": False, "code": 2, "error": str(exc)}
        return {"ok": True, "status": self.status(), **extra}

    # --- main ---------------------------------------------------------------------------

    def _prepare_run_dir(self) -> None:
        self.cfg.run_dir.mkdir(parents=True, exist_ok=True)
        old = self.layout.run_id_file
        if old.exists():
            # A previous daemon died without cleaning up: its containers go now.
            old_id = old.read_text().strip()
            old_cg = read_path(self.layout.cgroup_file)
            if old_id:
                kill_marked(f"{old_id}:", old_cg)
            remove_cgroup(old_cg)
        self.layout.run_id_file.write_text(self.run_id + "\n")
        self.run_cgroup = make_run_cgroup(f"gke-{self.run_id}")
        self.layout.cgroup_file.write_text(f"{self.run_cgroup or ''}\n")
        self.layout.pid_file.write_text(f"{os.getpid()}\n")
        for d in (self.layout.pods_dir, self.layout.logs_dir):
            shutil.rmtree(d, ignore_errors=True)
            d.mkdir()
        self.layout.bucket.mkdir(exist_ok=True)
        install_scripts(self.layout.bin_dir)
        self.tls = make_cluster_tls(self.cfg.run_dir / "tls")

    def _write_kubeconfig(self) -> None:
        ctx = L.context_name(self.name)
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "preferences": {},
            "clusters": [{"name": ctx, "cluster": {"server": f"http://127.0.0.1:{self.port}"}}],
            "users": [{"name": ctx, "user": {}}],
            "contexts": [
                {"name": ctx, "context": {"cluster": ctx, "user": ctx, "namespace": L.NAMESPACE}}
            ],
            "current-context": ctx,
        }
        tmp = self.layout.kubeconfig.with_suffix(".tmp")
        tmp.write_text(json.dumps(config, indent=2) + "\n")
        tmp.replace(self.layout.kubeconfig)

    def _base_env(self) -> dict[str, str]:
        venv_bin = os.path.dirname(sys.executable)
        endpoint = f"127.0.0.1:{self.port}"
        return {
            "PATH": f"{self.layout.bin_dir}:{venv_bin}:{SYSTEM_PATH}",
            "LANG": "C.UTF-8",
            "KUBERNETES_SERVICE_HOST": "127.0.0.1",
            "KUBERNETES_SERVICE_PORT": str(self.port),
            # Google libraries look for the metadata server: never the link-local address.
            "NO_GCE_CHECK": "True",
            "GCE_METADATA_HOST": endpoint,
            "GCE_METADATA_IP": endpoint,
            "PHANTOM_GCS_ROOT": str(self.layout.bucket),
            "RAY_USAGE_STATS_ENABLED": "0",
            # Cluster DNS for Python: pod hostnames under a headless Service (dns.py).
            "PYTHONPATH": str(RESOLVER_DIR),
            "PHANTOM_GKE_HOSTS": str(self.layout.hosts_file),
        }

    async def run(self) -> int:
        try:
            control = await start_control_server(self.layout.control_address, self._dispatch)
        except OSError as exc:
            log.error(
                "error: the GKE emulator is already running for %s (%s)", self.cfg.run_dir, exc
            )
            return 1
        runner = web.AppRunner(Api(self).app(), access_log=None, handle_signals=False)
        try:
            self._prepare_run_dir()
            await runner.setup()
            # The same API over TLS: the endpoint get-credentials writes (tls.py). Started
            # before the plain port: from the plain port's start to the node pools below there
            # is no await, so `/version` (what `start` waits for) never answers before the nodes
            # exist.
            tls_site = web.TCPSite(
                runner, "127.0.0.1", 0, ssl_context=self.tls.server_context(), shutdown_timeout=1.0
            )
            await tls_site.start()
            assert tls_site._server is not None
            self.tls_port = tls_site._server.sockets[0].getsockname()[1]  # type: ignore[attr-defined]
            site = web.TCPSite(runner, "127.0.0.1", self.cfg.port, shutdown_timeout=1.0)
            try:
                await site.start()
            except OSError as exc:
                log.error(
                    "error: port %s on 127.0.0.1 is in use; pass --port (%s)", self.cfg.port, exc
                )
                return 2
            server = site._server
            assert server is not None
            self.port = server.sockets[0].getsockname()[1]  # type: ignore[attr-defined]
            self.kubelet = Kubelet(
                self.store,
                self.recorder,
                self.layout,
                self.run_id,
                self.run_cgroup,
                self._base_env(),
                self.cfg.crash_backoff,
                lambda name: self._ips.get(name, "127.0.2.1"),
            )
            for ns in ("default", "kube-system", "kube-public", "kube-node-lease"):
                self.store.create(
                    "namespaces",
                    {
                        "kind": "Namespace",
                        "apiVersion": "v1",
                        "metadata": {"name": ns},
                        "status": {"phase": "Active"},
                    },
                )
                # Every namespace has its "default" ServiceAccount, as the SA controller makes.
                sa = {"kind": "ServiceAccount", "apiVersion": "v1"}
                self.store.create(
                    "serviceaccounts", {**sa, "metadata": {"name": "default", "namespace": ns}}
                )
            self.store.create("services", kubernetes_service())
            for resource, obj in (
                *xpk_cluster_objects(len(self.pools), self.shape, self.name),
                *priority_classes(),
            ):
                self.store.create(resource, obj)
            self._add_pool(L.CPU_POOL, tpu=False)
            for pool in self.pools:
                self._add_pool(pool, tpu=True)
            self._write_kubeconfig()
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, self._stop.set)
            self._spawn(self._reconcile())
            self._spawn(self._tick())
            log.info(
                "serving run_dir=%s run_id=%s api=http://127.0.0.1:%s",
                self.cfg.run_dir,
                self.run_id,
                self.port,
            )
            await self._stop.wait()
            log.info("shutting down")
        finally:
            await self._shutdown(control, runner)
        return 0

    async def _shutdown(self, control: asyncio.Server, runner: web.AppRunner) -> None:
        for task in list(self._tasks):
            task.cancel()
        if self.kubelet is not None:
            await self.kubelet.stop_everything()
        await asyncio.to_thread(kill_marked, f"{self.run_id}:", self.run_cgroup)
        remove_cgroup(self.run_cgroup)
        for w in list(self.store.watchers):
            w.queue.put_nowait(None)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(runner.cleanup(), 5)
        control.close()
        with contextlib.suppress(FileNotFoundError):
            self.layout.pid_file.unlink()
        log.info("stopped")


def run_daemon(cfg: DaemonConfig) -> int:
    logging.basicConfig(
        stream=sys.stderr,
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    logging.getLogger("aiohttp").setLevel(logging.WARNING)
    return asyncio.run(Cluster(cfg).run())
