"""``ClusterServices``: the one ``ConsoleServices`` implementation, composed of the services.

    TpuProvider (TPU API) ─┐
    SshFanout (+ probes) ──┼─> observe() ─> PodSnapshot on the bus, Watchdog.on_observation
    RayOps (state API) ────┤
    JobService/JobWatcher ─┤   user intents (TUI keys, script lines) call the same methods
    CadenceTracker ────────┘   the watchdog's steps call (``_ClusterOps``)

``make_services(config)`` builds it. In local mode it starts the pod emulator if none runs
for ``cluster.run_dir`` and reads its ``PodInfo`` (TPU API address, SSH user/key, host
ports, bucket) — the only emulator-specific code here, besides the local TPU provider.

Three pollers run every ``recovery.poll_interval_s``: the pod (TPU state/health/symptoms,
SSH reachability of READY hosts, Ray node liveness per IP), the jobs (status transitions,
journaled) and metric cadence (offline W&B files under ``wandb.dir``). Each pod poll is
published as a ``PodSnapshot`` and fed to the ``Watchdog``.

What this console submitted is remembered in ``<state dir>/jobs.json`` (spec per job, the
sweep id once known, which job replaced which), so a job lost with a preempted head is
resubmitted with the same spec — sweeps with the same sweep id — even after a restart.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import re
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from console.config import Config, default_state_dir
from console.services import raycmd
from console.services.cadence import CadenceTracker, sources_from_config
from console.services.hostkeys import HostKeyEvent, HostKeyPolicy
from console.services.jobs import (
    ACTIVE,
    META_SWEEP_ID,
    JobError,
    JobService,
    JobWatcher,
)
from console.services.journal import AsyncJournal, Journal
from console.services.model import (
    ActionResult,
    Event,
    HostResult,
    HostState,
    HostStatus,
    JobInfo,
    LogLine,
    LogStreamClosed,
    PodSnapshot,
    Reachability,
    RecoveryStatus,
    RunCadence,
    Update,
    UpdateBus,
)
from console.services.ray import (
    RayError,
    RayNodeInfo,
    RayOps,
    alive_by_ip,
    default_bootstrap_command,
)
from console.services.ssh import HostEndpoint, SshFanout, ssh_identity
from console.services.submit import SubmitSpec
from console.services.tpu import LocalTpuProvider, NodeInfo, TpuApiError, TpuProvider
from console.services.tunnel import Tunnel, default_forwards
from console.services.watchdog import (
    LOST_STATES,
    HostObservation,
    Observation,
    Watchdog,
)

if TYPE_CHECKING:
    from console.emulator.client import PodInfo

log = logging.getLogger(__name__)

REPO_ROOT = Path(__file__).resolve().parents[2]
# Emulated hosts: the GCS declares a SIGKILLed raylet dead after ~4-8 s instead of Ray's
# default ~15-30 s, so a preempted worker's stale node does not hold up its rejoin.
LOCAL_RAY_ENV: Mapping[str, str] = {
    "RAY_health_check_initial_delay_ms": "0",
    "RAY_health_check_period_ms": "1000",
    "RAY_health_check_timeout_ms": "3000",  # generous: a busy 2-core box answers slowly
    "RAY_health_check_failure_threshold": "4",
}
_SWEEP_ID_RE = re.compile(r"(?:W&B sweep|starting sweep|resuming sweep) ([A-Za-z0-9_.-]+)")


# -- what this console submitted ----------------------------------------------------------------
@dataclass(frozen=True)
class SubmittedJob:
    job_id: str
    spec: SubmitSpec
    submitted_at: float
    actor: str = ""
    resubmitted_from: str = ""
    superseded_by: str = ""
    sweep_id: str = ""  # learned from the job (metadata or its log) when the spec had none

    def relaunch_spec(self) -> SubmitSpec:
        """The spec to submit again: same everything, the sweep id pinned, a fresh job id."""
        spec = dataclasses.replace(self.spec, submission_id="")
        sweep_id = self.spec.sweep_id or self.sweep_id
        if spec.mode == "sweep" and sweep_id:
            spec = spec.with_sweep_id(sweep_id)
        return spec


class JobRegistry:
    """Submitted jobs and their specs, persisted as JSON (atomic replace) in the state dir.

    Specs keep secrets as ``$NAME`` references (``SubmitSpec`` refuses inline secrets), so
    the file never holds a key.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._jobs: dict[str, SubmittedJob] = {}
        self._load()

    def _load(self) -> None:
        try:
            raw = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return
        except (OSError, ValueError) as exc:
            log.warning("job registry %s unreadable (%s); starting empty", self.path, exc)
            return
        known = {f.name for f in dataclasses.fields(SubmitSpec)}
        for row in raw.get("jobs", []):
            try:
                spec = SubmitSpec(**{k: v for k, v in row["spec"].items() if k in known})
                job = SubmittedJob(
                    job_id=str(row["job_id"]),
                    spec=spec,
                    submitted_at=float(row.get("submitted_at", 0.0)),
                    actor=str(row.get("actor", "")),
                    resubmitted_from=str(row.get("resubmitted_from", "")),
                    superseded_by=str(row.get("superseded_by", "")),
                    sweep_id=str(row.get("sweep_id", "")),
                )
            except (KeyError, TypeError, ValueError) as exc:
                log.warning("job registry %s: skipping a bad row (%s)", self.path, exc)
                continue
            self._jobs[job.job_id] = job

    def _save(self) -> None:
        rows = []
        for job in self._jobs.values():
            row = dataclasses.asdict(job)
            row["spec"] = dataclasses.asdict(job.spec)
            row["spec"]["runtime_env"] = dict(job.spec.runtime_env)
            rows.append(row)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"jobs": rows}, indent=1, default=str), encoding="utf-8")
        tmp.replace(self.path)

    def add(self, job: SubmittedJob) -> None:
        self._jobs[job.job_id] = job
        if job.resubmitted_from in self._jobs:
            old = self._jobs[job.resubmitted_from]
            self._jobs[old.job_id] = dataclasses.replace(old, superseded_by=job.job_id)
        self._save()

    def update(self, job_id: str, **changes: Any) -> None:
        if job_id in self._jobs:
            self._jobs[job_id] = dataclasses.replace(self._jobs[job_id], **changes)
            self._save()

    def get(self, job_id: str) -> SubmittedJob | None:
        return self._jobs.get(job_id)

    def __contains__(self, job_id: object) -> bool:
        return job_id in self._jobs

    def current(self) -> list[SubmittedJob]:
        """Jobs not replaced by a resubmission, oldest first."""
        jobs = [j for j in self._jobs.values() if not j.superseded_by]
        return sorted(jobs, key=lambda j: j.submitted_at)

    def all(self) -> list[SubmittedJob]:
        return sorted(self._jobs.values(), key=lambda j: j.submitted_at)


# -- the facade ---------------------------------------------------------------------------------
@dataclass
class _HostMemory:
    last_seen: float | None = None
    resources: Mapping[str, float] = field(default_factory=dict)


class ClusterServices:
    """``api.ConsoleServices`` over a real (gcp) or emulated (local) pod."""

    def __init__(
        self,
        config: Config,
        *,
        provider: TpuProvider,
        endpoints: Sequence[HostEndpoint],
        ssh_user: str,
        ssh_key: str | os.PathLike[str],
        state_dir: Path,
        journal: Journal,
        clock: Callable[[], float] = time.time,
        working_dir: str | os.PathLike[str] = REPO_ROOT,
        ray_env: Mapping[str, str] | None = None,
        pod_info: PodInfo | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self.config = config
        self.provider = provider
        self.pod_info = pod_info
        self.state_dir = state_dir
        self.working_dir = Path(working_dir)
        self._clock = clock
        self._environ = environ
        self.bus = UpdateBus()
        self.journal = journal
        self._ajournal = AsyncJournal(journal)
        self.registry = JobRegistry(state_dir / "jobs.json")
        # Where jobs write offline W&B runs and cadence reads them. On the emulator the
        # "hosts" share this machine's disk, so a state-dir default just works; on gcp the
        # runs live on the VMs and cadence comes from the W&B API (mode = "online").
        self.wandb_dir = config.wandb.dir or (str(state_dir / "wandb") if config.is_local else "")
        rec = config.recovery
        self.poll_interval_s = rec.poll_interval_s
        # A poll must finish in about one interval: a hung layer is reported as unknown.
        self.poll_budget_s = max(2.0, 2 * rec.poll_interval_s)

        known_hosts = config.ssh.known_hosts or str(state_dir / "known_hosts")
        self.host_keys = HostKeyPolicy(
            config.ssh.known_hosts_policy,
            known_hosts,
            api_keys=provider.host_keys,
            on_event=self._on_host_key,
        )
        self._ssh_user = ssh_user
        self._ssh_key = ssh_key
        self.ssh = SshFanout.from_config(
            config.ssh, endpoints, self.host_keys, user=ssh_user, key_path=ssh_key
        )
        # Reachability probes: no retries and a short connect timeout, so a poll of a
        # half-dead host costs one interval, not the action fan-out's patient retries.
        self.probe = SshFanout(
            endpoints,
            user=ssh_user,
            client_keys=[ssh_key],
            host_keys=self.host_keys,
            parallelism=config.ssh.parallelism,
            connect_timeout_s=min(config.ssh.connect_timeout_s, max(1.0, rec.poll_interval_s)),
            command_timeout_s=self.poll_budget_s,
            retries=0,
        )
        self.endpoints: list[HostEndpoint] = list(endpoints)
        ray_env = dict(LOCAL_RAY_ENV if config.is_local and ray_env is None else ray_env or {})
        self.ray_env = ray_env
        head = self.endpoints[0] if self.endpoints else HostEndpoint("head", "127.0.0.1")
        self.ray = RayOps(
            self.ssh,
            head=head,
            workers=self.endpoints[1:],
            ray_cfg=config.ray,
            bootstrap_command=default_bootstrap_command(config),
            user_path=not config.is_local,
            node_options=self._node_options,
            dashboard_url=self._tunnel_dashboard_url,
            # Steps (start_head, join_workers) ask the state API too, over SSH before the
            # tunnel is back; polls bound their own calls to poll_budget_s.
            api_timeout_s=max(10.0, self.poll_budget_s),
            poll_interval_s=min(0.5, rec.poll_interval_s),
        )
        forwards = default_forwards(config.ray)
        if config.is_local:
            # Emulated hosts share our loopback: the head's 127.0.0.1:<port> IS ours, so a
            # local end on the same port would collide with the dashboard itself.
            forwards = [(lh, 0 if lp == rp else lp, rh, rp) for lh, lp, rh, rp in forwards]
        self.tunnel = Tunnel(
            lambda: self.ssh.connect(self.ray.head.name),
            forwards,
            on_change=self._on_tunnel_change,
            backoff_initial_s=min(0.5, rec.poll_interval_s),
            backoff_max_s=max(2.0, rec.poll_interval_s * 2),
        )
        self._tunnel_wanted = False
        self.jobs = JobService(
            f"http://127.0.0.1:{config.ray.local_dashboard_port}",
            clock=clock,
            timeout_s=max(5.0, self.poll_budget_s),
        )
        self.job_watcher = JobWatcher(self.jobs, interval_s=rec.poll_interval_s)
        self.cadence_tracker = CadenceTracker(
            sources_from_config(replace(config.wandb, dir=self.wandb_dir), environ=environ),
            rec.stall_factor,
            clock=clock,
        )
        self._cadence: list[RunCadence] = []
        self._ops = _ClusterOps(self)
        self.watchdog = Watchdog(
            self._ops,
            publish=self.bus.publish,
            journal=self._ajournal,
            auto=rec.auto,
            poll_interval_s=rec.poll_interval_s,
            step_retries=rec.step_retries,
            ready_timeout_s=rec.ready_timeout_s,
            emit_stall_events=False,
            backoff_s=min(1.0, rec.poll_interval_s),
            clock=clock,
        )
        self._snapshot = PodSnapshot(
            at=clock(),
            provider=config.cluster.provider,
            node_name=config.cluster.node_name,
            accelerator_type=config.cluster.accelerator_type,
        )
        self._hosts_mem: dict[str, _HostMemory] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._background: set[asyncio.Task[Any]] = set()
        self._action_lock = asyncio.Lock()
        self._last_nodes: list[RayNodeInfo] = []
        self._last_jobs: dict[str, JobInfo] = {}
        self._started = False

    # -- wiring helpers ---------------------------------------------------------------------
    def _node_options(self, ep: HostEndpoint) -> raycmd.RayNodeOptions:
        cfg = self.config.ray
        return raycmd.RayNodeOptions(
            node_ip=ep.ip,
            num_cpus=cfg.num_cpus,
            resources=dict(cfg.resources),
            object_store_memory=cfg.object_store_mb * raycmd.MIB,
            node_name=ep.name,
            user_path=not self.config.is_local,
            env=self.ray_env,
        )

    def _tunnel_dashboard_url(self) -> str | None:
        if not self.tunnel.is_up:
            return None
        return self.tunnel.url(self.config.ray.dashboard_port)

    @property
    def head(self) -> HostEndpoint:
        return self.ray.head

    def _on_host_key(self, ev: HostKeyEvent) -> None:
        self._spawn_event(
            Event(
                at=self._clock(),
                kind="host_key",
                message=ev.message,
                host=ev.host,
                actor="ssh",
                data={
                    "ip": ev.ip,
                    "change": ev.kind,
                    "source": ev.source,
                    "old_fingerprint": ev.old_fingerprint,
                    "new_fingerprint": ev.new_fingerprint,
                },
            )
        )

    def _on_tunnel_change(self, up: bool, reason: str) -> None:
        if up:
            url = self._tunnel_dashboard_url()
            if url:
                self.jobs.set_address(url)
        self._spawn_event(
            Event(
                at=self._clock(),
                kind="tunnel_up" if up else "tunnel_down",
                message=reason,
                host=self.head.name,
                actor="tunnel",
            )
        )

    def _spawn(self, coro: Any) -> None:
        try:
            task = asyncio.get_running_loop().create_task(coro)
        except RuntimeError:
            coro.close()
            return
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def _spawn_event(self, ev: Event) -> None:
        self.bus.publish(ev)
        self._spawn(self._ajournal.record_event(ev))

    async def _record(self, result: ActionResult, actor: str) -> ActionResult:
        try:
            await self._ajournal.record_action(result, actor)
        except Exception:
            log.exception("journal: could not record %s", result.action)
        return result

    def _set_endpoints(self, endpoints: Sequence[HostEndpoint]) -> None:
        eps = list(endpoints)
        if not eps or eps == self.endpoints:
            return
        self.endpoints = eps
        self.ssh.set_endpoints(eps)
        self.probe.set_endpoints(eps)
        self.ray.set_hosts(eps[0], eps[1:])

    @contextlib.asynccontextmanager
    async def _user_action(self) -> AsyncIterator[None]:
        """One cluster-changing action at a time; a running recovery finishes first, and
        no auto recovery starts while the user reshapes the cluster."""
        async with self._action_lock:
            await self.watchdog.wait_idle()
            with self.watchdog.suspended():
                yield

    # -- lifecycle ----------------------------------------------------------------------------
    async def start(self) -> None:
        if self._started:
            return
        self._started = True
        try:
            await self.refresh()
        except Exception as exc:  # a cluster that is down at start is shown, not fatal
            log.warning("first poll failed: %s", exc)
        # A console restarted over a running cluster re-opens its window onto the head.
        if self._last_nodes and any(n.alive and n.is_head for n in self._last_nodes):
            self._tunnel_wanted = True
            with contextlib.suppress(Exception):
                await self._open_tunnel()
        self._tasks = [
            asyncio.create_task(self._loop(self._poll_pod, "pod"), name="phantom-poll-pod"),
            asyncio.create_task(self._loop(self._poll_jobs, "jobs"), name="phantom-poll-jobs"),
            asyncio.create_task(
                self._loop(self._poll_cadence, "cadence"), name="phantom-poll-cadence"
            ),
        ]

    async def stop(self) -> None:
        tasks, self._tasks = self._tasks, []
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        await self.watchdog.close()
        await self.watchdog.flush()
        if self._background:
            await asyncio.gather(*list(self._background), return_exceptions=True)
        await self.tunnel.close()
        await self.probe.close()
        await self.ssh.close()
        with contextlib.suppress(Exception):
            await self.provider.close()
        self._started = False

    def close_journal(self) -> None:
        self.journal.close()

    def subscribe(self, callback: Callable[[Update], None]) -> Callable[[], None]:
        return self.bus.subscribe(callback)

    async def _loop(self, poll: Callable[[], Any], name: str) -> None:
        while True:
            t0 = time.monotonic()
            try:
                await poll()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("%s poller failed", name)
            await asyncio.sleep(max(0.05, self.poll_interval_s - (time.monotonic() - t0)))

    async def _poll_pod(self) -> None:
        await self.refresh()

    async def _poll_jobs(self) -> None:
        if not self.tunnel.is_up:
            return
        try:
            async with asyncio.timeout(self.poll_budget_s):
                transitions = await self.job_watcher.poll()
        except (JobError, TimeoutError):
            return
        self._last_jobs = dict(self.job_watcher.known)
        for tr in transitions:
            self.bus.publish(tr.job)
            ev = tr.to_event(self._clock())
            if tr.job.job_id in self.registry:
                ev = dataclasses.replace(ev, actor="jobs")
            self._spawn_event(ev)
        for job in self._last_jobs.values():
            await self._learn_sweep_id(job)

    async def _learn_sweep_id(self, job: JobInfo) -> None:
        sub = self.registry.get(job.job_id)
        if sub is None or sub.spec.mode != "sweep" or sub.spec.sweep_id or sub.sweep_id:
            return
        sweep_id = job.metadata.get(META_SWEEP_ID, "")
        if not sweep_id and job.status in ACTIVE:
            with contextlib.suppress(JobError, TimeoutError):
                async with asyncio.timeout(self.poll_budget_s):
                    m = _SWEEP_ID_RE.search(await self.jobs.logs(job.job_id))
                sweep_id = m.group(1) if m else ""
        if sweep_id:
            self.registry.update(job.job_id, sweep_id=sweep_id)

    async def _poll_cadence(self) -> None:
        self._cadence = await self.cadence_tracker.apoll()
        for cad in self._cadence:
            self.bus.publish(cad)
        for tr in self.cadence_tracker.take_transitions():
            self._spawn_event(dataclasses.replace(tr.to_event(), actor="cadence"))

    # -- observing ------------------------------------------------------------------------------
    async def observe(self) -> Observation:
        """Every layer now (TPU API, SSH, Ray, jobs, cadence) -> one ``Observation``."""
        at = self._clock()
        node: NodeInfo | None = None
        tpu_error = ""
        try:
            async with asyncio.timeout(self.poll_budget_s):
                node = await self.provider.get_node()
        except (TpuApiError, TimeoutError) as exc:
            tpu_error = str(exc) or "TPU API did not answer"
        if node is not None and node.endpoints:
            self._set_endpoints(node.endpoints)
        eps = self.endpoints

        def state_of(ep: HostEndpoint) -> str:
            if node is None:
                return HostState.DELETED if not tpu_error else HostState.UNKNOWN
            return str(node.host_states.get(ep.index, HostState.UNKNOWN))

        states = {ep.name: state_of(ep) for ep in eps}
        # Probe what the API calls READY (or everything when the API is silent): a
        # preempted VM is known down and would only cost a connect timeout.
        to_probe = [ep.name for ep in eps if states[ep.name] in (HostState.READY, "UNKNOWN")]
        head_usable = states.get(self.head.name) in (HostState.READY, "UNKNOWN")

        async def probe() -> dict[str, HostResult]:
            if not to_probe:
                return {}
            try:
                async with asyncio.timeout(self.poll_budget_s):
                    return await self.probe.probe(to_probe, timeout_s=self.poll_budget_s)
            except TimeoutError:
                return {}

        async def ray_nodes() -> list[RayNodeInfo] | None:
            if not head_usable and not self.tunnel.is_up:
                return None
            try:
                async with asyncio.timeout(self.poll_budget_s):
                    return await self.ray.nodes()
            except (RayError, TimeoutError):
                return None

        async def job_list() -> list[JobInfo] | None:
            if not self.tunnel.is_up:
                return None
            try:
                async with asyncio.timeout(self.poll_budget_s):
                    return await self.jobs.list()
            except (JobError, TimeoutError):
                return None

        probes, nodes, jobs = await asyncio.gather(probe(), ray_nodes(), job_list())
        ray_reachable = nodes is not None
        if nodes is not None:
            self._last_nodes = nodes
        alive = alive_by_ip(nodes or [])
        now = self._clock()
        hosts = []
        for ep in eps:
            st = states[ep.name]
            pr = probes.get(ep.name)
            ssh_ok: bool | None = pr.ok if pr is not None else None
            if ssh_ok is None and st in LOST_STATES:
                ssh_ok = False
            mem = self._hosts_mem.setdefault(ep.name, _HostMemory())
            if ssh_ok or alive.get(ep.ip, 0):
                mem.last_seen = now
            for n in nodes or []:
                if n.ip == ep.ip and n.alive:
                    mem.resources = n.resources
            symptoms = tuple(
                s.details for s in (node.symptoms if node else ()) if s.worker_id == str(ep.index)
            )
            hosts.append(
                HostObservation(
                    name=ep.name,
                    ip=ep.ip,
                    tpu_state=st,
                    health=node.health if node else "",
                    symptoms=symptoms,
                    ssh_ok=ssh_ok,
                    ray_alive=alive.get(ep.ip, 0),
                    preempted_at=node.symptom_time(ep.index)
                    if node and st in LOST_STATES
                    else None,
                )
            )
        mine: tuple[JobInfo, ...] = ()
        if jobs is not None:
            mine = tuple(j for j in jobs if j.job_id in self.registry)
        stalled = tuple(c.run_id for c in self._cadence if c.stalled)
        obs = Observation(
            at=at,
            hosts=tuple(hosts),
            head=self.head.name,
            ray_reachable=ray_reachable,
            tunnel_up=self.tunnel.is_up if self._tunnel_wanted else None,
            jobs=mine,
            stalled_runs=stalled,
            error=tpu_error,
        )
        self._snapshot = self._make_snapshot(obs, node, nodes)
        return obs

    def _make_snapshot(
        self, obs: Observation, node: NodeInfo | None, nodes: list[RayNodeInfo] | None
    ) -> PodSnapshot:
        warnings: list[str] = []
        if obs.error:
            warnings.append(obs.error)
        hosts = []
        for i, h in enumerate(obs.hosts):
            mem = self._hosts_mem.get(h.name, _HostMemory())
            if h.tpu_state in LOST_STATES:
                when = ""
                if h.preempted_at:
                    when = f" at {time.strftime('%H:%M:%S', time.localtime(h.preempted_at))}"
                warnings.append(f"{h.name} ({h.ip}) {h.tpu_state.lower()}{when}")
            if h.ray_alive > 1:
                warnings.append(f"{h.ray_alive} live Ray nodes on {h.ip} ({h.name}): duplicate")
            if obs.ray_reachable:
                ray_state = "ALIVE" if h.ray_alive else ("DEAD" if _ip_known(nodes, h.ip) else "-")
            else:
                ray_state = "-"
            ssh = (
                Reachability.OK
                if h.ssh_ok
                else Reachability.DOWN
                if h.ssh_ok is False
                else Reachability.UNKNOWN
            )
            index = next((ep.index for ep in self.endpoints if ep.name == h.name), i)
            hosts.append(
                HostStatus(
                    index=index,
                    name=h.name,
                    ip=h.ip,
                    tpu_state=h.tpu_state,
                    health=h.health,
                    ray_state=ray_state,
                    ray_nodes=h.ray_alive,
                    ssh=ssh,
                    resources=dict(mem.resources),
                    last_seen=mem.last_seen,
                )
            )
        if obs.tunnel_up is False:
            reason = self.tunnel.last_error or "not connected"
            warnings.append(f"tunnel to the head down ({reason})")
        if not obs.ray_reachable and self.watchdog.armed:
            warnings.append(f"Ray GCS on the head ({self.head.name}) does not answer")
        stalled = [c.name or c.run_id for c in self._cadence if c.stalled]
        if stalled:
            warnings.append(f"metrics stalled: {', '.join(stalled)}")
        return PodSnapshot(
            at=obs.at,
            provider=self.config.cluster.provider,
            node_name=self.config.cluster.node_name,
            accelerator_type=(node.accelerator_type if node else "")
            or self.config.cluster.accelerator_type,
            tpu_state=node.state if node else ("UNKNOWN" if obs.error else "NOT_FOUND"),
            health=node.health if node else "",
            hosts=tuple(hosts),
            tunnel_up=bool(obs.tunnel_up),
            dashboard_url=self._tunnel_dashboard_url() or "",
            warnings=tuple(warnings),
        )

    # -- state (ConsoleServices) ------------------------------------------------------------------
    def snapshot(self) -> PodSnapshot:
        return self._snapshot

    async def refresh(self) -> PodSnapshot:
        obs = await self.observe()
        self.bus.publish(self._snapshot)
        await self.watchdog.on_observation(obs)
        return self._snapshot

    def recovery_status(self) -> RecoveryStatus:
        return self.watchdog.status

    def cadence(self) -> list[RunCadence]:
        return list(self._cadence)

    async def events(self, limit: int = 500, kinds: Sequence[str] | None = None) -> list[Event]:
        return await self._ajournal.query(limit=limit, kinds=kinds)

    # -- actions ---------------------------------------------------------------------------------
    async def wait_ready(self, timeout_s: float, actor: str = "user") -> ActionResult:
        async with self._user_action():
            return await self._record(await self._ops.wait_ready(None, timeout_s), actor)

    async def bootstrap(
        self, hosts: Sequence[str] | None = None, actor: str = "user"
    ) -> ActionResult:
        async with self._user_action():
            return await self._record(await self._ops.bootstrap(hosts), actor)

    async def ray_up(self, actor: str = "user") -> ActionResult:
        async with self._user_action():
            t0 = time.monotonic()
            head = await self._ops.start_head()
            per_host = dict(head.per_host)
            ok = head.ok
            message = head.message
            if head.ok:
                todo = [ep.name for ep in self.ray.workers]
                # `ray start` gives a raylet 30 s to register; on a loaded machine some miss
                # it. The join is idempotent, so the hosts that failed are simply retried.
                for attempt in range(self.config.recovery.step_retries + 1):
                    if attempt:
                        await asyncio.sleep(min(1.0, self.poll_interval_s) * 2 ** (attempt - 1))
                    workers = await self._ops.join_workers(todo)
                    per_host.update(workers.per_host)
                    todo = [h for h, r in workers.per_host.items() if not r.ok]
                    if not todo:
                        break
                ok = all(r.ok for r in per_host.values())
                message = "" if ok else workers.message
            if ok:
                self.watchdog.arm()
            res = ActionResult(
                action="ray_up",
                ok=ok,
                elapsed_s=time.monotonic() - t0,
                per_host=per_host,
                message=message or _summary("ray_up", per_host, ok),
            )
            return await self._record(res, actor)

    async def open_tunnel(self, actor: str = "user") -> ActionResult:
        async with self._user_action():
            return await self._record(await self._ops.open_tunnel(), actor)

    async def _open_tunnel(self) -> None:
        try:
            await self.tunnel.open()
        finally:
            self._tunnel_wanted = True  # from now on a closed tunnel is a problem to show
        self.tunnel.start()
        url = self._tunnel_dashboard_url()
        if url:
            self.jobs.set_address(url)

    async def submit(self, spec: SubmitSpec, actor: str = "user") -> JobInfo:
        spec = spec.checked()
        if not self.tunnel.is_up:
            res = await self.open_tunnel(actor)
            if not res.ok:
                raise JobError(
                    f"cannot submit: the tunnel to the head is down ({res.message}); "
                    "is Ray up? (`ray up` / `recover`)"
                )
        return await self._submit(spec, actor)

    @property
    def storage_uri(self) -> str:
        """Checkpoint storage every node reaches: config.storage, else the emulator's bucket."""
        if self.config.storage:
            return self.config.storage
        return self.pod_info.bucket_uri if self.pod_info is not None else ""

    def _job_defaults(self, spec: SubmitSpec) -> SubmitSpec:
        """Shared storage for checkpoints and, on the emulator (same machine), the W&B dir
        the cadence service reads; a user's own runtime-env values win."""
        if not spec.storage and self.storage_uri:
            spec = replace(spec, storage=self.storage_uri)
        if self.config.is_local and self.wandb_dir:
            env = dict(spec.runtime_env)
            env_vars = dict(env.get("env_vars") or {})
            env_vars.setdefault("WANDB_DIR", str(Path(self.wandb_dir).expanduser()))
            env["env_vars"] = env_vars
            spec = replace(spec, runtime_env=env)
        return spec

    async def _submit(self, spec: SubmitSpec, actor: str, resubmitted_from: str = "") -> JobInfo:
        t0 = time.monotonic()
        spec = self._job_defaults(spec)
        try:
            info = await self.jobs.submit(spec, working_dir=self.working_dir, environ=self._environ)
        except Exception as exc:
            await self._record(
                ActionResult(
                    action="submit",
                    ok=False,
                    elapsed_s=time.monotonic() - t0,
                    message=f"submit failed: {exc}",
                    data={"entrypoint": spec.entrypoint(), "mode": spec.mode},
                ),
                actor,
            )
            raise
        self.registry.add(
            SubmittedJob(
                job_id=info.job_id,
                spec=spec,
                submitted_at=self._clock(),
                actor=actor,
                resubmitted_from=resubmitted_from,
                sweep_id=spec.sweep_id,
            )
        )
        data: dict[str, Any] = {
            "job_id": info.job_id,
            "mode": spec.mode,
            "entrypoint": spec.entrypoint(),
        }
        if resubmitted_from:
            data["resubmitted_from"] = resubmitted_from
        if spec.sweep_id:
            data["sweep_id"] = spec.sweep_id
        what = f"resubmitted {resubmitted_from} as" if resubmitted_from else "submitted"
        await self._record(
            ActionResult(
                action="submit",
                ok=True,
                elapsed_s=time.monotonic() - t0,
                message=f"{what} job {info.job_id}: {spec.entrypoint()}",
                data=data,
            ),
            actor,
        )
        self.bus.publish(info)
        return info

    async def list_jobs(self) -> list[JobInfo]:
        return await self.jobs.list()

    async def job_status(self, job_id: str) -> JobInfo:
        return await self.jobs.status(job_id)

    async def stop_job(self, job_id: str, actor: str = "user") -> ActionResult:
        t0 = time.monotonic()
        try:
            was_running = await self.jobs.stop(job_id)
        except JobError as exc:
            res = ActionResult(
                action="stop_job",
                ok=False,
                elapsed_s=time.monotonic() - t0,
                message=str(exc),
                data={"job_id": job_id},
            )
            await self._record(res, actor)
            raise
        msg = f"stop requested for job {job_id}" if was_running else f"job {job_id} was not running"
        return await self._record(
            ActionResult(
                action="stop_job",
                ok=True,
                elapsed_s=time.monotonic() - t0,
                message=msg,
                data={"job_id": job_id, "was_running": was_running},
            ),
            actor,
        )

    def follow_logs(self, job_id: str) -> AsyncIterator[LogLine | LogStreamClosed]:
        return self.jobs.follow(job_id)

    async def job_logs(self, job_id: str) -> str:
        return await self.jobs.logs(job_id)

    async def recover(self, actor: str = "user", timeout_s: float | None = None) -> RecoveryStatus:
        return await self.watchdog.recover(actor=actor, timeout_s=timeout_s)

    def set_auto_recovery(self, enabled: bool, actor: str = "user") -> None:
        self.watchdog.set_auto(enabled, actor=actor)

    async def relaunch_sweep(self, actor: str = "user") -> JobInfo:
        """Stop the newest sweep job if it still runs, submit it again with the same sweep id."""
        sweeps = [j for j in self.registry.current() if j.spec.mode == "sweep"]
        if not sweeps:
            raise ValueError("no sweep was submitted from this console; submit one first")
        last = sweeps[-1]
        with contextlib.suppress(JobError):
            if (await self.jobs.status(last.job_id)).status in ACTIVE:
                await self.stop_job(last.job_id, actor)
        return await self._submit(last.relaunch_spec(), actor, resubmitted_from=last.job_id)

    async def teardown(self, actor: str = "user") -> ActionResult:
        async with self._user_action():
            t0 = time.monotonic()
            self.watchdog.disarm()
            stopped = await self._stop_active_jobs()
            self._tunnel_wanted = False
            await self.tunnel.close()
            snap = self._snapshot
            live = [h.name for h in snap.hosts if h.tpu_state == HostState.READY] or None
            per_host = await self.ray.stop(live)
            ok = all(r.ok for r in per_host.values())
            jobs_note = f"; stopped job(s) {', '.join(stopped)}" if stopped else ""
            res = ActionResult(
                action="teardown",
                ok=ok,
                elapsed_s=time.monotonic() - t0,
                per_host=per_host,
                message=_summary("ray stop -f", per_host, ok) + "; tunnel closed" + jobs_note,
                data={"stopped_jobs": stopped},
            )
            return await self._record(res, actor)

    async def _stop_active_jobs(self, timeout_s: float = 20.0) -> list[str]:
        """Stop every running job before Ray goes: `ray stop -f` kills Ray's processes,
        not a job's entrypoint (its own process group), which would outlive the cluster."""
        if not self.tunnel.is_up:
            return []
        try:
            active = [j.job_id for j in await self.jobs.list() if j.status in ACTIVE]
        except JobError:
            return []
        for job_id in active:
            with contextlib.suppress(JobError):
                await self.jobs.stop(job_id)
        deadline = time.monotonic() + timeout_s
        pending = set(active)
        while pending and time.monotonic() < deadline:
            for job_id in list(pending):
                with contextlib.suppress(JobError):
                    if (await self.jobs.status(job_id)).status not in ACTIVE:
                        pending.discard(job_id)
            if pending:
                await asyncio.sleep(0.5)
        return active

    async def trust_host(self, host: str, actor: str = "user") -> ActionResult:
        """Accept a host's current SSH host key (after a deliberate VM recreate).

        The key comes from the TPU API's guest attributes when published, else from the
        server itself; the old known_hosts entry is replaced and the action journaled."""
        t0 = time.monotonic()
        ep = self.ssh.endpoint(host)
        try:
            message = await self.ssh.trust(ep.name)
            ok = True
        except (OSError, TimeoutError, ValueError) as exc:
            message, ok = f"could not read the host key of {ep.name} ({ep.ip}): {exc}", False
        res = ActionResult(
            action="trust",
            ok=ok,
            elapsed_s=time.monotonic() - t0,
            per_host={ep.name: HostResult(host=ep.name, ok=ok, error="" if ok else message)},
            message=message,
        )
        return await self._record(res, actor)

    async def preempt(self, host: str, actor: str = "user") -> ActionResult:
        provider = self._local_provider("preempt")
        ep = self.ssh.endpoint(host)
        t0 = time.monotonic()
        await provider.preempt(ep.index)
        return await self._record(
            ActionResult(
                action="preempt",
                ok=True,
                elapsed_s=time.monotonic() - t0,
                per_host={ep.name: HostResult(host=ep.name, ok=True)},
                message=f"preempted {ep.name} ({ep.ip})",
            ),
            actor,
        )

    async def recreate(self, host: str, actor: str = "user") -> ActionResult:
        self._local_provider("recreate")
        ep = self.ssh.endpoint(host)
        return await self._record(await self._ops.recreate([ep.name]), actor)

    def _local_provider(self, what: str) -> LocalTpuProvider:
        if not isinstance(self.provider, LocalTpuProvider):
            raise ValueError(
                f"{what} is only available with cluster.provider = 'local' (the emulator); "
                f"this console drives provider {self.config.cluster.provider!r}"
            )
        return self.provider


def _ip_known(nodes: Sequence[RayNodeInfo] | None, ip: str) -> bool:
    return any(n.ip == ip for n in nodes or [])


def _summary(action: str, per_host: Mapping[str, HostResult], ok: bool) -> str:
    good = sum(1 for r in per_host.values() if r.ok)
    bad = [r.error or r.host for r in per_host.values() if not r.ok]
    text = f"{action}: {good}/{len(per_host)} hosts ok"
    if bad and not ok:
        text += f" ({bad[0]}{' ...' if len(bad) > 1 else ''})"
    return text


def _result(
    action: str, per_host: Mapping[str, HostResult], elapsed_s: float, **kw: Any
) -> ActionResult:
    ok = bool(per_host) and all(r.ok for r in per_host.values())
    return ActionResult(
        action=action,
        ok=ok,
        elapsed_s=elapsed_s,
        per_host=dict(per_host),
        message=kw.pop("message", "") or _summary(action, per_host, ok),
        **kw,
    )


# -- the watchdog's steps, on the real cluster -----------------------------------------------------
class _ClusterOps:
    """``watchdog.RecoveryOps`` implemented with the facade's services."""

    def __init__(self, svc: ClusterServices) -> None:
        self.svc = svc
        self.recreated_at: dict[str, float] = {}

    async def observe(self) -> Observation:
        return await self.svc.observe()

    async def recreate(self, hosts: Sequence[str]) -> ActionResult:
        svc = self.svc
        t0 = time.monotonic()
        eps = svc.ssh.resolve(hosts)
        try:
            done = await svc.provider.recreate([ep.index for ep in eps])
        except (TpuApiError, ValueError, OSError) as exc:
            return ActionResult(
                action="recreate",
                ok=False,
                elapsed_s=time.monotonic() - t0,
                per_host={
                    ep.name: HostResult(host=ep.name, ok=False, error=str(exc)) for ep in eps
                },
                message=str(exc),
            )
        except Exception as exc:  # the emulator's control socket speaks its own errors
            return ActionResult(
                action="recreate",
                ok=False,
                elapsed_s=time.monotonic() - t0,
                message=f"recreate failed: {exc}",
            )
        names = [ep.name for ep in svc.endpoints if ep.index in set(done)]
        now = time.monotonic()
        for name in names:
            self.recreated_at[name] = now
            svc.ssh.drop(name)  # the old VM's connection is dead; its host key is gone too
            svc.probe.drop(name)
        return _result(
            "recreate",
            {n: HostResult(host=n, ok=True) for n in names},
            time.monotonic() - t0,
            data={"hosts": names},
            message=f"recreated {', '.join(names)}",
        )

    async def wait_ready(self, hosts: Sequence[str] | None, timeout_s: float) -> ActionResult:
        svc = self.svc
        t0 = time.monotonic()
        names = list(hosts) if hosts is not None else [ep.name for ep in svc.endpoints]
        try:
            node = await svc.provider.wait_ready(timeout_s)
        except (TimeoutError, TpuApiError) as exc:
            return _result(
                "wait_ready",
                {n: HostResult(host=n, ok=False, error=str(exc)) for n in names},
                time.monotonic() - t0,
                message=str(exc),
            )
        svc._set_endpoints(node.endpoints)
        return _result(
            "wait_ready",
            {n: HostResult(host=n, ok=True) for n in names},
            time.monotonic() - t0,
            message=node.summary(),
        )

    async def bootstrap(self, hosts: Sequence[str] | None) -> ActionResult:
        t0 = time.monotonic()
        try:
            per_host = await self.svc.ray.bootstrap(hosts)
        except ValueError as exc:
            return ActionResult(
                action="bootstrap", ok=False, elapsed_s=time.monotonic() - t0, message=str(exc)
            )
        return _result("bootstrap", per_host, time.monotonic() - t0)

    async def start_head(self) -> ActionResult:
        svc = self.svc
        t0 = time.monotonic()
        res = await svc.ray.start_head()
        if res.ok:
            svc.jobs.reset()  # a new head: reconnect the jobs client on the next call
        return _result("start_head", {res.host: res}, time.monotonic() - t0)

    async def join_workers(self, hosts: Sequence[str]) -> ActionResult:
        svc = self.svc
        t0 = time.monotonic()
        eps = svc.ssh.resolve(hosts)
        try:
            await self._wait_stale_nodes_gone([ep for ep in eps if ep.name in self.recreated_at])
            if svc.config.is_local:
                # Every emulated host shares this machine's cores: raylets started together
                # compete, and `ray start` gives each only 30 s to register. One at a time.
                per_host = {}
                for ep in eps:
                    per_host.update(await svc.ray.join_workers([ep.name]))
            else:
                per_host = await svc.ray.join_workers([ep.name for ep in eps])
        except (RayError, ValueError) as exc:
            return ActionResult(
                action="join_workers",
                ok=False,
                elapsed_s=time.monotonic() - t0,
                per_host={
                    ep.name: HostResult(host=ep.name, ok=False, error=str(exc)) for ep in eps
                },
                message=str(exc),
            )
        for ep in eps:
            if per_host.get(ep.name) is not None and per_host[ep.name].ok:
                self.recreated_at.pop(ep.name, None)
        return _result("join_workers", per_host, time.monotonic() - t0)

    async def _wait_stale_nodes_gone(self, eps: Sequence[HostEndpoint]) -> None:
        """A recreated VM runs no Ray yet, so a live node on its IP is the killed raylet the
        GCS has not declared dead; joining now would look "already joined" and then vanish.
        Wait (bounded by Ray's failure detection) until the GCS lets go of it."""
        if not eps:
            return
        deadline = time.monotonic() + 90.0
        while time.monotonic() < deadline:
            try:
                live = alive_by_ip(await self.svc.ray.nodes())
            except RayError:
                return  # no head to ask: join_workers will say so
            stale = [ep.ip for ep in eps if live.get(ep.ip, 0)]
            if not stale:
                return
            await asyncio.sleep(min(0.5, self.svc.poll_interval_s))

    async def open_tunnel(self) -> ActionResult:
        svc = self.svc
        t0 = time.monotonic()
        try:
            await svc._open_tunnel()  # idempotent; watch() may have re-opened it already
        except Exception as exc:  # SshError, TunnelError, OSError: all one-line reasons
            return ActionResult(
                action="open_tunnel",
                ok=False,
                elapsed_s=time.monotonic() - t0,
                message=f"tunnel to {svc.head.label}: {exc}",
            )
        url = svc._tunnel_dashboard_url() or ""
        return ActionResult(
            action="open_tunnel",
            ok=True,
            elapsed_s=time.monotonic() - t0,
            message=f"tunnel up: dashboard at {url}",
            data={"dashboard_url": url},
        )

    async def resubmit(self, job_ids: Sequence[str]) -> ActionResult:
        svc = self.svc
        t0 = time.monotonic()
        per_job: dict[str, HostResult] = {}
        mapping: dict[str, str] = {}
        for old in job_ids:
            sub = svc.registry.get(old)
            if sub is None:
                per_job[old] = HostResult(
                    host=old, ok=False, error=f"job {old}: no spec recorded, cannot resubmit"
                )
                continue
            if sub.superseded_by:  # an earlier attempt of this step already did it
                mapping[old] = sub.superseded_by
                per_job[old] = HostResult(host=old, ok=True, stdout_tail=sub.superseded_by)
                continue
            try:
                info = await svc._submit(sub.relaunch_spec(), "watchdog", resubmitted_from=old)
            except Exception as exc:
                per_job[old] = HostResult(host=old, ok=False, error=f"job {old}: {exc}")
                continue
            mapping[old] = info.job_id
            per_job[old] = HostResult(host=old, ok=True, stdout_tail=info.job_id)
        return _result(
            "resubmit",
            per_job,
            time.monotonic() - t0,
            data={"resubmitted": mapping},
            message=", ".join(f"{o} -> {n}" for o, n in mapping.items()),
        )


# -- the factory ----------------------------------------------------------------------------------
def make_services(
    config: Config,
    *,
    clock: Callable[[], float] = time.time,
    state_dir: str | os.PathLike[str] | None = None,
    journal_path: str | os.PathLike[str] | None = None,
    autostart_pod: bool = True,
    working_dir: str | os.PathLike[str] | None = None,
    ray_env: Mapping[str, str] | None = None,
    environ: Mapping[str, str] | None = None,
) -> ClusterServices:
    """The real services for ``config``.

    local: the emulator for ``cluster.run_dir`` (started with ``cluster.hosts`` hosts on
    free ports when none runs and ``autostart_pod``); its PodInfo supplies the TPU API
    address, SSH user, key and ports. gcp: Google's API (``cluster.api_endpoint`` to
    override), ``ssh.user``/``ssh.key`` or ``$USER`` and ``~/.ssh/google_compute_engine``.
    Raises ValueError naming the setting to fix.
    """
    from console.services.tpu import make_provider

    sdir = Path(state_dir) if state_dir is not None else default_state_dir()
    sdir.mkdir(parents=True, exist_ok=True)
    journal = Journal(
        journal_path if journal_path is not None else sdir / "journal.sqlite",
        secret_env=("WANDB_API_KEY", config.wandb.api_key_env),
        clock=clock,
    )
    pod_info: PodInfo | None = None
    if config.is_local:
        pod_info = _local_pod(config, autostart_pod)
        provider = make_provider(config, pod_info)
        endpoints = [HostEndpoint(h.name, h.ip, h.ssh_port, h.index) for h in pod_info.hosts]
    else:
        provider = make_provider(config)
        endpoints = []  # the first GetNode reports the workers' addresses
    user, key = ssh_identity(config, pod_info)
    try:
        return ClusterServices(
            config,
            provider=provider,
            endpoints=endpoints,
            ssh_user=user,
            ssh_key=key,
            state_dir=sdir,
            journal=journal,
            clock=clock,
            working_dir=working_dir if working_dir is not None else REPO_ROOT,
            ray_env=ray_env,
            pod_info=pod_info,
            environ=environ,
        )
    except BaseException:
        journal.close()
        raise


def _local_pod(config: Config, autostart: bool) -> PodInfo:
    from console.emulator import client as pod_client
    from console.emulator.layout import default_run_dir

    run_dir = Path(config.cluster.run_dir).expanduser() if config.cluster.run_dir else None
    run_dir = run_dir or default_run_dir()
    info = pod_client.pod_status(run_dir)
    if info is None:
        if not autostart:
            raise ValueError(
                f"no pod emulator is running for {run_dir}; start it with "
                f"`phantom pod up` (cluster.run_dir = {str(run_dir)!r})"
            )
        info = pod_client.start_pod(run_dir, hosts=config.cluster.hosts, ssh_port=0, api_port=0)
    if len(info.hosts) != config.cluster.hosts:
        log.warning(
            "the emulator at %s has %d hosts, the config says cluster.hosts = %d",
            run_dir,
            len(info.hosts),
            config.cluster.hosts,
        )
    return info


__all__ = [
    "ClusterServices",
    "JobRegistry",
    "SubmittedJob",
    "make_services",
]
