"""Forming the Ray cluster over SSH, as seed 000 does by hand, and reading who is alive.

``RayOps`` runs the seed's steps on the pod's hosts through ``SshFanout``:

1. ``bootstrap(hosts)`` — the "pre-heating" command on every worker;
2. ``start_head()`` — ``ray start --head`` with the GCS on the head's internal IP and the
   dashboard bound to 127.0.0.1 *of the head* (reached through the SSH tunnel; the seed's
   ``--dashboard-host=0.0.0.0`` would publish it to the VPC);
3. ``join_workers(hosts)`` — ``ray start --address=<head ip>:<gcs port>``;
4. ``stop(hosts)`` — ``ray stop -f``.

Every step is idempotent. A head that is already alive is left alone; a worker whose IP
already has a live node in this cluster is left alone; a worker that is not in the
cluster gets ``ray stop`` (graceful) before ``ray start`` so a raylet left over from a dead head
never becomes a second Ray node on the same IP (the seed's checklist item).

Liveness comes from Ray's state API (``GET /api/v0/nodes`` on the dashboard, what
``ray list nodes`` / ``ray.util.state.list_nodes`` call) — no ``ray.init`` and no Ray
import in the console: through the tunnel when it is up, else by running a tiny urllib
GET on the head over SSH. Command lines come from ``raycmd`` (shared with the emulator).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from console.config import RayConfig
from console.services.backends.tpu_vm import raycmd
from console.services.backends.tpu_vm.endpoints import HostEndpoint
from console.services.backends.tpu_vm.ssh import OutputCallback, SshFanout
from console.services.errors import BackendError
from console.services.model import HostResult, RayState

log = logging.getLogger(__name__)

# Python runs and Ray is installed; found, not imported: an import costs ~0.5 s of a
# recreated worker's recovery and proves nothing `ray start` does not prove right after.
LOCAL_BOOTSTRAP = (
    'python -c "import importlib.util as u, sys; print(sys.version); '
    "sys.exit(0 if u.find_spec('ray') else 'ray is not installed')\""
)
# Seed 000's pre-heating on a bare tpu-ubuntu2204-base VM.
GCP_BOOTSTRAP = (
    'python3 -m pip install --user "jax[tpu]" '
    "-f https://storage.googleapis.com/jax-releases/libtpu_releases.html "
    'stable-baselines3 gymnasium wandb tensorboard "ray[default]"'
)
_ALREADY_RUNNING = "but is already running at"
# `ray start` waits 30 s (hard-coded) for its node to register; on a loaded box it may give
# up while the raylet it started registers a little later.
_SLOW_REGISTRATION = "timed out during startup"
_NODES_QUERY = "/api/v0/nodes?limit=10000&timeout=20&detail=false"
# Runs on the head (its own python3, stdlib only); trims each row to the fields we read so
# the answer stays small on one line.
_FETCH_SCRIPT = """\
import json, sys, urllib.request
d = json.load(urllib.request.urlopen(sys.argv[1], timeout=25))
keep = ("node_id", "node_ip", "is_head_node", "state", "node_name", "resources_total",
        "state_message", "start_time_ms")
r = (d.get("data") or {}).get("result") or {}
if isinstance(r, dict) and isinstance(r.get("result"), list):
    r["result"] = [{k: n.get(k) for k in keep} for n in r["result"]]
sys.stdout.write(json.dumps(d, separators=(",", ":")))
"""


def default_bootstrap_command(command: str, *, local: bool) -> str:
    """``bootstrap.command`` when set, else the provider's default (the emulator's when
    ``local``)."""
    if command.strip():
        return command
    return LOCAL_BOOTSTRAP if local else GCP_BOOTSTRAP


class RayError(BackendError):
    """A Ray step failed; one line naming what and why."""


@dataclass(frozen=True)
class RayNodeInfo:
    """One Ray node as the state API reports it (dead nodes stay listed for a while)."""

    node_id: str
    ip: str
    alive: bool
    is_head: bool = False
    name: str = ""
    resources: Mapping[str, float] = field(default_factory=dict)
    state_message: str = ""
    start_time_s: float | None = None


def parse_nodes(payload: str | bytes | Mapping[str, Any]) -> list[RayNodeInfo]:
    """The dashboard's ``/api/v0/nodes`` answer -> nodes. Raises RayError on an error reply."""
    data = json.loads(payload) if isinstance(payload, str | bytes) else payload
    if not isinstance(data, Mapping) or data.get("result") is False:
        msg = data.get("msg", "") if isinstance(data, Mapping) else repr(data)[:200]
        raise RayError(f"Ray state API error: {msg}")
    try:
        rows = data["data"]["result"]["result"]
    except (KeyError, TypeError):
        raise RayError("Ray state API answer without data.result.result") from None
    out = []
    for row in rows:
        start = row.get("start_time_ms")
        out.append(
            RayNodeInfo(
                node_id=str(row.get("node_id", "")),
                ip=str(row.get("node_ip", "")),
                alive=str(row.get("state", "")).upper() == RayState.ALIVE,
                is_head=bool(row.get("is_head_node", False)),
                name=str(row.get("node_name", "") or ""),
                resources={str(k): float(v) for k, v in (row.get("resources_total") or {}).items()},
                state_message=str(row.get("state_message") or ""),
                start_time_s=float(start) / 1000 if start else None,
            )
        )
    return out


def alive_by_ip(nodes: Iterable[RayNodeInfo], ignore: Collection[str] = ()) -> dict[str, int]:
    """Live Ray nodes per IP (nodes whose id is in ``ignore`` left out)."""
    return dict(Counter(n.ip for n in nodes if n.alive and n.node_id not in ignore))


def duplicates(nodes: Iterable[RayNodeInfo]) -> dict[str, int]:
    """Host IPs with two or more live Ray nodes (a leftover raylet joined twice)."""
    return {ip: n for ip, n in alive_by_ip(nodes).items() if n > 1}


def _fetch(url: str, timeout_s: float) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout_s) as resp:
        body: bytes = resp.read()
        return body


class RayOps:
    """Ray on the pod, over SSH. Interface used by the facade/watchdog:

    - ``await bootstrap(hosts=None, on_output=None) -> dict[name, HostResult]``
    - ``await start_head(on_output=None, timeout_s=120) -> HostResult``
    - ``await join_workers(hosts=None, on_output=None, timeout_s=120) -> dict[name, HostResult]``
    - ``await stop(hosts=None) -> dict[name, HostResult]``
    - ``await nodes() -> list[RayNodeInfo]`` (raises RayError when the state API is down)
    - ``await wait_alive(ips, timeout_s) -> list[RayNodeInfo]``
    - ``duplicates(nodes)`` / ``alive_by_ip(nodes)`` (module functions, pure)
    - ``set_hosts(head, workers)`` after the TPU API reports new endpoints
    - ``gcs_address``, ``dashboard_url`` (set by the facade when the tunnel is up)
    """

    def __init__(
        self,
        ssh: SshFanout,
        *,
        head: HostEndpoint,
        workers: Sequence[HostEndpoint],
        ray_cfg: RayConfig,
        bootstrap_command: str = LOCAL_BOOTSTRAP,
        ray: str = "ray",
        user_path: bool = False,
        node_options: Callable[[HostEndpoint], raycmd.RayNodeOptions] | None = None,
        dashboard_url: Callable[[], str | None] | None = None,
        api_timeout_s: float = 30.0,
        poll_interval_s: float = 0.5,
        start_parallelism: int | None = None,
    ) -> None:
        self.ssh = ssh
        self.head = head
        self.workers = [w for w in workers if w.name != head.name]
        self.cfg = ray_cfg
        self.bootstrap_command = bootstrap_command
        self.ray = ray
        self.user_path = user_path
        self._node_options = node_options
        self._dashboard_url = dashboard_url
        self.api_timeout_s = api_timeout_s
        self.poll_interval_s = poll_interval_s
        self.last_source = ""  # "tunnel" or "ssh": where the last nodes() answer came from
        # Concurrent `ray start`s in join_workers. None: all at once (one VM each on GCP);
        # the emulator's hosts share a few cores, where 1-2 avoids raylet registration
        # timeouts under load.
        self._start_sem = asyncio.Semaphore(start_parallelism) if start_parallelism else None

    # addresses ---------------------------------------------------------------------------
    @property
    def gcs_address(self) -> str:
        return raycmd.gcs_address(self.head.ip, self.cfg.gcs_port)

    @property
    def hosts(self) -> list[HostEndpoint]:
        return [self.head, *self.workers]

    def set_hosts(self, head: HostEndpoint, workers: Sequence[HostEndpoint]) -> None:
        self.head = head
        self.workers = [w for w in workers if w.name != head.name]

    def set_dashboard_url(self, source: Callable[[], str | None] | None) -> None:
        self._dashboard_url = source

    def node_options(self, ep: HostEndpoint) -> raycmd.RayNodeOptions:
        if self._node_options is not None:
            return self._node_options(ep)
        return raycmd.RayNodeOptions(
            node_ip=ep.ip,
            num_cpus=self.cfg.num_cpus or None,
            resources=dict(self.cfg.resources),
            object_store_memory=self.cfg.object_store_mb * raycmd.MIB or None,
            memory=self.cfg.memory_mb * raycmd.MIB or None,
            node_name=ep.name,
            ray=self.ray,
            user_path=self.user_path,
        )

    def head_command(self) -> str:
        return raycmd.head_start_command(
            self.node_options(self.head),
            raycmd.RayHeadOptions(
                gcs_port=self.cfg.gcs_port,
                dashboard_port=self.cfg.dashboard_port,
                dashboard_host="127.0.0.1",
                client_server_port=self.cfg.client_port,
            ),
        )

    def worker_command(self, ep: HostEndpoint) -> str:
        return raycmd.worker_start_command(self.node_options(ep), self.gcs_address)

    def stop_command(self) -> str:
        return raycmd.stop_command(self.ray, force=True, user_path=self.user_path)

    @property
    def _graceful_stop(self) -> str:
        # SIGTERM lets a stale raylet unregister, so the GCS drops it at once instead of
        # listing it ALIVE (a false duplicate) until its health checks time out.
        return raycmd.stop_command(self.ray, force=False, user_path=self.user_path)

    # steps -------------------------------------------------------------------------------
    async def bootstrap(
        self,
        hosts: Iterable[str | int] | None = None,
        on_output: OutputCallback | None = None,
    ) -> dict[str, HostResult]:
        """Run the bootstrap command on ``hosts`` (default: every host, head included)."""
        return await self.ssh.run(self.bootstrap_command, hosts, on_output)

    async def start_head(
        self, on_output: OutputCallback | None = None, timeout_s: float = 120.0
    ) -> HostResult:
        """Start the head unless it is alive; wait until the state API lists it alive."""
        t0 = time.monotonic()
        try:
            if any(n.alive and n.ip == self.head.ip and n.is_head for n in await self.nodes()):
                return HostResult(
                    host=self.head.name,
                    ok=True,
                    exit_status=0,
                    elapsed_s=time.monotonic() - t0,
                    stdout_tail="Ray head already running\n",
                )
        except RayError:
            pass  # no head answering: start one
        # No `ray stop` here: a head whose dashboard merely hiccuped must not be killed with
        # its jobs. `ray start --head` refuses to start a second GCS on this address
        # ("already running"); then we only wait for the state API to answer again.
        res = await self.ssh.run_one(
            self.head.name,
            f"{self.head_command()} 2>&1",
            on_output,
            timeout_s=timeout_s,
        )
        if not res.ok and _ALREADY_RUNNING not in res.stdout_tail:
            return res
        try:
            await self.wait_alive([self.head.ip], timeout_s - (time.monotonic() - t0))
        except (RayError, TimeoutError) as exc:
            return replace(res, ok=False, error=f"{self.head.label}: {exc}")
        note = "Ray head already running\n" if _ALREADY_RUNNING in res.stdout_tail else ""
        return replace(
            res,
            ok=True,
            exit_status=0,
            error="",
            elapsed_s=time.monotonic() - t0,
            stdout_tail=note + res.stdout_tail,
        )

    async def join_workers(
        self,
        hosts: Iterable[str | int] | None = None,
        on_output: OutputCallback | None = None,
        timeout_s: float = 120.0,
        stale: Collection[str] = (),
        fresh: Collection[str] = (),
        parallelism: int | None = None,
    ) -> dict[str, HostResult]:
        """Join ``hosts`` (default: every worker) unless already alive in this cluster.

        ``parallelism``: at most this many ``ray start``s at once in this call (None: the
        ops' ``start_parallelism``).

        ``fresh``: hosts known to run no Ray (a new VM; Ray just force-stopped): they only
        ``ray start``, without first stopping whatever Ray a host might still run.

        ``stale``: node ids of raylets known dead (their VM was recreated) that the GCS may
        still list ALIVE until its health checks time out: they neither count as "already
        joined" nor satisfy the wait, so the fresh raylet starts at once instead of after
        the GCS lets go of the dead one. Hosts whose ``ray start`` gave up waiting for its
        node to register (a loaded box) are still waited for: the raylet usually comes up
        a little later. Raises RayError when the head's state API does not answer.
        """
        if parallelism is not None and parallelism < 1:
            raise ValueError(f"parallelism must be >= 1, got {parallelism}")
        t0 = time.monotonic()
        targets = [ep for ep in self.ssh.resolve(hosts) if ep.name != self.head.name]
        known = {ep.name for ep in self.workers}
        unknown = [ep.name for ep in targets if ep.name not in known]
        if unknown:
            raise ValueError(f"hosts {unknown} are not workers of this cluster")
        alive = alive_by_ip(await self.nodes(), ignore=stale)
        results: dict[str, HostResult] = {}
        todo = []
        for ep in targets:
            if alive.get(ep.ip, 0) == 1:
                results[ep.name] = HostResult(
                    host=ep.name, ok=True, exit_status=0, stdout_tail="already joined\n"
                )
            else:
                todo.append(ep)
        if todo:
            sem = asyncio.Semaphore(parallelism) if parallelism else self._start_sem
            runs = await asyncio.gather(
                *(
                    self._start_worker(ep, on_output, timeout_s, ep.name in fresh, sem)
                    for ep in todo
                )
            )
            for r in runs:
                results[r.host] = r
            waiting = [
                ep
                for ep in todo
                if results[ep.name].ok or _SLOW_REGISTRATION in results[ep.name].stdout_tail
            ]
            if waiting:
                left = max(1.0, timeout_s - (time.monotonic() - t0))
                try:
                    await self.wait_alive([ep.ip for ep in waiting], left, ignore=stale)
                    for ep in waiting:  # slow to register, but registered
                        results[ep.name] = replace(results[ep.name], ok=True, error="")
                except (RayError, TimeoutError) as exc:
                    live = alive_by_ip(await self._nodes_or_empty(), ignore=stale)
                    for ep in waiting:
                        r = results[ep.name]
                        if live.get(ep.ip, 0) >= 1:
                            results[ep.name] = replace(r, ok=True, error="")
                        else:
                            results[ep.name] = replace(r, ok=False, error=f"{ep.label}: {exc}")
        return {ep.name: results[ep.name] for ep in targets}

    async def _start_worker(
        self,
        ep: HostEndpoint,
        on_output: OutputCallback | None,
        timeout_s: float,
        fresh: bool = False,
        sem: asyncio.Semaphore | None = None,
    ) -> HostResult:
        command = f"{self.worker_command(ep)} 2>&1"
        if not fresh:
            command = f"{self._graceful_stop} >/dev/null 2>&1; {command}"
        if sem is None:
            return await self.ssh.run_one(ep.name, command, on_output, timeout_s=timeout_s)
        async with sem:
            return await self.ssh.run_one(ep.name, command, on_output, timeout_s=timeout_s)

    async def stop(self, hosts: Iterable[str | int] | None = None) -> dict[str, HostResult]:
        """``ray stop -f`` on ``hosts`` (default: all). Stopping a stopped host is ok."""
        return await self.ssh.run(f"{self.stop_command()} 2>&1", hosts)

    # state -------------------------------------------------------------------------------
    async def nodes(self) -> list[RayNodeInfo]:
        """All Ray nodes the head knows (alive and recently dead). Raises RayError."""
        url = self._dashboard_url() if self._dashboard_url is not None else None
        errors = []
        if url:
            try:
                body = await asyncio.to_thread(_fetch, url + _NODES_QUERY, self.api_timeout_s)
                self.last_source = "tunnel"
                return parse_nodes(body)
            except (OSError, urllib.error.URLError, ValueError) as exc:
                errors.append(f"via {url}: {_reason(exc)}")
        head_url = f"http://127.0.0.1:{self.cfg.dashboard_port}{_NODES_QUERY}"
        res = await self.ssh.run_one(
            self.head.name,
            ["python3", "-c", _FETCH_SCRIPT, head_url],
            timeout_s=self.api_timeout_s,
        )
        if res.ok:
            self.last_source = "ssh"
            try:
                return parse_nodes(res.stdout_tail)
            except ValueError as exc:
                errors.append(f"via {self.head.name}: unparseable answer ({exc})")
        else:
            last = res.stderr_tail.strip().splitlines()[-1:] or [res.error]
            errors.append(f"via {self.head.name}: {last[0]}")
        raise RayError("Ray state API not reachable: " + "; ".join(errors))

    async def _nodes_or_empty(self) -> list[RayNodeInfo]:
        try:
            return await self.nodes()
        except RayError:
            return []

    async def wait_alive(
        self, ips: Sequence[str], timeout_s: float, ignore: Collection[str] = ()
    ) -> list[RayNodeInfo]:
        """Poll until every IP in ``ips`` has a live Ray node (not one of ``ignore``);
        TimeoutError names the missing."""
        deadline = time.monotonic() + timeout_s
        last_error = ""
        while True:
            try:
                nodes = await self.nodes()
                live = alive_by_ip(nodes, ignore=ignore)
                missing = [ip for ip in ips if live.get(ip, 0) < 1]
                if not missing:
                    return nodes
                last_error = f"no live Ray node on {', '.join(missing)}"
            except RayError as exc:
                last_error = str(exc)
            if time.monotonic() >= deadline:
                raise TimeoutError(f"after {timeout_s:.0f}s: {last_error}")
            await asyncio.sleep(self.poll_interval_s)


def _reason(exc: BaseException) -> str:
    inner = getattr(exc, "reason", None)
    return str(inner if inner is not None else exc) or type(exc).__name__
