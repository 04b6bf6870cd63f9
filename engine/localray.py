"""A small multi-node Ray cluster on loopback addresses, for development, tests and benches.

Each node is a ``ray start --block`` process in its own session, on its own
loopback address (``127.0.66.<1+i>`` by default, away from the pod emulator's
``127.0.0.1x``), with every port picked free and a private ``--temp-dir``.
Stopping kills exactly the processes this cluster started: the process groups of
its ``ray start`` commands and any process whose command line mentions the
cluster's private temp dir. It never runs a global ``ray stop``.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _free_ports(host: str, n: int) -> list[int]:
    ports: set[int] = set()
    while len(ports) < n:
        ports.add(free_port(host))
    return sorted(ports)


# What `ray start` says when its raylet did not register with the GCS in the 30 s it allows
# (a fixed wait in Ray): on a loaded machine a healthy node can need more.
_RAY_START_TIMED_OUT = "timed out during startup"
START_ATTEMPTS = 3


@dataclass
class LocalNode:
    ip: str
    proc: subprocess.Popen[bytes]
    log_path: Path
    log_from: int = 0  # where this node's own lines start in its log (an earlier try's above)
    preempted: bool = False  # by ``preempt_node``: gone for good
    replaced: bool = False  # by ``replace_preempted``: a new node on a new IP stands in


@dataclass
class LocalRayCluster:
    """Start with ``start()``, add nodes with ``add_node()``, always ``stop()``."""

    ip_prefix: str = "127.0.66."
    cpus_per_node: int = 1
    head_cpus: int | None = None  # None: cpus_per_node; 0 keeps work off the head
    object_store_mb: int = 80
    resources: dict[str, float] = field(default_factory=dict)
    nodes: list[LocalNode] = field(default_factory=list)
    gcs_address: str = ""
    dashboard_url: str = ""
    temp_dir: str = ""

    def _ray_bin(self) -> str:
        return str(Path(sys.executable).with_name("ray"))

    def _node_args(self, ip: str, cpus: int | None = None) -> list[str]:
        p = _free_ports(ip, 7)
        return [
            "--node-ip-address",
            ip,
            "--num-cpus",
            str(int(self.cpus_per_node if cpus is None else cpus)),
            "--object-store-memory",
            str(self.object_store_mb * 1024 * 1024),
            "--resources",
            json.dumps(self.resources),
            "--node-manager-port",
            str(p[0]),
            "--object-manager-port",
            str(p[1]),
            "--dashboard-agent-listen-port",
            str(p[2]),
            "--dashboard-agent-grpc-port",
            str(p[3]),
            "--metrics-export-port",
            str(p[4]),
            "--runtime-env-agent-port",
            str(p[5]),
            "--min-worker-port",
            "0",
            "--max-worker-port",
            "0",
            "--disable-usage-stats",
            "--block",
        ]

    def _spawn(self, ip: str, args: list[str]) -> LocalNode:
        log_path = Path(self.temp_dir) / f"node-{ip}.log"
        log_from = log_path.stat().st_size if log_path.exists() else 0
        # job entrypoints say `python`: make that this interpreter, as on a bootstrapped VM
        path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
        env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "PATH": path}
        with open(log_path, "ab") as log_fh:
            proc = subprocess.Popen(
                [self._ray_bin(), "start", *args],
                stdout=log_fh,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        node = LocalNode(ip=ip, proc=proc, log_path=log_path, log_from=log_from)
        self.nodes.append(node)
        return node

    def _start_node(
        self, ip: str, args: Callable[[], list[str]], alive: int, timeout: float
    ) -> LocalNode:
        """Start a node (``args``: its flags, ports picked anew each try) and wait until
        ``alive`` nodes are; a node whose `ray start` gave up on its raylet's registration
        is killed whole and started again, up to ``START_ATTEMPTS`` times."""
        for attempt in range(1, START_ATTEMPTS + 1):
            node = self._spawn(ip, args())
            try:
                self.wait_for_nodes(alive, timeout)
            except NodeExited as exc:
                if exc.node is not node or attempt == START_ATTEMPTS:
                    raise
                if _RAY_START_TIMED_OUT not in exc.log:
                    raise
                self._discard(node)
                continue
            return node
        raise AssertionError("unreachable")

    def _discard(self, node: LocalNode) -> None:
        """A node that failed to start: every process of it killed, out of the list."""
        for pid in self.node_processes(node):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self._kill_group(node.proc)
        self.nodes.remove(node)

    def start(self, timeout: float = 90.0) -> LocalRayCluster:
        # short path: Ray puts unix sockets under the temp dir (108-char limit)
        self.temp_dir = tempfile.mkdtemp(prefix="rl", dir="/tmp")
        ip = f"{self.ip_prefix}1"

        def head_args() -> list[str]:
            gcs_port, dash_port, client_port = _free_ports(ip, 3)
            self.gcs_address = f"{ip}:{gcs_port}"
            self.dashboard_url = f"http://{ip}:{dash_port}"
            return [
                "--head",
                "--port",
                str(gcs_port),
                "--dashboard-host",
                ip,
                "--dashboard-port",
                str(dash_port),
                "--include-dashboard",
                "true",
                "--ray-client-server-port",
                str(client_port),
                "--temp-dir",
                self.temp_dir,
                *self._node_args(ip, self.head_cpus),
            ]

        self._start_node(ip, head_args, 1, timeout)
        return self

    def add_node(self, timeout: float = 90.0) -> LocalNode:
        ip = f"{self.ip_prefix}{len(self.nodes) + 1}"
        alive = len(self.alive_nodes()) + 1
        return self._start_node(
            ip, lambda: ["--address", self.gcs_address, *self._node_args(ip)], alive, timeout
        )

    def replace_preempted(self, timeout: float = 90.0) -> list[LocalNode]:
        """A new node (on a new IP) for each preempted one not replaced yet, once Ray has marked
        it dead: the cluster is back to the size it had. Returns the nodes added."""
        lost = [n for n in self.nodes if n.preempted and not n.replaced]
        ips = {n.ip for n in lost}
        deadline = time.monotonic() + timeout
        while any(_node_ip(n) in ips for n in self.alive_nodes()):
            if time.monotonic() > deadline:
                raise TimeoutError(f"ray still lists the preempted nodes {sorted(ips)} alive")
            time.sleep(0.5)
        added = []
        for node in lost:
            node.replaced = True
            added.append(self.add_node(timeout))
        return added

    def alive_nodes(self) -> list[dict[str, object]]:
        """Alive nodes as reported by the dashboard (empty if it is not up yet)."""
        try:
            with urllib.request.urlopen(f"{self.dashboard_url}/nodes?view=summary", timeout=5) as r:
                data = json.loads(r.read().decode())
        except (OSError, ValueError):
            return []
        summary = data.get("data", {}).get("summary", [])
        return [n for n in summary if n.get("raylet", {}).get("state") == "ALIVE"]

    def wait_for_nodes(self, n: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for node in self.nodes:
                if not node.preempted and node.proc.poll() is not None:
                    raise NodeExited(node)
            if len(self.alive_nodes()) >= n:
                return
            time.sleep(0.5)
        raise TimeoutError(f"ray cluster did not reach {n} alive nodes in {timeout}s")

    def node_processes(self, node: LocalNode) -> list[int]:
        """Every process of a node: its ``ray start`` tree (raylet, workers and whatever they
        started, in any session) and the processes naming its address."""
        children: dict[int, list[int]] = {}
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            children.setdefault(ppid, []).append(int(entry))
        # exact flags (a trailing space ends each argument): every node names the head's IP
        needles = (f"--node-ip-address={node.ip} ", f"--node_ip_address={node.ip} ")
        roots = {node.proc.pid, *self._pids_mentioning(*needles)}
        found: set[int] = set()
        todo = list(roots)
        while todo:
            pid = todo.pop()
            if pid not in found:
                found.add(pid)
                todo.extend(children.get(pid, []))
        return sorted(found - {os.getpid()})

    def preempt_node(self, node: LocalNode, grace_s: float) -> list[int]:
        """A preemption with notice, as on a spot VM: SIGTERM to every process of the node at
        once, SIGKILL to whatever is left after ``grace_s``. Returns the pids signalled."""
        node.preempted = True
        pids = self.node_processes(node)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and any(_alive(pid) for pid in pids):
            time.sleep(0.05)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            node.proc.wait(timeout=10)
        return pids

    @staticmethod
    def _kill_group(proc: subprocess.Popen[bytes]) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=10)

    def _pids_mentioning(self, *needles: str) -> list[int]:
        """Processes whose command line contains this cluster's temp dir and a needle."""
        pids = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or int(entry) == os.getpid():
                continue
            try:
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if self.temp_dir and self.temp_dir in cmdline and any(n in cmdline for n in needles):
                pids.append(int(entry))
        return pids

    def stop(self) -> None:
        for node in self.nodes:
            self._kill_group(node.proc)
        if self.temp_dir:
            for pid in self._pids_mentioning(self.temp_dir):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            shutil.rmtree(self.temp_dir, ignore_errors=True)
        self.nodes.clear()


class NodeExited(RuntimeError):
    """A node's `ray start` ended while the cluster waited for it; ``log``: its lines."""

    def __init__(self, node: LocalNode) -> None:
        with open(node.log_path, "rb") as fh:
            fh.seek(node.log_from)
            self.log = fh.read().decode(errors="replace")
        self.node = node
        super().__init__(f"ray node {node.ip} exited: {self.log[-2000:]}")


def _node_ip(summary: dict[str, object]) -> object:
    raylet = summary.get("raylet")
    return raylet.get("nodeManagerAddress") if isinstance(raylet, dict) else None


def _alive(pid: int) -> bool:
    """Running (not gone, not a zombie waiting to be reaped)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


@contextlib.contextmanager
def local_ray_cluster(
    n_nodes: int = 1,
    cpus_per_node: int = 1,
    resources: dict[str, float] | None = None,
    ip_prefix: str = "127.0.66.",
    head_cpus: int | None = None,
) -> Iterator[LocalRayCluster]:
    cluster = LocalRayCluster(
        ip_prefix=ip_prefix,
        cpus_per_node=cpus_per_node,
        resources=dict(resources or {}),
        head_cpus=head_cpus,
    )
    try:
        cluster.start()
        for _ in range(n_nodes - 1):
            cluster.add_node()
        yield cluster
    finally:
        cluster.stop()
