"""Thin client of the GKE emulator daemon (stdlib only).

The console, tests and ``python -m emulators.gke`` call these: ``start`` spawns the
daemon detached for a run dir and waits until its API answers; ``status`` reads it;
``preempt_slice`` sends a GKE-style preemption; ``stop`` ends the daemon and every
container process it started. Async variants run the same calls in a thread.
"""

from __future__ import annotations

import asyncio
import os
import sys
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from emulators.gke import layout as L
from emulators.kit import control
from emulators.kit.layout import absolute, read_path, read_text
from emulators.tpu_pod.procs import find_marked, kill_marked


class GkeError(Exception):
    """An emulator operation failed; ``exit_code`` is what the CLI returns."""

    exit_code = 1


class GkeUsageError(GkeError):
    exit_code = 2


class GkeNotRunning(GkeError):
    pass


@dataclass(frozen=True)
class SliceInfo:
    name: str  # the node pool, e.g. "phantom-gke-np-0"
    state: str  # READY | PREEMPTING | RECREATING | STALLED
    nodes: tuple[str, ...]


@dataclass(frozen=True)
class GkeInfo:
    run_dir: Path
    pid: int
    server: str  # http://127.0.0.1:PORT
    kubeconfig: Path  # for kubectl (--kubeconfig / KUBECONFIG) and kubernetes-asyncio
    context: str
    project: str
    location: str
    cluster: str
    bucket: Path  # gs://BUCKET/PATH inside containers maps to bucket/BUCKET/PATH
    slices: tuple[SliceInfo, ...]
    quota_stall: bool = False
    run_id: str = ""
    preemptions: tuple[dict[str, Any], ...] = field(default=())
    tpu_type: str = L.DEFAULT_TPU_TYPE

    @property
    def slice_names(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.slices)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> GkeInfo:
        return cls(
            run_dir=Path(d["run_dir"]),
            pid=int(d["pid"]),
            server=str(d["server"]),
            kubeconfig=Path(d["kubeconfig"]),
            context=str(d["context"]),
            project=str(d["project"]),
            location=str(d["location"]),
            cluster=str(d["cluster"]),
            bucket=Path(d["bucket"]),
            slices=tuple(SliceInfo(s["name"], s["state"], tuple(s["nodes"])) for s in d["slices"]),
            quota_stall=bool(d.get("quota_stall")),
            run_id=str(d.get("run_id", "")),
            preemptions=tuple(d.get("preemptions", ())),
            tpu_type=str(d.get("tpu_type") or L.DEFAULT_TPU_TYPE),
        )


ERRORS = control.Errors("GKE emulator", GkeError, GkeUsageError, GkeNotRunning)


def _layout(run_dir: Path | str | None) -> L.RunLayout:
    return L.RunLayout(absolute(run_dir or L.default_run_dir()))


def request(
    run_dir: Path | str | None, payload: dict[str, Any], timeout: float = 60.0
) -> dict[str, Any]:
    layout = _layout(run_dir)
    return control.request(layout.control_address, payload, timeout, ERRORS, layout.run_dir)


def status(run_dir: Path | str | None = None) -> GkeInfo | None:
    """The running emulator's status, or None if none runs for ``run_dir``."""
    try:
        return GkeInfo.from_json(request(run_dir, {"op": "status"})["status"])
    except GkeNotRunning:
        return None


def status_json(run_dir: Path | str | None = None) -> dict[str, Any] | None:
    try:
        data: dict[str, Any] = request(run_dir, {"op": "status"})["status"]
    except GkeNotRunning:
        return None
    return data


def start(
    run_dir: Path | str | None = None,
    slices: int = L.DEFAULT_SLICES,
    port: int = 0,
    recreate_delay: float = L.DEFAULT_RECREATE_DELAY,
    quota_stall: bool = False,
    timeout: float = 60.0,
    extra_args: list[str] | None = None,
    progress: Callable[[str], None] | None = None,
    tpu_type: str = L.DEFAULT_TPU_TYPE,
    cluster: str = L.CLUSTER,
) -> GkeInfo:
    """Spawn the daemon detached and wait until the API server answers /version.

    ``extra_args`` are daemon flags (``--bookmark-interval``, ``--log-idle-timeout``,
    ``--job-backoff`` ...; see ``python -m emulators.gke serve --help``). ``tpu_type``: the
    slices' TPU type (v4, v5p, v5litepod or v6e); ``cluster``: the GKE cluster's name.
    """
    problem = cluster_problem(slices, tpu_type, cluster)
    if problem:
        raise GkeUsageError(problem)
    if recreate_delay < 0:
        raise GkeUsageError(f"--recreate-delay must be >= 0 seconds, got {recreate_delay}")
    layout = _layout(run_dir)
    running = status(layout.run_dir)
    if running is not None:
        raise GkeError(
            f"the GKE emulator is already running for {layout.run_dir} "
            f"(pid {running.pid}); use `status` or `down`"
        )
    layout.run_dir.mkdir(parents=True, exist_ok=True)
    argv = [
        sys.executable,
        "-m",
        "emulators.gke",
        "serve",
        "--run-dir",
        str(layout.run_dir),
        "--slices",
        str(slices),
        "--port",
        str(port),
        "--recreate-delay",
        str(recreate_delay),
        "--tpu-type",
        tpu_type,
        "--cluster",
        cluster,
    ]
    if quota_stall:
        argv.append("--quota-stall")
    argv += extra_args or []
    env = {**os.environ, "NO_GCE_CHECK": "True"}
    proc = control.spawn(argv, layout, env)

    def ready() -> GkeInfo | None:
        info = status(layout.run_dir)
        return info if info is not None and _answers(info.server) else None

    def exited(returncode: int) -> GkeError:
        code = GkeUsageError if returncode == 2 else GkeError
        return code(f"the GKE emulator failed to start: {control.daemon_error(layout)}")

    def timed_out() -> GkeError:
        stop(layout.run_dir)
        return GkeError(
            f"the GKE emulator did not answer within {timeout:.0f}s; see {layout.log_file}"
        )

    info = control.wait_up(proc, ready, timeout, exited, timed_out)
    if progress is not None:
        progress(f"API server {info.server} ready; kubeconfig {info.kubeconfig}")
    return info


def cluster_problem(slices: int, tpu_type: str, cluster: str) -> str:
    """ "" if ``slices`` slices of ``tpu_type`` in a cluster named ``cluster`` can be
    emulated, else what is wrong, naming the flag."""
    if not 1 <= slices <= L.MAX_SLICES:
        return f"--slices must be between 1 and {L.MAX_SLICES}, got {slices}"
    try:
        shape = L.slice_shape(tpu_type)
    except ValueError as exc:
        return f"--tpu-type: {exc}"
    if slices * shape.nodes > L.MAX_TPU_NODES:
        return (
            f"--slices {slices} x --tpu-type {tpu_type} is {slices * shape.nodes} TPU nodes; "
            f"the emulator runs at most {L.MAX_TPU_NODES} (fewer slices or a smaller type)"
        )
    problem = L.cluster_name_problem(cluster)
    return f"--cluster: {problem}" if problem else ""


def _answers(server: str) -> bool:
    try:
        with urllib.request.urlopen(f"{server}/version", timeout=2) as resp:
            return bool(resp.status == 200)
    except OSError:
        return False


def stop(run_dir: Path | str | None = None, timeout: float = 30.0) -> bool:
    """Stop the daemon and every container process. True if one was running.

    Falls back to SIGKILL of the daemon and a sweep of the run's process markers.
    """
    layout = _layout(run_dir)
    was_running = control.shut_down(
        layout,
        "emulators.gke",
        lambda: request(layout.run_dir, {"op": "shutdown"}, timeout=timeout),
        GkeNotRunning,
        timeout,
    )
    run_id = read_text(layout.run_id_file)
    if run_id:
        kill_marked(f"{run_id}:", read_path(layout.cgroup_file))
    return was_running


def leftover_pids(run_dir: Path | str | None = None) -> list[int]:
    """Pids of this run's container processes still alive ([] after ``stop``)."""
    layout = _layout(run_dir)
    run_id = read_text(layout.run_id_file)
    return find_marked(f"{run_id}:", read_path(layout.cgroup_file)) if run_id else []


def preempt_slice(
    run_dir: Path | str | None, slice_ref: str | int, grace_s: float | None = None
) -> dict[str, Any]:
    """Preempt a TPU slice (index or node pool name) as GKE reclaims spot capacity.

    Returns once the notice is out (nodes NotReady, pods DisruptionTarget, SIGTERM sent):
    ``{"slice", "at", "grace", "nodes", "pods"}``. Pods get min(their
    terminationGracePeriodSeconds, ``grace_s``) (default 30 s) before SIGKILL.
    """
    payload: dict[str, Any] = {"op": "preempt", "slice": str(slice_ref)}
    if grace_s is not None:
        if grace_s < 0:
            raise GkeUsageError(f"--grace must be >= 0 seconds, got {grace_s}")
        payload["grace"] = grace_s
    result: dict[str, Any] = request(run_dir, payload)["preemption"]
    return result


def fail_node(run_dir: Path | str | None, node: str, repair_after_s: float = 2.0) -> dict[str, Any]:
    """The VM under ``node`` dies at once (faults.py): its containers SIGKILLed, the node
    Ready=Unknown; GKE repairs the slice after ``repair_after_s``. Returns
    ``{"node", "slice", "at", "repair_after", "pods"}``."""
    if repair_after_s < 0:
        raise GkeUsageError(f"--repair-after must be >= 0 seconds, got {repair_after_s}")
    payload = {"op": "fail-node", "node": node, "repair_after": repair_after_s}
    result: dict[str, Any] = request(run_dir, payload)["failure"]
    return result


def crash_container(
    run_dir: Path | str | None, pod: str, container: str = "", sig: int = 9
) -> dict[str, Any]:
    """Kill a running pod's container (its main process) with signal ``sig`` (SIGKILL, as
    the OOM killer does). Returns ``{"pod", "container", "signal", "pid", "at"}``."""
    payload = {"op": "crash", "pod": pod, "container": container, "signal": sig}
    result: dict[str, Any] = request(run_dir, payload)["crash"]
    return result


def oom_kill(run_dir: Path | str | None, pod: str, container: str = "") -> dict[str, Any]:
    """The OOM killer takes a running pod's container (its main process): exit 137, reason
    ``OOMKilled``. Returns ``{"pod", "container", "signal", "pid", "at"}``."""
    payload = {"op": "oom", "pod": pod, "container": container}
    result: dict[str, Any] = request(run_dir, payload)["crash"]
    return result


def restore_slice(run_dir: Path | str | None, slice_ref: str | int) -> GkeInfo:
    """Bring a deleted slice's nodes back now (ends a quota stall for it)."""
    return GkeInfo.from_json(request(run_dir, {"op": "restore", "slice": str(slice_ref)})["status"])


def set_quota_stall(run_dir: Path | str | None, stall: bool) -> GkeInfo:
    """Quota stall on: preempted slices never come back. Off: missing slices return."""
    return GkeInfo.from_json(request(run_dir, {"op": "quota", "stall": stall})["status"])


def compact(run_dir: Path | str | None) -> int:
    """Drop the watch history (etcd compaction): older resourceVersions now get 410 Gone."""
    return int(request(run_dir, {"op": "compact"})["compacted"])


async def async_start(run_dir: Path | str | None = None, **kwargs: Any) -> GkeInfo:
    return await asyncio.to_thread(start, run_dir, **kwargs)


async def async_stop(run_dir: Path | str | None = None) -> bool:
    return await asyncio.to_thread(stop, run_dir)


async def async_status(run_dir: Path | str | None = None) -> GkeInfo | None:
    return await asyncio.to_thread(status, run_dir)


async def async_preempt_slice(
    run_dir: Path | str | None, slice_ref: str | int, grace_s: float | None = None
) -> dict[str, Any]:
    return await asyncio.to_thread(preempt_slice, run_dir, slice_ref, grace_s)
