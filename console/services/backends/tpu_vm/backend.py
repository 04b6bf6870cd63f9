"""``TpuVmBackend``: a TPU VM pod with Ray (seed 000), behind the backend seam.

It observes the pod (``observe.PodObserver``), runs its jobs on Ray through the tunnel,
brings Ray up and down (``PodActions``) and offers the recovery steps of
``tpu_vm.recovery`` (it implements their ``PodOps``). Host-key changes and the tunnel going
up or down are events, emitted through the ``EventSink`` like every other.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from console.services.backends.tpu_vm import CAPABILITIES
from console.services.backends.tpu_vm.ask import ask_command, asked_result
from console.services.backends.tpu_vm.capacity import Attempt
from console.services.backends.tpu_vm.doubt import Doubt
from console.services.backends.tpu_vm.drain import let_noticed_hosts_go
from console.services.backends.tpu_vm.endpoints import HostEndpoint
from console.services.backends.tpu_vm.heard import Heard
from console.services.backends.tpu_vm.hostkeys import HostKeyEvent
from console.services.backends.tpu_vm.jobs import DashboardUnreachableError, JobError
from console.services.backends.tpu_vm.notice import MIGRATE, NoticeWatcher
from console.services.backends.tpu_vm.observe import PodObserver
from console.services.backends.tpu_vm.parts import PodAccess, PodParts
from console.services.backends.tpu_vm.ray import RayError
from console.services.backends.tpu_vm.raycmd import JOB_STOP_WAIT_S
from console.services.backends.tpu_vm.recovery import pod_plan
from console.services.backends.tpu_vm.settings import TpuVmSettings
from console.services.backends.tpu_vm.stragglers import (
    merge_stopped,
    read_stragglers,
    stragglers_command,
)
from console.services.backends.tpu_vm.tpu import TpuApiError
from console.services.cadence.sources import CadenceSource
from console.services.cadence.tracker import sources_from_config
from console.services.errors import JobsUnavailable
from console.services.jobs.env import check_job_env
from console.services.jobs.spec import SubmitSpec
from console.services.model import (
    ACTIVE_JOBS,
    LOST_STATES,
    ActionResult,
    Event,
    EventKind,
    HostResult,
    HostState,
    JobInfo,
    LogLine,
    LogStreamClosed,
    Resubmit,
)
from console.services.observation import Observation
from console.services.record.sink import EventSink
from console.services.recovery.notes import step_note
from console.services.recovery.runner import Plan

LOOK_AGAIN_S = 0.25  # re-poll while a host that dropped its connection still looks READY
API_WATCH_S = 0.03  # ... and between those polls, read the TPU API alone this often


class TpuVmBackend:
    capabilities = CAPABILITIES

    def __init__(
        self,
        settings: TpuVmSettings,
        access: PodAccess,
        *,
        sink: EventSink,
        state_dir: Path,
        working_dir: str | os.PathLike[str],
        clock: Callable[[], float] = time.time,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self.settings = settings
        self.provider = settings.provider
        self.access = access
        self.rejoin_parallelism = access.rejoin_parallelism  # a benchmark may compare
        self.working_dir = Path(working_dir)
        self._sink = sink
        self._clock = clock
        self._environ = environ
        self.parts = PodParts(
            settings,
            access,
            state_dir=state_dir,
            clock=clock,
            on_host_key=self._on_host_key,
            on_tunnel_change=self._on_tunnel_change,
        )
        self._wake: Callable[[], None] = _nothing
        self.notices = NoticeWatcher(
            self.parts.ssh, self._on_notice, on_maintenance=self._on_maintenance, clock=clock
        )
        # When each host's connection dropped from the far end (wall clock): on the gcp path
        # the first word of an abrupt loss, and its date (the API gives the loss none).
        self.dropped_at: dict[str, float] = {}
        self.observer = PodObserver(
            self.parts, self.notices.notices, self.dropped_at, self.notices.reasons
        )
        self.heard = Heard(self.notices.notices, self.notices.reasons)  # hard news between polls
        self.parts.ssh.on_lost = self.parts.probe.on_lost = self._on_connection_lost
        self.job_env = {**settings.job_env, **access.job_env}
        self._last: Observation | None = None
        # Hosts that run no Ray for certain (VM just recreated, Ray just force-stopped): a
        # rejoin only starts it, sparing the `ray stop` (a Python start-up) before.
        self._no_ray: set[str] = set()
        self.doubt = Doubt()  # hosts whose SSH dropped while the API still says READY
        self._api_watch: asyncio.Task[None] | None = None
        self._closed = False

    # -- the seam ---------------------------------------------------------------------------
    async def start(self) -> None:
        # A console restarted over a running cluster re-opens its window onto the head.
        if self._head_alive():
            with contextlib.suppress(Exception):
                await self._open_tunnel()

    async def close(self) -> None:
        self._closed = True
        if self._api_watch is not None:
            self._api_watch.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._api_watch
        await self.notices.close()
        await self.parts.close()

    def set_wakeup(self, wake: Callable[[], None]) -> None:
        self._wake = wake

    @property
    def news_count(self) -> int:
        return self.heard.count

    def with_news(self, obs: Observation, at: float | None = None) -> Observation:
        return self.heard.over(obs, at)

    async def observe(self) -> Observation:
        began = self._clock()
        before = self._last
        obs = await self.observer.observe(began)
        self.heard.polled(began)  # its API read stands for what was heard before it began
        self._last = obs = self.heard.over(obs)  # ... not for what was heard since
        for h in obs.hosts:  # a drop the host came back from (a blip) dates no later loss
            dropped = self.dropped_at.get(h.name)
            if dropped is not None and dropped < began and h.ssh_ok:
                del self.dropped_at[h.name]
        if self.settings.watch_notices:
            # A watcher starts on every host that is up and answering (a notice comes only
            # to a live VM; the replacement of a preempted one gets its own once it answers)
            # and lasts while the API says the VM is there: a probe that timed out (a loaded
            # pod of a thousand hosts) does not stop it, it retries on its own.
            there = (HostState.READY, HostState.UNKNOWN)
            self.notices.watch(
                (h.name for h in obs.hosts if h.ssh_ok and h.notice_at is None),
                keep=(h.name for h in obs.hosts if h.tpu_state in there),
            )
        doubtful = self._look_again_soon(obs, before)
        if doubtful:
            # The detector waits for the API's word on these before it confirms a soft loss.
            obs = self._last = replace(obs, settling=doubtful)
        return obs

    def _look_again_soon(self, obs: Observation, before: Observation | None) -> tuple[str, ...]:
        """The hosts in doubt after ``obs`` (``doubt.Doubt``): while one is, watch the API
        (and look again every ``LOOK_AGAIN_S``) instead of an interval. Returns them."""
        doubtful = self.doubt.review(obs, before)
        if doubtful:
            self._start_api_watch()
        return tuple(doubtful)

    def _start_api_watch(self) -> None:
        if self._closed:
            return
        if self._api_watch is None or self._api_watch.done():
            self._api_watch = asyncio.create_task(self._watch_api(), name="phantom-watch-tpu-api")

    async def _watch_api(self) -> None:
        """While a host that dropped its connection is still READY, read the TPU API alone
        every ``API_WATCH_S`` (one GetNode: no probe, no Ray) and wake the poll the moment
        the API calls it anything else, or every ``LOOK_AGAIN_S`` all the same: detection
        follows the API's word within tens of milliseconds, not a poll's interval."""
        loop = asyncio.get_running_loop()
        last_wake = loop.time()
        while self.doubt:
            doubtful = self.doubt.open()
            if not doubtful:
                return
            try:
                async with asyncio.timeout(max(API_WATCH_S, self.parts.poll_budget_s / 2)):
                    node = await self.parts.provider.get_node()
            except (TpuApiError, TimeoutError):
                node = None
            index = {ep.name: ep.index for ep in self.parts.endpoints}
            if node is not None:
                read_at = self._clock()  # after the read: a poll begun later reads it too
                for n in doubtful:
                    st = node.host_states.get(index[n], "") if n in index else ""
                    if st in LOST_STATES:  # the provider's word: news to journal at once
                        when = node.symptom_time(index[n]) or self.dropped_at.get(n)
                        self.heard.api_lost(n, HostState(st), when, read_at)
            if node is None or any(
                node.host_states.get(index[n], "") != HostState.READY
                for n in doubtful
                if n in index
            ):
                self._wake()  # the poll says what the API says, and clears the doubt
                return
            if loop.time() - last_wake >= LOOK_AGAIN_S:
                last_wake = loop.time()
                self._wake()  # the poll's other layers may know more (SSH back)
            await asyncio.sleep(API_WATCH_S)

    def _on_notice(self, host: str, at: float) -> None:
        self.heard.noticed()
        self._wake()

    def _on_maintenance(self, host: str, value: str, at: float) -> None:
        """A live migration coming (or over): the VM stays, its jobs pause for a moment;
        journaled and shown, nothing to recover (a terminating maintenance is a notice)."""
        if value == MIGRATE:
            msg = (
                f"{host}: host maintenance coming (metadata maintenance-event {value}): the VM "
                "is live-migrated in about 60 s; its jobs pause for a moment and go on"
            )
        else:
            msg = f"{host}: host maintenance over (metadata maintenance-event {value})"
        self._sink.emit_soon(
            Event(
                at=at,
                kind=EventKind.MAINTENANCE,
                message=msg,
                host=host,
                data={"maintenance_event": value},
            )
        )

    def _on_connection_lost(self, ep: HostEndpoint) -> None:
        # Lost from the other end (the VM killed, sshd gone) is news: probe it, and look now.
        self.dropped_at.setdefault(ep.name, self._clock())
        self.observer.probes.suspect(ep.name)
        self.doubt.dropped(ep.name)
        self._wake()
        self._start_api_watch()  # the API says PREEMPTED once the VM is down: hear it then

    def recovery_plan(self, resubmit: Resubmit) -> Plan:
        return pod_plan(self, resubmit, ready_timeout_s=self.settings.ready_timeout_s)

    def cadence_sources(self) -> list[CadenceSource]:
        wandb = replace(self.settings.wandb, dir=self.access.wandb_dir or self.settings.wandb.dir)
        return sources_from_config(wandb, environ=self._environ)

    # -- jobs -------------------------------------------------------------------------------
    async def submit(self, spec: SubmitSpec) -> JobInfo:
        if not self.parts.tunnel.is_up:
            res = await self.open_tunnel()
            if not res.ok:
                raise JobsUnavailable(
                    f"cannot submit: the tunnel to the head is down ({res.message}); is Ray "
                    "up? (press u in the console, or `ray-up` / `recover` in a script)"
                )
        job = await self.parts.jobs.submit(
            self._job_defaults(spec), working_dir=self.working_dir, environ=self._environ
        )
        return check_job_env(job, self.job_env)

    def _job_defaults(self, spec: SubmitSpec) -> SubmitSpec:
        """Shared checkpoint storage and the console's job env (a user's own values win)."""
        if not spec.storage and self.access.storage_uri:
            spec = replace(spec, storage=self.access.storage_uri)
        env = dict(spec.runtime_env)
        env_vars = dict(env.get("env_vars") or {})
        for key, value in self.job_env.items():
            env_vars.setdefault(key, value)
        env["env_vars"] = env_vars
        return replace(spec, runtime_env=env)

    async def list_jobs(self) -> list[JobInfo]:
        if not self.parts.tunnel.is_up and self._head_alive():
            # A process that did not open the tunnel itself (`phantom status --json` beside
            # a `phantom watch` holding its own): open one, on another local port if the
            # watcher has the configured one, rather than report no jobs.
            await self.open_tunnel()
        self._need_jobs_api()
        try:
            jobs = await self.parts.jobs.list()
        except DashboardUnreachableError as exc:
            raise JobsUnavailable(str(exc)) from None
        return [check_job_env(j, self.job_env) for j in jobs]

    async def job_status(self, job_id: str) -> JobInfo:
        return check_job_env(await self.parts.jobs.status(job_id), self.job_env)

    async def stop_job(self, job_id: str) -> bool:
        return await self.parts.jobs.stop(job_id)

    def follow_logs(self, job_id: str) -> AsyncIterator[LogLine | LogStreamClosed]:
        return self.parts.jobs.follow(job_id)

    async def job_logs(self, job_id: str) -> str:
        return await self.parts.jobs.logs(job_id)

    def _head_alive(self) -> bool:
        """The last observation saw a live Ray head."""
        return any(n.alive and n.is_head for n in self.observer.last_nodes)

    def _need_jobs_api(self) -> None:
        if not self.parts.tunnel.is_up:
            raise JobsUnavailable(
                "Ray is not running or its dashboard is out of reach (no tunnel to the "
                "head): press u in the console, or `ray-up` in a script"
            )

    # -- recovery ops (tpu_vm.recovery.PodOps) ----------------------------------------------
    async def recreate(self, hosts: Sequence[str]) -> ActionResult:
        p = self.parts
        t0 = time.monotonic()
        eps = p.ssh.resolve(hosts)
        waited = await self._let_noticed_hosts_go([ep.name for ep in eps])
        try:
            done = await p.provider.recreate([ep.index for ep in eps])
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
        names = [ep.name for ep in p.endpoints if ep.index in set(done)]
        ips = {ep.ip for ep in p.endpoints if ep.name in names}
        # The raylets of the old VMs are dead, whatever the GCS says until its health checks
        # time out: the fresh ones start at once and these are not counted meanwhile.
        self.observer.stale |= {n.node_id for n in self.observer.last_nodes if n.ip in ips}
        for name in names:
            self.notices.clear(name)
            self.heard.forget(name)
            self.dropped_at.pop(name, None)
            p.forget(name)
        self._no_ray |= set(names)
        return _result(
            "recreate",
            {n: HostResult(host=n, ok=True) for n in names},
            time.monotonic() - t0,
            data={"hosts": names},
            message=f"recreated {', '.join(names)}" + (f" (notice: {waited})" if waited else ""),
        )

    async def _let_noticed_hosts_go(self, hosts: Sequence[str]) -> str:
        """A host with a preemption notice is still up, its jobs checkpointing through the
        grace: recreating it now would cut that short, waiting out the grace wastes it.
        Drained in Ray, it goes once its jobs have exited (``drain``). Returns what waited."""
        notices = self.notices.notices
        noticed = [h for h in hosts if h in notices]
        if not noticed:
            return ""
        went = await let_noticed_hosts_go(
            self.parts,
            noticed,
            nodes=self.observer.last_nodes,
            notice_at=notices,
            grace_s=self.settings.notice_grace_s,
            clock=self._clock,
            note=step_note,
        )
        return went.text()

    async def wait_hosts_ready(self, hosts: Sequence[str], timeout_s: float) -> ActionResult:
        p = self.parts
        t0 = time.monotonic()
        try:
            node = await p.provider.wait_ready(timeout_s)
        except (TimeoutError, TpuApiError) as exc:
            return _result(
                "wait_ready",
                {n: HostResult(host=n, ok=False, error=str(exc)) for n in hosts},
                time.monotonic() - t0,
                message=str(exc),
            )
        p.set_endpoints(node.endpoints)
        return _result(
            "wait_ready",
            {n: HostResult(host=n, ok=True) for n in hosts},
            time.monotonic() - t0,
            message=node.summary(),
        )

    async def bootstrap(self, hosts: Sequence[str] | None) -> ActionResult:
        t0 = time.monotonic()
        try:
            per_host = await self.parts.ray.bootstrap(hosts)
        except ValueError as exc:
            return ActionResult(
                action="bootstrap", ok=False, elapsed_s=time.monotonic() - t0, message=str(exc)
            )
        return _result("bootstrap", per_host, time.monotonic() - t0)

    async def start_head(self) -> ActionResult:
        t0 = time.monotonic()
        res = await self.parts.ray.start_head()
        if res.ok:
            self.parts.jobs.reset()  # a new head: reconnect the jobs client on the next call
            where = getattr(self.parts.provider, "whereabouts", None)
            if where is not None:  # the place record names the head front ends look for
                where.head(self.parts.ray.head.name, self.parts.ray.gcs_address)
        return _result("start_head", {res.host: res}, time.monotonic() - t0)

    async def ask_checkpoint(self, job: str, timeout_s: float) -> ActionResult:
        """``base.AsksForCheckpoints``: every host asks its registered trainers of ``job``
        and waits for their answers (``tpu_vm.ask``)."""
        t0 = time.monotonic()
        per_host = await self.parts.ssh.run(ask_command(job, timeout_s), timeout_s=timeout_s + 30)
        return asked_result(job, per_host, time.monotonic() - t0)

    async def stop_orphans(self, hosts: Sequence[str]) -> ActionResult:
        """``ray stop -f`` on workers whose head is gone: their raylets belong to a dead
        cluster, and a graceful stop would wait out its grace period on each of them. A
        host noticed since the recovery began is left to checkpoint and go (``_noticed``).

        Then the lost jobs' trainers that outlive their raylet (``stragglers``) get SIGTERM,
        ``notice_grace_s`` to write their checkpoint, and SIGKILL by pid, each confirmed
        gone: the step ends (and the resubmission, which waits for it, starts) only once no
        old trainer writes into the runs the new jobs resume."""
        t0 = time.monotonic()
        rest, per_host = self._noticed(hosts)
        if rest:
            stopped = await self.parts.ray.stop(rest)
            self._no_ray |= {h for h, r in stopped.items() if r.ok}
            done = [h for h, r in stopped.items() if r.ok]
            grace = self.settings.notice_grace_s
            swept = (
                await self.parts.ssh.run(stragglers_command(grace), done, timeout_s=grace + 30)
                if done
                else {}
            )
            per_host |= merge_stopped(stopped, {h: read_stragglers(h, r) for h, r in swept.items()})
        return _result("stop_orphans", per_host, time.monotonic() - t0)

    def _noticed(self, hosts: Sequence[str]) -> tuple[list[str], dict[str, HostResult]]:
        """``hosts`` split: those an op may act on, and a result for each with a preemption
        notice. A notice heard after a recovery began puts that host's checkpoint first:
        its trainers write it through the grace, and stopping its Ray (its workers go with
        the raylet) or joining it (work placed on a VM that is going) would cut it short or
        waste it. It is recreated once it has gone (``recreate`` waits for that)."""
        notices = self.notices.notices
        left = {
            h: HostResult(
                host=h,
                ok=True,
                stdout_tail="preemption notice: left to checkpoint and go; recreated after\n",
            )
            for h in hosts
            if h in notices
        }
        return [h for h in hosts if h not in left], left

    async def join_workers(
        self, hosts: Sequence[str], parallelism: int | None = None
    ) -> ActionResult:
        p = self.parts
        t0 = time.monotonic()
        hosts, left = self._noticed(hosts)
        if left and not hosts:
            return _result("join_workers", left, time.monotonic() - t0)
        eps = p.ssh.resolve(hosts)
        try:
            per_host = await p.ray.join_workers(
                [ep.name for ep in eps],
                stale=self.observer.stale,
                fresh=self._no_ray,
                parallelism=parallelism,
            )
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
        self._no_ray -= set(per_host)  # a failed start may have left a raylet behind
        return _result("join_workers", per_host | left, time.monotonic() - t0)

    async def rejoin_workers(self, hosts: Sequence[str]) -> ActionResult:
        """A recovery's join: ``access.rejoin_parallelism`` at a time (see ``PodAccess``)."""
        return await self.join_workers(hosts, self.rejoin_parallelism)

    async def open_tunnel(self) -> ActionResult:
        t0 = time.monotonic()
        try:
            await self._open_tunnel()  # idempotent; watch() may have re-opened it already
        except Exception as exc:  # SshError, TunnelError, OSError: all one-line reasons
            return ActionResult(
                action="open_tunnel",
                ok=False,
                elapsed_s=time.monotonic() - t0,
                message=f"tunnel to {self.parts.head.label}: {exc}",
            )
        url = self.parts.dashboard_url() or ""
        return ActionResult(
            action="open_tunnel",
            ok=True,
            elapsed_s=time.monotonic() - t0,
            message=f"tunnel up: dashboard at {url}",
            data={"dashboard_url": url},
        )

    async def _open_tunnel(self) -> None:
        p = self.parts
        try:
            await p.tunnel.open()
        finally:
            self.observer.tunnel_wanted = True
        p.tunnel.start()
        url = p.dashboard_url()
        if url:
            p.jobs.set_address(url)

    # -- user actions (base.PodActions) -----------------------------------------------------
    async def wait_ready(self, timeout_s: float) -> ActionResult:
        return await self.wait_hosts_ready([ep.name for ep in self.parts.endpoints], timeout_s)

    async def ray_up(self, retries: int) -> ActionResult:
        """Start the head and join every worker (restart if up)."""
        t0 = time.monotonic()
        head = await self.start_head()
        per_host = dict(head.per_host)
        ok, message = head.ok, head.message
        if head.ok:
            todo = [ep.name for ep in self.parts.ray.workers]
            # `ray start` gives a raylet 30 s to register; on a loaded machine some miss it.
            # The join is idempotent, so the hosts that failed are simply retried.
            for attempt in range(retries + 1):
                if attempt:
                    await asyncio.sleep(self.parts.polling.retry_s * 2 ** (attempt - 1))
                workers = await self.join_workers(todo)
                per_host.update(workers.per_host)
                todo = [h for h, r in workers.per_host.items() if not r.ok]
                if not todo:
                    break
            ok = all(r.ok for r in per_host.values())
            message = "" if ok else workers.message
        return ActionResult(
            action="ray_up",
            ok=ok,
            elapsed_s=time.monotonic() - t0,
            per_host=per_host,
            message=message or summary("ray_up", per_host, ok),
        )

    async def teardown(self) -> ActionResult:
        """Stop running jobs, `ray stop -f` everywhere, close the tunnel (VMs stay)."""
        t0 = time.monotonic()
        stopped = await self._stop_active_jobs()
        self.observer.tunnel_wanted = False
        await self.parts.tunnel.close()
        last = self._last
        live = [h.name for h in last.hosts if h.tpu_state == HostState.READY] if last else []
        per_host = await self.parts.ray.stop(live or None)
        ok = all(r.ok for r in per_host.values())
        jobs_note = f"; stopped job(s) {', '.join(stopped)}" if stopped else ""
        return ActionResult(
            action="teardown",
            ok=ok,
            elapsed_s=time.monotonic() - t0,
            per_host=per_host,
            message=summary("ray stop -f", per_host, ok) + "; tunnel closed" + jobs_note,
            data={"stopped_jobs": stopped},
        )

    async def _stop_active_jobs(self, timeout_s: float = JOB_STOP_WAIT_S + 5.0) -> list[str]:
        """Stop every running job before Ray goes: `ray stop -f` kills Ray's processes,
        not a job's entrypoint (its own process group), which would outlive the cluster.
        Waits as long as Ray's supervisor gives a stopping driver (``JOB_STOP_WAIT_S``: a
        sweep driver saves its state), and a little more: a `ray stop -f` sooner would kill
        the supervisor, and its watcher the driver, mid-save."""
        jobs = self.parts.jobs
        if not self.parts.tunnel.is_up:
            return []
        try:
            active = [j.job_id for j in await jobs.list() if j.status in ACTIVE_JOBS]
        except JobError:
            return []
        for job_id in active:
            with contextlib.suppress(JobError):
                await jobs.stop(job_id)
        deadline = time.monotonic() + timeout_s
        pending = set(active)
        while pending and time.monotonic() < deadline:
            for job_id in list(pending):
                with contextlib.suppress(JobError):
                    if (await jobs.status(job_id)).status not in ACTIVE_JOBS:
                        pending.discard(job_id)
            if pending:
                await asyncio.sleep(0.5)
        return active

    async def trust_host(self, host: str) -> ActionResult:
        """Accept a host's current SSH host key (after a deliberate VM recreate): from the
        TPU API's guest attributes when published, else from the server itself."""
        t0 = time.monotonic()
        ep = self.parts.ssh.endpoint(host)
        try:
            message = await self.parts.ssh.trust(ep.name)
            ok = True
        except (OSError, TimeoutError, ValueError) as exc:
            message, ok = f"could not read the host key of {ep.name} ({ep.ip}): {exc}", False
        return ActionResult(
            action="trust",
            ok=ok,
            elapsed_s=time.monotonic() - t0,
            per_host={ep.name: HostResult(host=ep.name, ok=ok, error="" if ok else message)},
            message=message,
        )

    def resolve_host(self, host: str) -> str:
        return self.parts.ssh.endpoint(host).name

    def host_index(self, host: str) -> int:
        return self.parts.ssh.endpoint(host).index

    # -- events -----------------------------------------------------------------------------
    def _on_host_key(self, ev: HostKeyEvent) -> None:
        self._sink.emit_soon(
            Event(
                at=self._clock(),
                kind=EventKind.HOST_KEY,
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
        if not up:
            # The head may be gone: look now, not at the next poll, and doubt it as a
            # dropped connection (the API may call it lost in a moment).
            self.doubt.dropped(self.parts.head.name)
            self._wake()
            self._start_api_watch()
        if up:
            url = self.parts.dashboard_url()
            if url:
                self.parts.jobs.set_address(url)
        self._sink.emit_soon(
            Event(
                at=self._clock(),
                kind=EventKind.TUNNEL_UP if up else EventKind.TUNNEL_DOWN,
                message=reason,
                host=self.parts.head.name,
                actor="tunnel",
            )
        )


def _nothing() -> None:
    return None


def summary(action: str, per_host: Mapping[str, HostResult], ok: bool) -> str:
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
        message=kw.pop("message", "") or summary(action, per_host, ok),
        **kw,
    )


def capacity_news(sink: EventSink, clock: Callable[[], float]) -> Callable[[Attempt], None]:
    """What to do with a try to get the slice back (stockouts, zone moves): journal it, and
    show it on the running recovery step ("waiting for capacity in ZONE (attempt N, next
    try in S s)")."""

    def heard(attempt: Attempt) -> None:
        sink.emit_soon(
            Event(
                at=clock(),
                kind=EventKind.CAPACITY,
                message=attempt.text,
                actor="watchdog",
                data=attempt.to_json(),
            )
        )
        step_note(attempt.text)

    return heard
