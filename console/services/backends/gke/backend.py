"""``GkeBackend``: XPK / Pathways JobSets on a GKE cluster (seed 004), behind the backend seam.

It keeps one list+watch cache per resource (pods, nodes, events, Jobs, JobSets) and every
poll only reads them (``observe.GkeObserver``): hosts are the slices' nodes, jobs the
console's workloads. Workloads are created from a ``WorkloadSpec`` (``manifests``), with
their ``$NAME`` values in a Secret; recovery waits for preempted slices and resubmits a
Failed JobSet (``recovery.gke_plan``); metrics come from the runs' TensorBoard files
(``metrics.TensorBoardSource``). There is no Ray head and no ``PodActions``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import replace

import yaml

from console.services.backends.gke import CAPABILITIES
from console.services.backends.gke import manifests as M
from console.services.backends.gke import status as S
from console.services.backends.gke.access import GkeAccess
from console.services.backends.gke.ask import (
    ASK_ENV,
    NO_SIGNAL,
    SignalContainer,
    ask_workload,
    askable,
)
from console.services.backends.gke.client import AsyncioKubeApi
from console.services.backends.gke.informer import Informer
from console.services.backends.gke.kube import (
    Conflict,
    Invalid,
    KubeApi,
    KubeError,
    NotFound,
)
from console.services.backends.gke.kube import Resource as R
from console.services.backends.gke.logs import follow, read_log
from console.services.backends.gke.logtarget import log_backlog, log_target
from console.services.backends.gke.metrics import TbRun, TensorBoardSource
from console.services.backends.gke.news import News
from console.services.backends.gke.observe import Caches, GkeObserver, job_info
from console.services.backends.gke.recovery import gke_plan
from console.services.backends.gke.registry import RecordedWorkload, WorkloadRegistry
from console.services.backends.gke.settings import GkeSettings
from console.services.backends.gke.storage import StorageError, exists, readable_uri
from console.services.cadence.sources import CadenceSource
from console.services.errors import JobsUnavailable, UnknownJob
from console.services.jobs.spec import SpecError, SubmitSpec
from console.services.jobs.workload import WorkloadPreview, WorkloadSpec
from console.services.model import (
    TERMINAL_JOBS,
    ActionResult,
    HostResult,
    HostState,
    JobInfo,
    JobStatus,
    LogLine,
    LogStreamClosed,
    Resubmit,
    SubmissionState,
    WorkloadStatus,
)
from console.services.observation import Observation
from console.services.record.sink import EventSink
from console.services.recovery import diagnosis as dx
from console.services.recovery.runner import Plan
from console.services.settings import named

ApiFactory = Callable[[], Awaitable[KubeApi]]


class GkeBackend:
    capabilities = CAPABILITIES

    def __init__(
        self,
        settings: GkeSettings,
        access: GkeAccess,
        *,
        sink: EventSink,
        clock: Callable[[], float] = time.time,
        environ: Mapping[str, str] | None = None,
        api_factory: ApiFactory | None = None,
        signal_container: SignalContainer | None = None,
    ) -> None:
        self.settings = settings
        # How a pod's trainer is signalled (the local emulator's client; none on a real cluster)
        self._signal_container = signal_container
        self.provider = settings.provider
        self.access = access
        self._sink = sink
        self._clock = clock
        self._environ = environ
        self.registry = WorkloadRegistry(sink.journal)
        self._api_factory = api_factory or self._connect
        self.api: KubeApi | None = None
        self.caches: Caches | None = None
        self._observer: GkeObserver | None = None
        self._lock: asyncio.Lock | None = None
        self._last: Observation | None = None
        self._tb_runs: tuple[TbRun, ...] = ()
        self.metrics = TensorBoardSource(lambda: self._tb_runs, lag_s=access.metrics_lag_s)
        self.news = News(lambda: None)  # the facade's wake-up, once it sets one

    async def _connect(self) -> KubeApi:
        a = self.access
        return await AsyncioKubeApi.connect(
            a.kubeconfig, context=a.context, namespace=a.ref.namespace
        )

    async def _ensure(self) -> tuple[KubeApi, Caches, GkeObserver]:
        if self.api is None or self.caches is None or self._observer is None:
            if self._lock is None:
                self._lock = asyncio.Lock()
            async with self._lock:
                if self.api is None:
                    api = await self._api_factory()
                    caches = Caches(*(Informer(api, r) for r in _WATCHED))
                    self.news.watch_caches(caches)
                    for informer in caches.all():
                        informer.start()
                    self._observer = GkeObserver(
                        caches,
                        self.access.ref,
                        recorded=lambda: {w.name: w for w in self.registry.all()},
                        accelerator=self.access.accelerator,
                    )
                    self.api, self.caches = api, caches
        assert self.api is not None and self.caches is not None and self._observer is not None
        return self.api, self.caches, self._observer

    async def _synced(self, timeout_s: float) -> Caches:
        _, caches, _ = await self._ensure()
        for informer in caches.all():
            await informer.wait_synced(max(0.0, timeout_s))
        return caches

    # -- the seam ---------------------------------------------------------------------------
    async def start(self) -> None:
        await self._synced(self.access.poll_budget_s)

    async def close(self) -> None:
        caches, api = self.caches, self.api
        self.caches, self.api, self._observer = None, None, None
        self.news.cancel()
        if caches is not None:
            for informer in caches.all():
                await informer.stop()
        if api is not None:
            with contextlib.suppress(Exception):
                await api.close()

    def set_wakeup(self, wake: Callable[[], None]) -> None:
        self.news.wake = wake  # a preemption is polled when the watch hears it (``news``)

    async def observe(self) -> Observation:
        await self._synced(self.access.poll_budget_s)
        _, _, observer = await self._ensure()
        obs = replace(observer.observe(self._clock()), capacity_wait_s=self.access.capacity_wait_s)
        self._tb_runs = self._runs(obs.workloads)
        self._last = obs
        return obs

    def recovery_plan(self, resubmit: Resubmit) -> Plan:
        # Ray jobs are not a thing here: recovery resubmits workloads from this registry.
        return gke_plan(self, ready_timeout_s=self.settings.ready_timeout_s)

    def cadence_sources(self) -> list[CadenceSource]:
        return [self.metrics]

    def _runs(self, workloads: Sequence[WorkloadStatus]) -> tuple[TbRun, ...]:
        by_name = {w.name: w for w in workloads}
        out = []
        for rec in self.registry.all():
            spec = rec.spec
            if spec.template == "convert":
                continue
            w = by_name.get(rec.name)
            state = w.status if w is not None else JobStatus.STOPPED
            logdir = readable_uri(f"{spec.output_uri}/tensorboard", self.access.gcs_root)
            ending = w is not None and w.pods_succeeded > 0
            out.append(TbRun(rec.name, spec.effective_run_name, logdir, str(state), ending))
        # A JobSet made elsewhere (xpk, kubectl) is read where its env says it writes.
        caches, recorded = self.caches, {r.name for r in out}
        for w in workloads:
            if w.name in recorded or caches is None:
                continue
            found = M.run_location(caches.jobsets.get(w.name))
            if found is not None:
                logdir = readable_uri(f"{found[1]}/tensorboard", self.access.gcs_root)
                ending = w.pods_succeeded > 0
                out.append(TbRun(w.name, found[0], logdir, str(w.status), ending))
        return tuple(out)

    # -- jobs (a workload's job id is its name) ----------------------------------------------
    async def submit(self, spec: SubmitSpec) -> JobInfo:
        raise ValueError(
            f"{named(self.settings.name, self.provider)} runs workloads (JobSets), not Ray "
            "jobs: use "
            "`workload create NAME` in a script, or the console's new-workload form (key s)"
        )

    async def list_jobs(self) -> list[JobInfo]:
        obs = await self._observed()
        recorded = {w.name: w for w in self.registry.all()}
        return [job_info(w, recorded.get(w.name)) for w in obs.workloads]

    async def _observed(self) -> Observation:
        caches = await self._synced(self.access.poll_budget_s)
        if not caches.synced():
            raise JobsUnavailable(
                f"the GKE API at {self.access.kubeconfig} does not answer "
                f"({caches.error() or 'no answer yet'}); is the cluster up?"
                + (" (`phantom gke up`)" if self.access.gcs_root is not None else "")
            )
        return await self.observe()

    async def job_status(self, job_id: str) -> JobInfo:
        obs = await self._observed()
        for job in obs.jobs:
            if job.job_id == job_id:
                return job
        for w in obs.workloads:
            if w.name == job_id:
                return job_info(w)
        raise UnknownJob(f"no workload {job_id!r} in namespace {self.access.ref.namespace}")

    async def stop_job(self, job_id: str) -> bool:
        return await self.delete_workload(job_id)

    async def ask_checkpoint(self, job: str, timeout_s: float) -> ActionResult:
        """``base.AsksForCheckpoints``: the workload's pods whose trainer names the signal
        that asks (``gke.ask``), signalled where the console can (the emulator)."""
        if self._signal_container is None:
            raise ValueError(f"checkpoint: {NO_SIGNAL}")
        api, caches, _ = await self._ensure()
        await self._observed()
        names = [job]
        if job == "all":  # every workload whose trainer takes the ask
            workloads = (await self.observe()).workloads
            names = [w.name for w in workloads if askable(caches, w.name)[1]]
            if not names:
                raise ValueError(
                    "checkpoint: no running workload's trainer offers a way to be asked "
                    f"(none sets {ASK_ENV})"
                )
        results = [
            await ask_workload(api, caches, name, self._signal_container, timeout_s)
            for name in names
        ]
        if len(results) == 1:
            return results[0]
        return ActionResult(
            action="checkpoint",
            ok=all(r.ok for r in results),
            elapsed_s=max(r.elapsed_s for r in results),
            per_host={h: r for res in results for h, r in res.per_host.items()},
            message="; ".join(r.message for r in results),
            data={
                "job": job,
                "checkpoints": [c for r in results for c in r.data["checkpoints"]],
                "late": [c for r in results for c in r.data["late"]],
                "gone": [],
            },
        )

    async def job_logs(self, job_id: str) -> str:
        api, caches, _ = await self._ensure()
        await self._observed()
        target = log_target(caches, job_id)()
        if target is None:
            if self._is_known(job_id):
                return ""
            raise UnknownJob(f"no workload or pod {job_id!r}")
        try:
            return await read_log(api, target.name, target.container)
        except KubeError as exc:
            if exc.status in (400, 404):
                return ""  # not started yet, or gone
            raise

    async def follow_logs(self, job_id: str) -> AsyncIterator[LogLine | LogStreamClosed]:
        api, caches, _ = await self._ensure()
        await self._observed()
        if not self._is_known(job_id):
            raise UnknownJob(f"no workload or pod {job_id!r}")
        resolve, backlog = log_target(caches, job_id), log_backlog(caches, job_id)
        async for entry in follow(
            api,
            resolve,
            lambda: self._finished(job_id),
            wait_change=caches.pods.changed,
            clock=self._clock,
            backlog=backlog,
        ):
            yield LogLine(job_id=job_id, text=entry.text, at=self._clock())
        status = JobStatus.UNKNOWN
        with contextlib.suppress(Exception):
            status = JobStatus((await self.job_status(self._workload_of(job_id))).status)
        yield LogStreamClosed(job_id=job_id, job_status=status, at=self._clock())

    def _is_known(self, ref: str) -> bool:
        caches = self.caches
        if caches is None:
            return False
        return (
            caches.jobsets.get(ref) is not None
            or caches.jobs.get(ref) is not None
            or caches.pods.get(ref) is not None
            or ref in self.registry
        )

    def _workload_of(self, ref: str) -> str:
        caches = self.caches
        pod = caches.pods.get(ref) if caches is not None else None
        if pod is None:
            return ref
        return S.pod_status(pod).workload or ref

    def _finished(self, ref: str) -> bool:
        """No more lines will come for ``ref``: its workload ended (or is gone), or, for a
        pod of no workload, the pod itself ended."""
        caches = self.caches
        if caches is None:
            return True
        name = self._workload_of(ref)
        pod = caches.pods.get(ref)
        if name == ref and pod is not None:
            return S.pod_terminal(pod)
        state = self._workload_state(name)
        return state is None or state in TERMINAL_JOBS

    def _workload_state(self, name: str) -> str | None:
        """A workload's status from the caches now (None: no such workload)."""
        caches = self.caches
        assert caches is not None
        pods = [p for p in map(S.pod_status, caches.pods.values()) if p.workload == name]
        js = caches.jobsets.get(name)
        if js is not None:
            return S.jobset_status(js, pods)[0]
        job = caches.jobs.get(name)
        if job is not None:
            return S.job_status(job, pods)[0]
        return None

    # -- workloads (base.Workloads) ----------------------------------------------------------
    def preview(self, spec: WorkloadSpec) -> WorkloadPreview:
        return M.preview(spec.checked(), self.access.ref)

    async def create_workload(self, spec: WorkloadSpec, actor: str) -> JobInfo:
        spec = spec.checked()
        await self._check_paths(spec)
        api, caches, _ = await self._ensure()
        values = await self._secret_values(api, spec)
        kind = R.JOBS if spec.template == "convert" else R.JOBSETS
        body = M.manifest(spec)
        if caches.jobsets.get(spec.name) is not None or caches.jobs.get(spec.name) is not None:
            raise SpecError(
                {
                    "name": f"a workload named {spec.name!r} exists; delete it first "
                    f"(`workload delete {spec.name}`) or choose another name"
                }
            )
        try:
            await api.create(kind, body, dry_run=True)
        except Invalid as exc:
            raise SpecError(_invalid_fields(exc)) from None
        except Conflict:
            raise SpecError({"name": f"a workload named {spec.name!r} exists already"}) from None
        known = self.registry.get(spec.name)
        self.registry.record(spec, actor, self._clock())
        try:
            if values:
                await self._put_secret(api, spec, values)
            created = await api.create(kind, body)
        except BaseException:
            if known is None:
                self.registry.remove(spec.name)
            else:
                self.registry.mark(spec.name, known.state)
            raise
        self.registry.mark(spec.name, SubmissionState.SUBMITTED)
        informer = caches.jobs if kind is R.JOBS else caches.jobsets
        await _until_cached(informer, spec.name, str(S.meta(created).get("uid", "")))
        return JobInfo(
            job_id=spec.name,
            status=JobStatus.PENDING,
            entrypoint=spec.command,
            start_time=S.ts(S.meta(created).get("creationTimestamp")) or self._clock(),
            message="created",
            metadata={
                "phantom.template": spec.template,
                "phantom.run_name": spec.effective_run_name,
            },
        )

    async def _check_paths(self, spec: WorkloadSpec) -> None:
        checks = {"maxtext_ckpt_path": spec.maxtext_ckpt_path}
        if spec.template == "convert":
            checks["convert_src"] = spec.convert_src
        problems = {}
        for key, uri in checks.items():
            if not uri:
                continue
            try:
                found = await asyncio.to_thread(exists, uri, self.access.gcs_root)
            except StorageError as exc:
                problems[key] = str(exc)
                continue
            if not found:
                problems[key] = (
                    f"{uri} does not exist; convert a checkpoint first (`workload create NAME "
                    "--template convert`) or fix the path (MAXTEXT_CKPT_PATH)"
                    if key == "maxtext_ckpt_path"
                    else f"{uri} does not exist"
                )
        if problems:
            raise SpecError(problems)

    async def _secret_values(self, api: KubeApi, spec: WorkloadSpec) -> dict[str, str]:
        """Container variable -> value for the Secret, read from this console's environment
        now (a resubmission without the variable keeps the Secret already there)."""
        environ = os.environ if self._environ is None else self._environ
        refs = spec.secret_refs()
        values = {var: environ[name] for var, name in refs.items() if environ.get(name)}
        missing = {var: name for var, name in refs.items() if var not in values}
        if not missing:
            return values
        try:
            existing = (await api.get(R.SECRETS, M.secret_name(spec))).get("data") or {}
        except NotFound:
            existing = {}
        problems = {}
        for var, name in missing.items():
            if var in existing:
                continue
            field = (
                "hf_token_env" if var == "HF_TOKEN" and name == spec.hf_token_env else f"env.{var}"
            )
            problems[field] = (
                f"${name} is not set in this console's environment; export it (its value goes "
                f"to the cluster as Secret {M.secret_name(spec)}, never shown)"
                + (' or set hf_token_env to ""' if field == "hf_token_env" else "")
            )
        if problems:
            raise SpecError(problems)
        return values

    async def _put_secret(self, api: KubeApi, spec: WorkloadSpec, values: dict[str, str]) -> None:
        try:
            old = (await api.get(R.SECRETS, M.secret_name(spec))).get("data") or {}
        except NotFound:
            await api.create(R.SECRETS, M.secret(spec, values, api.namespace))
            return
        body = M.secret(spec, values, api.namespace)
        body["data"] = {**old, **body["data"]}
        await api.replace(R.SECRETS, M.secret_name(spec), body)

    async def delete_workload(self, name: str) -> bool:
        api, _, _ = await self._ensure()
        found = False
        for kind in (R.JOBSETS, R.JOBS):
            try:
                await api.delete(kind, name)
                found = True
            except NotFound:
                continue
        with contextlib.suppress(NotFound):
            await api.delete(R.SECRETS, f"{name}-phantom-env")
        if self.registry.get(name) is not None:
            self.registry.mark(name, SubmissionState.DELETED)
            found = True
        return found

    async def describe(self, ref: str) -> str:
        _, caches, _ = await self._ensure()
        for informer in (caches.pods, caches.jobsets, caches.jobs, caches.nodes):
            obj = informer.get(ref)
            if obj is None:
                continue
            events = [
                f"{e.get('type', '')}\t{e.get('reason', '')}\t{e.get('message', '')}"
                for e in caches.events.values()
                if (e.get("involvedObject") or {}).get("name") == ref
            ]
            text = yaml.safe_dump(obj, sort_keys=False, width=100)
            return text + "\nEvents:\n" + ("\n".join(events[-20:]) or "<none>") + "\n"
        raise UnknownJob(f"no pod, workload or node named {ref!r}")

    # -- recovery ops (recovery.GkeOps) ------------------------------------------------------
    async def wait_nodes(self, pools: Sequence[str], timeout_s: float) -> ActionResult:
        t0 = time.monotonic()
        caches = await self._synced(self.access.poll_budget_s)
        while True:
            obs = await self.observe()
            ready = {
                pool: all(h.tpu_state == HostState.READY for h in obs.hosts if h.pool == pool)
                and any(h.pool == pool for h in obs.hosts)
                for pool in pools
            }
            diag = dx.diagnose(obs)
            if all(ready.values()):
                return _result(
                    "nodes",
                    {p: HostResult(host=p, ok=True) for p in pools},
                    t0,
                    f"{', '.join(pools)}: every node Ready",
                )
            stuck = diag.blocked
            if stuck or time.monotonic() - t0 >= timeout_s:
                why = (
                    "; ".join(
                        dx.workload_text(
                            diag.workloads[w], next(x for x in obs.workloads if x.name == w), obs
                        )
                        for w in stuck
                    )
                    or f"nodes not back after {timeout_s:.0f}s"
                )
                return _result(
                    "nodes",
                    {
                        p: HostResult(host=p, ok=ok, error="" if ok else why)
                        for p, ok in ready.items()
                    },
                    t0,
                    why,
                )
            await caches.nodes.changed(self.settings.polling.wake_s)

    async def resubmit_workloads(self, names: Sequence[str]) -> ActionResult:
        t0 = time.monotonic()
        api, caches, _ = await self._ensure()
        per: dict[str, HostResult] = {}
        mapping: dict[str, str] = {}
        for name in names:
            rec = self.registry.get(name)
            if rec is None:
                per[name] = HostResult(host=name, ok=False, error="no spec recorded")
                continue
            try:
                await self._recreate(api, caches, rec)
            except Exception as exc:
                per[name] = HostResult(host=name, ok=False, error=str(exc))
                continue
            per[name] = HostResult(host=name, ok=True, stdout_tail=name)
            mapping[name] = name
        return _result(
            "resubmit",
            per,
            t0,
            ", ".join(f"{n} resubmitted" for n in mapping),
            data={"resubmitted": mapping},
        )

    async def release_held(self, names: Sequence[str]) -> ActionResult:
        """Take the finalizers off the named workloads' pods held Terminating (their
        containers gone): the Job's deletion ends and the JobSet recreates it."""
        t0 = time.monotonic()
        api, _, _ = await self._ensure()
        obs = await self.observe()
        per: dict[str, HostResult] = {}
        for w in obs.workloads:
            if w.name not in names:
                continue
            for held in w.held:
                pod = held.split(" ", 1)[0]
                try:
                    await api.drop_finalizers(R.PODS, pod)
                except NotFound:
                    per[pod] = HostResult(host=pod, ok=True, stdout_tail="already gone")
                    continue
                except Exception as exc:
                    per[pod] = HostResult(host=pod, ok=False, error=str(exc))
                    continue
                per[pod] = HostResult(host=pod, ok=True, stdout_tail=f"released {held}")
        done = [p for p, r in per.items() if r.ok]
        return _result(
            "release",
            per,
            t0,
            f"released {len(done)} pod(s) held Terminating: {', '.join(done)}"
            if done
            else "no pod held Terminating",
            data={"released": done},
        )

    async def _recreate(self, api: KubeApi, caches: Caches, rec: RecordedWorkload) -> None:
        kind = R.JOBS if rec.spec.template == "convert" else R.JOBSETS
        informer = caches.jobs if kind is R.JOBS else caches.jobsets
        with contextlib.suppress(NotFound):
            await api.delete(kind, rec.name)
        deadline = time.monotonic() + 60.0
        while informer.get(rec.name) is not None and time.monotonic() < deadline:
            await informer.changed(1.0)
        await self.create_workload(rec.spec, "watchdog")


_WATCHED = (R.PODS, R.NODES, R.EVENTS, R.JOBS, R.JOBSETS)
CREATED_CACHE_WAIT_S = 10.0  # how long a create waits for the watch to bring its object


async def _until_cached(informer: Informer, name: str, uid: str) -> None:
    """Wait (bounded) until the watch cache holds the object just created. Until then the
    caches say the workload is not there: a log follow started at once took that for a
    workload already gone (it ended at once, LOST) and a status read said LOST."""
    deadline = time.monotonic() + CREATED_CACHE_WAIT_S
    while time.monotonic() < deadline:
        obj = informer.get(name)
        if obj is not None and (not uid or S.meta(obj).get("uid") == uid):
            return
        await informer.changed(min(1.0, max(0.0, deadline - time.monotonic())))


def _invalid_fields(exc: Invalid) -> dict[str, str]:
    if not exc.causes:
        return {"manifest": str(exc)}
    return {f"manifest.{field or '?'}": message for field, message in exc.causes}


def _result(
    action: str,
    per: Mapping[str, HostResult],
    t0: float,
    message: str,
    data: Mapping[str, object] | None = None,
) -> ActionResult:
    return ActionResult(
        action=action,
        ok=bool(per) and all(r.ok for r in per.values()),
        elapsed_s=time.monotonic() - t0,
        per_host=dict(per),
        message=message,
        data=dict(data or {}),
    )
