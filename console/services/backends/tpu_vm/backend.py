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

from console.config import Config
from console.services.api import JobsUnavailable
from console.services.backends.base import Resubmit
from console.services.backends.tpu_vm.endpoints import HostEndpoint
from console.services.backends.tpu_vm.hostkeys import HostKeyEvent
from console.services.backends.tpu_vm.jobs import DashboardUnreachableError, JobError
from console.services.backends.tpu_vm.observe import PodObserver
from console.services.backends.tpu_vm.parts import PodAccess, PodParts
from console.services.backends.tpu_vm.ray import RayError, alive_by_ip
from console.services.backends.tpu_vm.recovery import pod_plan
from console.services.backends.tpu_vm.tpu import TpuApiError
from console.services.cadence.sources import CadenceSource
from console.services.cadence.tracker import sources_from_config
from console.services.events import EventSink
from console.services.jobenv import check_job_env, console_job_env
from console.services.model import (
    ACTIVE_JOBS,
    ActionResult,
    Event,
    HostResult,
    HostState,
    JobInfo,
    LogLine,
    LogStreamClosed,
)
from console.services.observation import Observation
from console.services.recovery.runner import Plan
from console.services.submit import SubmitSpec


class TpuVmBackend:
    def __init__(
        self,
        config: Config,
        access: PodAccess,
        *,
        sink: EventSink,
        state_dir: Path,
        working_dir: str | os.PathLike[str],
        clock: Callable[[], float] = time.time,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self.config = config
        self.provider = config.cluster.provider
        self.access = access
        self.working_dir = Path(working_dir)
        self._sink = sink
        self._clock = clock
        self._environ = environ
        self.parts = PodParts(
            config,
            access,
            state_dir=state_dir,
            clock=clock,
            on_host_key=self._on_host_key,
            on_tunnel_change=self._on_tunnel_change,
        )
        self._observer = PodObserver(self.parts)
        self.job_env = console_job_env(config, access.job_env)
        self._last: Observation | None = None
        self._recreated_at: dict[str, float] = {}

    # -- the seam ---------------------------------------------------------------------------
    async def start(self) -> None:
        # A console restarted over a running cluster re-opens its window onto the head.
        if any(n.alive and n.is_head for n in self._observer.last_nodes):
            with contextlib.suppress(Exception):
                await self._open_tunnel()

    async def close(self) -> None:
        await self.parts.close()

    async def observe(self) -> Observation:
        self._last = await self._observer.observe(self._clock())
        return self._last

    def recovery_plan(self, resubmit: Resubmit) -> Plan:
        return pod_plan(self, resubmit, ready_timeout_s=self.config.recovery.ready_timeout_s)

    def cadence_sources(self) -> list[CadenceSource]:
        wandb = replace(self.config.wandb, dir=self.access.wandb_dir or self.config.wandb.dir)
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
        now = time.monotonic()
        for name in names:
            self._recreated_at[name] = now
            p.forget(name)
        return _result(
            "recreate",
            {n: HostResult(host=n, ok=True) for n in names},
            time.monotonic() - t0,
            data={"hosts": names},
            message=f"recreated {', '.join(names)}",
        )

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
        return _result("start_head", {res.host: res}, time.monotonic() - t0)

    async def join_workers(self, hosts: Sequence[str]) -> ActionResult:
        p = self.parts
        t0 = time.monotonic()
        eps = p.ssh.resolve(hosts)
        try:
            await self._wait_stale_nodes_gone([ep for ep in eps if ep.name in self._recreated_at])
            if self.access.serial_joins:
                per_host: dict[str, HostResult] = {}
                for ep in eps:
                    per_host.update(await p.ray.join_workers([ep.name]))
            else:
                per_host = await p.ray.join_workers([ep.name for ep in eps])
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
                self._recreated_at.pop(ep.name, None)
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
                live = alive_by_ip(await self.parts.ray.nodes())
            except RayError:
                return  # no head to ask: join_workers will say so
            if not any(live.get(ep.ip, 0) for ep in eps):
                return
            await asyncio.sleep(min(0.5, self.parts.poll_interval_s))

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
            self._observer.tunnel_wanted = True
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
                    await asyncio.sleep(min(1.0, self.parts.poll_interval_s) * 2 ** (attempt - 1))
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
        self._observer.tunnel_wanted = False
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

    async def _stop_active_jobs(self, timeout_s: float = 20.0) -> list[str]:
        """Stop every running job before Ray goes: `ray stop -f` kills Ray's processes,
        not a job's entrypoint (its own process group), which would outlive the cluster."""
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
            url = self.parts.dashboard_url()
            if url:
                self.parts.jobs.set_address(url)
        self._sink.emit_soon(
            Event(
                at=self._clock(),
                kind="tunnel_up" if up else "tunnel_down",
                message=reason,
                host=self.parts.head.name,
                actor="tunnel",
            )
        )


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
