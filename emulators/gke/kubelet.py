"""The kubelet: a pod bound to a node runs its containers as real local processes.

Each container instance is one process (its argv is the container's command + args), with
its own log file, a marker in its environment and, where the machine allows, its own
cgroup, so every descendant is found when the container stops: as in a container, when
the main process exits the rest of the container dies with it. Stopping a pod (deletion,
node shutdown) sends SIGTERM to each container's main process, waits the grace period,
then SIGKILLs whatever is left. Exit codes follow the runtime: 128 + signal if killed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from emulators.gke import containers as C
from emulators.gke.events import Recorder, condition, set_condition
from emulators.gke.jobs import remove_pod
from emulators.gke.layout import MARKER_ENV, RunLayout
from emulators.gke.logs import LogFile
from emulators.gke.store import Obj, Store, now_iso
from emulators.gke.validate import image_reference_error
from emulators.tpu_pod.procs import kill_marked, make_host_cgroup, remove_cgroup

log = logging.getLogger("phantom.gke.kubelet")

LOST = "lost"
SHUTDOWN_MESSAGE = "Pod was terminated in response to imminent node shutdown."
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def default_signals() -> None:
    """Every signal at its default action, as a container runtime starts a container's first
    process: a disposition the kubelet inherited (a signal its parent ignored) is not the
    container's. Without this, a wrapper started by an emulator whose parent ignored SIGUSR2
    could never trap it (a shell cannot trap what it was started ignoring), so a checkpoint
    ask never reached its trainer. Runs in the child, between fork and exec."""
    for sig in signal.valid_signals():
        if sig not in (signal.SIGKILL, signal.SIGSTOP):
            with contextlib.suppress(OSError, ValueError):
                signal.signal(sig, signal.SIG_DFL)


@dataclass
class Container:
    spec: Obj
    init: bool = False
    sidecar: bool = False
    restart_count: int = 0
    state: dict[str, Any] = field(default_factory=lambda: C.waiting("ContainerCreating"))
    last_state: dict[str, Any] = field(default_factory=dict)
    proc: asyncio.subprocess.Process | None = None
    marker: str = ""
    cgroup: Path | None = None
    container_id: str = ""
    exit_code: int | None = None
    oom_killed: bool = False  # the kernel's OOM killer took its main process (faults.oom_kill)

    @property
    def name(self) -> str:
        return str(self.spec["name"])

    def status(self) -> Obj:
        running = "running" in self.state
        s: Obj = {
            "name": self.name,
            "image": C.normalized_image(str(self.spec.get("image", ""))),
            "imageID": C.image_id(str(self.spec.get("image", ""))) if self.container_id else "",
            "ready": running,
            "restartCount": self.restart_count,
            "started": running,
            "state": self.state,
            "lastState": self.last_state,
        }
        if self.container_id:
            s["containerID"] = self.container_id
        return s


@dataclass
class PodRuntime:
    uid: str
    namespace: str
    name: str
    node: str
    workdir: Path
    containers: list[Container]
    restart_policy: str
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    stop_reason: str = ""  # "delete" | "shutdown" | "lost" (its node died: nothing reports)
    grace: float = 30.0
    task: asyncio.Task[None] | None = None
    pod_ip: str = ""
    host_ip: str = ""

    @property
    def main(self) -> list[Container]:
        return [c for c in self.containers if not c.init]


class Kubelet:
    def __init__(
        self,
        store: Store,
        recorder: Recorder,
        layout: RunLayout,
        run_id: str,
        run_cgroup: Path | None,
        base_env: dict[str, str],
        crash_backoff: float,
        node_ip: Callable[[str], str],
    ) -> None:
        self.store = store
        self._terminating: set[asyncio.Future[None]] = set()
        self.recorder = recorder
        self.layout = layout
        self.run_id = run_id
        self.run_cgroup = run_cgroup
        self.base_env = base_env
        self.crash_backoff = crash_backoff
        self.node_ip = node_ip
        self.pods: dict[str, PodRuntime] = {}
        self.logs: dict[tuple[str, str], list[LogFile]] = {}
        self._ip_counter = 0

    # --- reconcile ------------------------------------------------------------------------

    def sync(self) -> None:
        nodes = {n["metadata"]["name"] for n in self.store.list("nodes")}
        for pod in self.store.list("pods"):
            meta = pod["metadata"]
            uid = meta["uid"]
            rt = self.pods.get(uid)
            deleting = bool(meta.get("deletionTimestamp"))
            if deleting:
                if rt is not None and rt.task is not None and not rt.task.done():
                    if not rt.stop.is_set():
                        grace = float(meta.get("deletionGracePeriodSeconds", 30))
                        self.request_stop(rt, grace, "delete")
                else:
                    if rt is None and pod.get("status", {}).get("phase") not in (
                        "Succeeded",
                        "Failed",
                    ):
                        # Never started here: it still gets a terminal phase (the kubelet's
                        # since 1.27, the pod GC's when unbound), so a Job counts it.
                        pod = self.store.mutate("pods", pod, _never_ran)
                    remove_pod(self.store, pod)
                continue
            node = pod["spec"].get("nodeName")
            if rt is None and node in nodes and pod.get("status", {}).get("phase") == "Pending":
                self._start(pod)

    def _start(self, pod: Obj) -> None:
        meta, spec = pod["metadata"], pod["spec"]
        node = spec["nodeName"]
        workdir = (
            self.layout.pods_dir / f"{meta.get('namespace', '')}_{meta['name']}_{meta['uid'][:8]}"
        )
        (workdir / "tmp").mkdir(parents=True, exist_ok=True)
        cs = [
            Container(c, init=True, sidecar=c.get("restartPolicy") == "Always")
            for c in spec.get("initContainers") or []
        ] + [Container(c) for c in spec.get("containers") or []]
        for c in cs:
            if c.init and not c.sidecar:
                c.state = C.waiting("PodInitializing")
        self._ip_counter += 1
        host_ip = self.node_ip(node)
        rt = PodRuntime(
            uid=meta["uid"],
            namespace=meta.get("namespace", ""),
            name=meta["name"],
            node=node,
            workdir=workdir,
            containers=cs,
            restart_policy=spec.get("restartPolicy", "Always"),
            grace=float(spec.get("terminationGracePeriodSeconds", 30)),
            host_ip=host_ip,
            pod_ip=host_ip if spec.get("hostNetwork") else f"127.0.3.{self._ip_counter % 250 + 2}",
        )
        self.pods[rt.uid] = rt
        rt.task = asyncio.ensure_future(self._run(rt))

    def current_pod(self, rt: PodRuntime) -> Obj | None:
        pod = self.store.get("pods", rt.namespace, rt.name)
        if pod is None or pod["metadata"]["uid"] != rt.uid:
            return None
        return pod

    # --- status -------------------------------------------------------------------------

    def publish(
        self, rt: PodRuntime, phase: str | None = None, extra: Callable[[Obj], None] | None = None
    ) -> None:
        pod = self.current_pod(rt)
        if pod is None or rt.stop_reason == LOST:
            return
        main_ready = all("running" in c.state for c in rt.main)
        inits_done = all(
            (c.sidecar and "running" in c.state) or ("terminated" in c.state and c.exit_code == 0)
            for c in rt.containers
            if c.init
        )

        def fill(p: Obj) -> None:
            st = p.setdefault("status", {})
            if phase is not None:
                st["phase"] = phase
            terminal = st.get("phase") in ("Succeeded", "Failed")
            st["hostIP"] = rt.host_ip
            st["hostIPs"] = [{"ip": rt.host_ip}]
            st["podIP"] = rt.pod_ip
            st["podIPs"] = [{"ip": rt.pod_ip}]
            st.setdefault("startTime", now_iso())
            st["qosClass"] = "BestEffort"
            conds = st.setdefault("conditions", [])
            ready = main_ready and not terminal
            why = "PodCompleted" if terminal else "ContainersNotReady"
            set_condition(
                conds,
                condition("PodReadyToStartContainers", "False" if terminal else "True", probe=True),
            )
            set_condition(
                conds,
                condition(
                    "Initialized",
                    "True" if inits_done or terminal else "False",
                    "" if inits_done or terminal else "ContainersNotInitialized",
                    probe=True,
                ),
            )
            not_ready = [c.name for c in rt.main if "running" not in c.state]
            msg = "" if ready else f"containers with unready status: [{' '.join(not_ready)}]"
            set_condition(
                conds,
                condition(
                    "Ready", "True" if ready else "False", "" if ready else why, msg, probe=True
                ),
            )
            set_condition(
                conds,
                condition(
                    "ContainersReady",
                    "True" if ready else "False",
                    "" if ready else why,
                    msg,
                    probe=True,
                ),
            )
            inits = [c.status() for c in rt.containers if c.init]
            if inits:
                st["initContainerStatuses"] = inits
            st["containerStatuses"] = [c.status() for c in rt.main]
            if extra is not None:
                extra(p)

        self.store.mutate("pods", pod, fill)

    def _event(self, rt: PodRuntime, type_: str, reason: str, message: str) -> None:
        pod = self.current_pod(rt)
        if pod is not None and rt.stop_reason != LOST:
            self.recorder.emit(pod, "Pod", type_, reason, message, "kubelet", rt.node)

    # --- lifecycle ----------------------------------------------------------------------

    async def _run(self, rt: PodRuntime) -> None:
        try:
            await self._run_inner(rt)
        except Exception:
            log.exception("pod %s/%s", rt.namespace, rt.name)
        finally:
            await self._kill_all(rt)
            remove = rt.stop_reason == "delete"
            pod = self.current_pod(rt)
            if remove and pod is not None:
                remove_pod(self.store, pod)
            self.store.changed.set()

    async def _run_inner(self, rt: PodRuntime) -> None:
        self.publish(rt)
        # Images and config first: a pod that cannot start stays Pending, as in life.
        while not rt.stop.is_set():
            problem = self._startup_problem(rt)
            if problem is None:
                break
            await self._wait_stop(rt, 2.0)
        for c in [c for c in rt.containers if c.init and not c.sidecar]:
            while not rt.stop.is_set():
                code = await self._run_container(rt, c)
                if code == 0 or rt.stop.is_set():
                    break
                if rt.restart_policy == "Never":
                    self.publish(rt, "Failed")
                    return
                await self._backoff(rt, c)
            if rt.stop.is_set():
                break
        if not rt.stop.is_set():
            self.publish(rt, "Running")
        runnable = [c for c in rt.containers if c.sidecar or not c.init]
        tasks = {
            c.name: asyncio.ensure_future(self._container_loop(rt, c))
            for c in runnable
            if not rt.stop.is_set()
        }
        loops = list(tasks.values())
        main = [tasks[c.name] for c in runnable if not c.sidecar and c.name in tasks]
        if main:
            await asyncio.wait(main)
        if not rt.stop.is_set():
            # Main containers are done: the kubelet stops the sidecars.
            self.request_stop(rt, rt.grace, "completed")
        if loops:
            await asyncio.wait(loops)
        self._finish(rt)

    def _finish(self, rt: PodRuntime) -> None:
        if rt.stop_reason == "shutdown":

            def shutdown(p: Obj) -> None:
                p["status"]["reason"] = "Terminated"
                p["status"]["message"] = SHUTDOWN_MESSAGE

            self.publish(rt, "Failed", shutdown)
            return
        # A deleted pod too ends Failed or Succeeded by its containers (the kubelet's
        # terminal phase since 1.27), so its Job counts it: exit 143 after SIGTERM.
        for c in rt.main:
            if c.exit_code is None and "terminated" not in c.state:
                c.state = {"terminated": _UNKNOWN}
                c.exit_code = 137
        ok = all(c.exit_code == 0 for c in rt.main)
        self.publish(rt, "Succeeded" if ok else "Failed")

    def _startup_problem(self, rt: PodRuntime) -> str | None:
        pod = self.current_pod(rt)
        if pod is None:
            rt.stop.set()
            return "gone"
        for c in rt.containers:
            err = image_reference_error(str(c.spec.get("image", "")))
            if err is not None:
                if c.state.get("waiting", {}).get("reason") != "InvalidImageName":
                    c.state = C.waiting("InvalidImageName", err)
                    self.publish(rt)
                    self._event(rt, "Warning", "InspectFailed", err)
                return err
            try:
                C.container_env(self.store, pod, c.spec)
            except C.ConfigError as exc:
                if c.state.get("waiting", {}).get("message") != str(exc):
                    c.state = C.waiting("CreateContainerConfigError", str(exc))
                    self.publish(rt)
                    self._event(rt, "Warning", "Failed", f"Error: {exc}")
                return str(exc)
        for c in rt.containers:
            if "waiting" in c.state and c.state["waiting"]["reason"] in (
                "InvalidImageName",
                "CreateContainerConfigError",
            ):
                c.state = C.waiting(
                    "PodInitializing" if c.init and not c.sidecar else "ContainerCreating"
                )
        return None

    async def _container_loop(self, rt: PodRuntime, c: Container) -> None:
        while not rt.stop.is_set():
            code = await self._run_container(rt, c)
            if rt.stop.is_set():
                return
            policy = "Always" if c.sidecar else rt.restart_policy
            if policy == "Always" or (policy == "OnFailure" and code != 0):
                await self._backoff(rt, c)
                continue
            return

    async def _backoff(self, rt: PodRuntime, c: Container) -> None:
        delay = min(self.crash_backoff * (2 ** max(c.restart_count, 0)), 300.0)
        c.last_state = {"terminated": c.state.get("terminated", {})}
        c.state = C.waiting(
            "CrashLoopBackOff",
            f"back-off {delay:g}s restarting failed container={c.name} "
            f"pod={rt.name}_{rt.namespace}({rt.uid})",
        )
        c.restart_count += 1
        self.publish(rt)
        self._event(
            rt,
            "Warning",
            "BackOff",
            "Back-off restarting failed container "
            f"{c.name} in pod {rt.name}_{rt.namespace}({rt.uid})",
        )
        await self._wait_stop(rt, delay)

    async def _wait_stop(self, rt: PodRuntime, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(rt.stop.wait(), seconds)

    def _log_path(self, rt: PodRuntime, c: Container) -> Path:
        return (
            self.layout.logs_dir
            / f"{rt.namespace}_{rt.name}_{rt.uid}"
            / c.name
            / f"{c.restart_count}.log"
        )

    async def _run_container(self, rt: PodRuntime, c: Container) -> int:
        pod = self.current_pod(rt)
        if pod is None:
            rt.stop.set()
            return 137
        try:
            own = C.container_env(self.store, pod, c.spec)
        except C.ConfigError as exc:
            c.state = C.waiting("CreateContainerConfigError", str(exc))
            self.publish(rt)
            return 1
        argv = C.container_argv(c.spec, own)
        c.marker = f"{self.run_id}:{rt.node}/{rt.uid}/{c.name}:{c.restart_count}"
        c.cgroup = make_host_cgroup(self.run_cgroup, f"{rt.uid[:13]}-{c.name}-{c.restart_count}")
        env = {
            **self.base_env,
            "HOME": str(rt.workdir),
            "TMPDIR": str(rt.workdir / "tmp"),
            "HOSTNAME": str(pod["spec"].get("hostname") or rt.name),
            **own,
            MARKER_ENV: c.marker,
        }
        logfile = LogFile(self._log_path(rt, c))
        self.logs.setdefault((rt.uid, c.name), []).append(logfile)
        if c.cgroup is not None:
            join = '{ echo $$ > "$0/cgroup.procs"; } 2>/dev/null; exec "$@"'
            argv = ["/bin/sh", "-c", join, str(c.cgroup), *argv]
        image = c.spec.get("image", "")
        self._event(rt, "Normal", "Pulled", f'Container image "{image}" already present on machine')
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                cwd=str(rt.workdir),
                env=env,
                start_new_session=True,
                preexec_fn=default_signals,
            )
        except OSError as exc:
            logfile.close()
            message = f"failed to create containerd task: exec: {exc}"
            c.exit_code = 128
            c.state = {
                "terminated": {
                    "exitCode": 128,
                    "reason": "StartError",
                    "message": message,
                    "startedAt": now_iso(),
                    "finishedAt": now_iso(),
                }
            }
            self.publish(rt)
            self._event(rt, "Warning", "Failed", f"Error: {message}")
            return 128
        c.proc = proc
        c.container_id = f"containerd://{os.urandom(32).hex()}"
        started = now_iso()
        c.state = {"running": {"startedAt": started}}
        c.exit_code = None
        self._event(rt, "Normal", "Created", f"Created container: {c.name}")
        self._event(rt, "Normal", "Started", f"Started container {c.name}")
        self.publish(rt)
        assert proc.stdout is not None and proc.stderr is not None
        pumps = asyncio.gather(
            _pump(proc.stdout, logfile, "stdout"), _pump(proc.stderr, logfile, "stderr")
        )
        rc = await _main_exit(proc)
        # The main process is gone: the rest of the container goes with it.
        await asyncio.to_thread(_kill_quietly, c.marker, c.cgroup)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(pumps, 5.0)
        logfile.close()
        oom = c.oom_killed or _cgroup_oom_kills(c.cgroup) > 0
        remove_cgroup(c.cgroup)
        c.proc, c.oom_killed = None, False
        code = 128 - rc if rc < 0 else rc
        c.exit_code = code
        c.state = {
            "terminated": {
                "exitCode": code,
                # containerd's reason: the cgroup's OOM kill, else by the exit code
                "reason": "OOMKilled" if oom and code else "Completed" if code == 0 else "Error",
                "startedAt": started,
                "finishedAt": now_iso(),
                "containerID": c.container_id,
            }
        }
        self.publish(rt)
        return code

    # --- stopping -----------------------------------------------------------------------

    def request_stop(self, rt: PodRuntime, grace: float, reason: str) -> None:
        if rt.stop.is_set():
            return
        rt.stop_reason = reason
        rt.stop.set()
        task = asyncio.ensure_future(self._terminate(rt, grace))
        self._terminating.add(task)
        task.add_done_callback(self._terminating.discard)

    async def _terminate(self, rt: PodRuntime, grace: float) -> None:
        running = [c for c in rt.containers if c.proc is not None]
        for c in running:
            self._event(rt, "Normal", "Killing", f"Stopping container {c.name}")
            if c.proc is not None and grace > 0:
                with contextlib.suppress(ProcessLookupError):
                    c.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + grace
        # The containers' own reapers clear c.proc when they exit: poll for that.
        while time.monotonic() < deadline and any(c.proc is not None for c in running):  # noqa: ASYNC110
            await asyncio.sleep(0.05)
        await self._kill_all(rt)

    async def _kill_all(self, rt: PodRuntime) -> None:
        prefix = f"{self.run_id}:{rt.node}/{rt.uid}/"
        await asyncio.to_thread(_kill_quietly, prefix, None)
        for c in rt.containers:
            if c.proc is not None:
                with contextlib.suppress(ProcessLookupError):
                    c.proc.kill()

    async def stop_pod(self, uid: str, grace: float, reason: str) -> None:
        """Stop one pod's containers (grace, then SIGKILL) and wait until they are gone."""
        rt = self.pods.get(uid)
        if rt is None or rt.task is None:
            return
        self.request_stop(rt, grace, reason)
        with contextlib.suppress(asyncio.CancelledError):
            await rt.task

    def lose(self, uid: str) -> None:
        """The pod's node died: its processes are SIGKILLed and its status stays as the API
        last heard it (the pod GC fails it when the node object goes)."""
        rt = self.pods.get(uid)
        if rt is not None:
            self.request_stop(rt, 0, LOST)

    def crash(
        self, pod: str, container: str, sig: int, oom: bool = False
    ) -> tuple[int | None, str]:
        """Send ``sig`` to the main process of ``container`` (default: the first running
        one) of the running pod named ``pod``: (its pid, the container), or (None, "").
        ``oom``: the OOM killer's SIGKILL, so the container ends reason ``OOMKilled``."""
        for rt in self.pods.values():
            if rt.name != pod or rt.stop.is_set():
                continue
            for c in rt.main:
                if c.proc is not None and (not container or c.name == container):
                    c.oom_killed = oom
                    with contextlib.suppress(ProcessLookupError):
                        c.proc.send_signal(sig)
                        return c.proc.pid, c.name
        return None, ""

    def is_running(self, uid: str) -> bool:
        rt = self.pods.get(uid)
        return rt is not None and rt.task is not None and not rt.task.done()

    def forget(self, uid: str) -> None:
        self.pods.pop(uid, None)

    async def stop_everything(self) -> None:
        """The cluster is going away: every pod's processes SIGKILLed now. A pod already in
        its graceful termination (a deleted workload, up to its 30 s grace) is killed too:
        waiting out that grace held the emulator's stop ~10 s (xpk's wrapper re-checks its
        trainer every 5 s after SIGTERM)."""
        already = []
        for rt in list(self.pods.values()):
            if rt.stop.is_set():
                already.append(rt)
            else:
                self.request_stop(rt, 0, "delete")
        if already:
            await asyncio.gather(*(self._kill_all(rt) for rt in already))
        tasks = [rt.task for rt in self.pods.values() if rt.task is not None]
        if tasks:
            await asyncio.wait(tasks, timeout=20)


# What the kubelet reports for a container that never ran when its pod is terminated.
_UNKNOWN = {
    "exitCode": 137,
    "reason": "ContainerStatusUnknown",
    "message": "The container could not be located when the pod was terminated",
}


def _never_ran(p: Obj) -> None:
    st = p.setdefault("status", {})
    st["phase"] = "Failed"
    for cs in st.get("containerStatuses") or []:
        if "terminated" not in (cs.get("state") or {}):
            cs["state"] = {"terminated": dict(_UNKNOWN)}


async def _main_exit(proc: asyncio.subprocess.Process) -> int:
    """The main process's exit status as soon as it exits. ``proc.wait()`` alone (3.11)
    returns only once its pipes close too, and a child still holding them (the trainer under
    xpk's wrapper, when the wrapper dies) would keep the container "running" for ever."""
    waiter = asyncio.ensure_future(proc.wait())
    while proc.returncode is None and not waiter.done():
        await asyncio.wait({waiter}, timeout=0.1)
    if proc.returncode is None:
        return await waiter
    waiter.cancel()
    return proc.returncode


async def _pump(stream: asyncio.StreamReader, logfile: LogFile, name: str) -> None:
    partial = b""
    while True:
        chunk = await stream.read(65536)
        if not chunk:
            break
        partial += chunk
        *lines, partial = partial.split(b"\n")
        for line in lines:
            logfile.write(name, line)
    if partial:
        logfile.write(name, partial)


def _cgroup_oom_kills(cgroup: Path | None) -> int:
    """How many processes the kernel's OOM killer took in ``cgroup`` (memory.events)."""
    if cgroup is None:
        return 0
    try:
        text = (cgroup / "memory.events").read_text()
    except OSError:
        return 0
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if key == "oom_kill" and value.strip().isdigit():
            return int(value)
    return 0


def _kill_quietly(prefix: str, cgroup: Path | None) -> None:
    try:
        kill_marked(prefix, cgroup)
    except TimeoutError as exc:
        log.error("%s", exc)
