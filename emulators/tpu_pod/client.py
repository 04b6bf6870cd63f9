"""Thin client for the pod emulator daemon (stdlib only, no grpc/asyncssh).

Used by tests, scripts, the ``phantom pod`` CLI and the console's local
provider hook. The daemon is ``python -m emulators.tpu_pod serve``; this module
spawns it detached and talks to it over a JSON-lines unix socket.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from emulators.kit import control
from emulators.kit.layout import absolute, read_path, read_text
from emulators.tpu_pod import accelerators
from emulators.tpu_pod.layout import (
    DEFAULT_HOSTS,
    DEFAULT_READY_DELAY,
    DEFAULT_SSH_PORT,
    MAX_HOSTS,
    RunLayout,
)
from emulators.tpu_pod.podinfo import (
    HostInfo,
    NodeSummary,
    PodAlreadyRunning,
    PodError,
    PodInfo,
    PodNotRunning,
    PodUsageError,
    PortInUse,
    ZoneInfo,
)
from emulators.tpu_pod.priority import MAX_NICE
from emulators.tpu_pod.procs import find_marked, kill_marked, marker_value
from emulators.tpu_pod.startargs import FAULT_KINDS, check_ports, pod_args

__all__ = [
    "FAULT_KINDS",
    "HostInfo",
    "NodeSummary",
    "PodAlreadyRunning",
    "PodError",
    "PodInfo",
    "PodNotRunning",
    "PodUsageError",
    "PortInUse",
    "ZoneInfo",
    "clear_faults",
    "fault",
    "maintenance",
    "pod_status",
    "preempt",
    "recreate",
    "set_zone",
    "start_pod",
    "stop_pod",
    "wait_for",
]

Notice = float | Literal["default"] | None
ERRORS = control.Errors("pod emulator", PodError, PodUsageError, PodNotRunning)


def _parse_host_count(hosts: int) -> int:
    if not 1 <= hosts <= MAX_HOSTS:
        raise PodUsageError(f"--hosts must be between 1 and {MAX_HOSTS}, got {hosts}")
    return hosts


def _hosts_for(hosts: int | None, accelerator_type: str | None, faithful: bool) -> int:
    """``--hosts``, or (GCP-faithful) the host count of ``--accelerator-type``."""
    if accelerator_type is not None:
        try:
            shape = accelerators.parse(accelerator_type)
        except ValueError:
            if faithful:
                raise PodUsageError(
                    f"--accelerator-type {accelerator_type!r}: not a Cloud TPU type; use e.g. "
                    "v4-8, v4-32, v5p-64, v5litepod-16 or v6e-8 (`phantom pod` README)"
                ) from None
        else:
            if faithful and hosts is not None and hosts != shape.hosts:
                raise PodUsageError(
                    f"--hosts {hosts} does not match --accelerator-type {accelerator_type} "
                    f"({shape.hosts} hosts); give one of them"
                )
            if faithful:
                hosts = shape.hosts
    return _parse_host_count(DEFAULT_HOSTS if hosts is None else hosts)


def request(run_dir: Path | str, payload: dict[str, Any], timeout: float = 30.0) -> dict[str, Any]:
    """Send one JSON request to the daemon and return its JSON reply.

    Raises PodNotRunning if no daemon serves ``run_dir``; PodError/PodUsageError
    if the daemon reports a failure.
    """
    address = RunLayout(Path(run_dir)).control_address
    return control.request(address, payload, timeout, ERRORS, run_dir)


def pod_status(run_dir: Path | str) -> PodInfo | None:
    """Current status, or None when no daemon runs for ``run_dir``."""
    try:
        reply = request(run_dir, {"op": "status"})
    except PodNotRunning:
        return None
    return PodInfo.from_json(reply["status"])


def status_json(run_dir: Path | str) -> dict[str, Any] | None:
    try:
        reply = request(run_dir, {"op": "status"})
    except PodNotRunning:
        return None
    status: dict[str, Any] = reply["status"]
    return status


def start_pod(
    run_dir: Path | str,
    hosts: int | None = None,
    ssh_port: int = DEFAULT_SSH_PORT,
    api_port: int = 0,
    ready_delay: float = DEFAULT_READY_DELAY,
    timeout: float = 60.0,
    chaos_seed: int | None = None,
    chaos_interval: float | None = None,
    progress: Callable[[str], None] | None = None,
    extra_args: list[str] | None = None,
    *,
    faithful: bool = False,
    rest_port: int = 0,
    metadata_port: int = 0,
    zones: Sequence[str] | None = None,
    capacity: int | str | Mapping[str, int] | None = None,
    quota: Sequence[str] = (),
    stockouts: Sequence[str] = (),
    stockout_seed: int | None = None,
    stockout_mean: float | None = None,
    preempt_grace: float | None = None,
    chaos_notice: float | None = None,
    chaos_faults: Sequence[str] = (),
    ssh_user: str | None = None,
    ssh_key: Path | str | None = None,
    until_ready: bool = True,
    accelerator_type: str | None = None,
    nice: int = 0,
) -> PodInfo:
    """Spawn the daemon detached for ``run_dir`` and wait until the node is READY
    (``until_ready=False``: until the daemon answers with its hosts, still coming up).

    ``ssh_port=0`` lets the daemon pick one port free on every host IP and
    ``api_port=0`` a free TPU API port (what tests use); ``rest_port`` and
    ``metadata_port`` likewise. ``faithful``: GCP-faithful mode (whole-slice
    preemption, whole-node Delete/Create only, external IPs). ``zones`` (default
    local-a, local-b, local-c), ``capacity`` (slices: one number for every zone or
    per zone), ``quota`` (GCP-faithful: "v4:64" or "local-a:v4:64"), ``stockouts`` ("local-a:0-180": seconds after start-up) and
    ``stockout_seed``/``stockout_mean`` (a seeded schedule) shape capacity.
    ``preempt_grace``: the notice ``preempt(..., notice="default")`` gives (30 s);
    ``chaos_notice``: the notice of chaos reclaims (0 = abrupt); ``chaos_faults``:
    fault kinds chaos may inject too. ``ssh_user``/``ssh_key``: the user and private
    key a client logs in with, like a GCP user's (default: user phantom and a key
    generated in the run dir). ``accelerator_type``: the pod's node's type (default
    v4-32); GCP-faithful, its host count is the type's (``hosts`` None, or the same).
    ``nice``: the CPU niceness (0..19) of the daemon and of every process of its hosts.
    Bad values raise PodUsageError before anything starts.
    """
    hosts = _hosts_for(hosts, accelerator_type, faithful)
    if ready_delay < 0:
        raise PodUsageError(f"--ready-delay must be >= 0 seconds, got {ready_delay}")
    if chaos_interval is not None and chaos_interval <= 0:
        raise PodUsageError(f"--chaos-interval must be > 0 seconds, got {chaos_interval}")
    if not 0 <= nice <= MAX_NICE:
        raise PodUsageError(f"--nice must be 0..{MAX_NICE}, got {nice}")
    extra = pod_args(
        faithful=faithful,
        rest_port=rest_port,
        metadata_port=metadata_port,
        zones=zones,
        capacity=capacity,
        quota=quota,
        stockouts=stockouts,
        stockout_seed=stockout_seed,
        stockout_mean=stockout_mean,
        preempt_grace=preempt_grace,
        chaos_notice=chaos_notice,
        chaos_faults=chaos_faults,
        ssh_user=ssh_user,
        ssh_key=ssh_key,
    )
    layout = RunLayout(absolute(run_dir))
    running = pod_status(layout.run_dir)
    if running is not None:
        raise PodAlreadyRunning(
            f"the pod emulator is already running for {layout.run_dir} (pid {running.pid}); "
            "use `pod status` or `pod down`",
            running.pid,
        )
    check_ports(hosts, ssh_port, api_port, rest_port, metadata_port, faithful)
    layout.run_dir.mkdir(parents=True, exist_ok=True)
    argv = [
        sys.executable,
        "-m",
        "emulators.tpu_pod",
        "serve",
        "--run-dir",
        str(layout.run_dir),
        "--hosts",
        str(hosts),
        "--ssh-port",
        str(ssh_port),
        "--api-port",
        str(api_port),
        "--ready-delay",
        str(ready_delay),
    ]
    if chaos_seed is not None:
        argv += ["--chaos-seed", str(chaos_seed)]
    if chaos_interval is not None:
        argv += ["--chaos-interval", str(chaos_interval)]
    if accelerator_type is not None:
        argv += ["--accelerator-type", accelerator_type]
    if nice:
        argv += ["--nice", str(nice)]
    argv += extra + (extra_args or [])
    proc = control.spawn(argv, layout)
    last_state = ""

    def ready() -> PodInfo | None:
        nonlocal last_state
        info = pod_status(layout.run_dir)
        if info is None:
            return None
        summary = _progress_line(info)
        if summary != last_state and progress is not None:
            progress(summary)
        last_state = summary
        return info if info.state == "READY" or (not until_ready and info.hosts) else None

    def exited(_code: int) -> PodError:
        return PodError(f"the pod emulator failed to start: {control.daemon_error(layout)}")

    def timed_out() -> PodError:
        stop_pod(layout.run_dir)
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        return PodError(
            f"the pod did not become READY within {timeout:.0f}s "
            f"(last: {last_state or 'no answer'}); see {layout.log_file}"
        )

    return control.wait_up(proc, ready, timeout, exited, timed_out)


def _progress_line(info: PodInfo) -> str:
    """Each host's state for a small pod; a count per state for a large one."""
    if len(info.hosts) <= 8:
        return f"{info.state} " + " ".join(f"{h.name}={h.state}" for h in info.hosts)
    counts: dict[str, int] = {}
    for h in info.hosts:
        counts[h.state] = counts.get(h.state, 0) + 1
    return f"{info.state} " + " ".join(f"{n} {s}" for s, n in counts.items()) + " hosts"


def stop_pod(run_dir: Path | str, timeout: float = 30.0) -> bool:
    """Stop the daemon and every process of every host. True if one was running.

    Falls back to SIGKILL of the daemon and a marker sweep, so nothing is left
    behind even if the daemon is wedged.
    """
    layout = RunLayout(absolute(run_dir))
    was_running = control.shut_down(
        layout,
        "emulators.tpu_pod",
        lambda: request(layout.run_dir, {"op": "shutdown"}, timeout=timeout),
        PodNotRunning,
        timeout,
    )
    run_id = read_run_id(layout.run_dir)
    if run_id:
        kill_marked(marker_value(run_id), read_cgroup(layout.run_dir))
    return was_running


def read_run_id(run_dir: Path | str) -> str:
    return read_text(RunLayout(Path(run_dir)).run_id_file)


def read_cgroup(run_dir: Path | str) -> Path | None:
    """The run's cgroup directory if the daemon uses one."""
    return read_path(RunLayout(Path(run_dir)).cgroup_file)


def leftover_pids(run_dir: Path | str) -> list[int]:
    """Pids of this run's hosts still alive (should be [] after stop_pod)."""
    run_id = read_run_id(run_dir)
    return find_marked(marker_value(run_id), read_cgroup(run_dir)) if run_id else []


def preempt(
    run_dir: Path | str, host: int | str, notice: Notice = None, wait: bool = True
) -> PodInfo:
    """Preempt one host (index, name or IP) or ``"all"``; returns the new status.

    ``notice``: None or 0 = abrupt (every process SIGKILLed at once, as before);
    a number of seconds = a preemption notice as on GCP (metadata
    ``instance/preempted`` TRUE, SIGTERM to every process, SIGKILL after the grace,
    then PREEMPTED); ``"default"`` = the daemon's ``preempt_grace``. With a notice and
    ``wait=False`` it returns once the notice is given (hosts PREEMPTING). In
    GCP-faithful mode any host takes the whole slice.
    """
    if notice is not None and notice != "default" and float(notice) < 0:
        raise PodUsageError(f"--notice must be >= 0 seconds, got {notice}")
    grace = 0.0 if notice is None else 600.0 if notice == "default" else float(notice)
    reply = request(
        run_dir,
        {"op": "preempt", "host": str(host), "notice": notice, "wait": wait},
        timeout=60.0 + (grace if wait else 0.0),
    )
    return PodInfo.from_json(reply["status"])


def fault(
    run_dir: Path | str,
    host: int | str,
    kind: str,
    seconds: float | None = None,
    duration: float | None = None,
) -> PodInfo:
    """Inject a fault (``FAULT_KINDS``) on ``host`` (or "all"); returns the new status.

    hang: SSH accepts and never answers, for ``seconds`` (default until cleared);
    silent-death: every process of the host dies, API and SSH say it is up;
    stale-api: the API shows the host's node as it is now for ``seconds`` (default 30);
    slow-api: every API call takes ``seconds`` (default 5) more, for ``duration``
    (default until cleared).
    """
    if kind not in FAULT_KINDS:
        raise PodUsageError(f"unknown fault {kind!r}: use one of {', '.join(FAULT_KINDS)}")
    payload: dict[str, Any] = {"op": "fault", "host": str(host), "kind": kind}
    payload.update(
        {k: v for k, v in (("seconds", seconds), ("duration", duration)) if v is not None}
    )
    return PodInfo.from_json(request(run_dir, payload)["status"])


def maintenance(run_dir: Path | str, host: int | str, event: str) -> PodInfo:
    """Set ``instance/maintenance-event`` on ``host`` (or "all"): ``NONE``,
    ``MIGRATE_ON_HOST_MAINTENANCE`` or ``TERMINATE_ON_HOST_MAINTENANCE`` (GCE's values, set
    about 60 s before a host maintenance). Only the metadata changes: a termination that
    follows is a ``preempt``."""
    reply = request(run_dir, {"op": "maintenance", "host": str(host), "event": event})
    return PodInfo.from_json(reply["status"])


async def async_maintenance(run_dir: Path | str, host: int | str, event: str) -> PodInfo:
    return await asyncio.to_thread(maintenance, run_dir, host, event)


def clear_faults(run_dir: Path | str, host: int | str = "all") -> PodInfo:
    """Clear the hang of ``host`` (or every host) and the API faults."""
    reply = request(run_dir, {"op": "fault", "host": str(host), "kind": "clear"})
    return PodInfo.from_json(reply["status"])


def set_zone(
    run_dir: Path | str,
    zone: str,
    capacity: int | None = None,
    stockout_s: float | None = None,
    clear_stockouts: bool = False,
) -> PodInfo:
    """Capacity control: ``capacity`` slices for ``zone``; a stockout from now for
    ``stockout_s`` seconds (0 = until cleared); ``clear_stockouts`` drops every window
    (applied before a new stockout)."""
    payload: dict[str, Any] = {"op": "zone", "zone": zone, "clear": clear_stockouts}
    if capacity is not None:
        payload["capacity"] = capacity
    if stockout_s is not None:
        payload["stockout_s"] = stockout_s
    return PodInfo.from_json(request(run_dir, payload)["status"])


def recreate(
    run_dir: Path | str, host: int | str, wait: bool = False, timeout: float = 60.0
) -> PodInfo:
    """Recreate a host or ``"all"`` (fresh sandbox and host key, CREATING then READY).

    GCP-faithful mode refuses a single host (PodError, exit 1: GCP has no such verb);
    ``"all"`` there is DeleteNode + CreateNode of the pod's node in its zone.
    """
    reply = request(run_dir, {"op": "recreate", "host": str(host)})
    info = PodInfo.from_json(reply["status"])
    if wait:
        info = wait_for(run_dir, lambda p: p.state == "READY", timeout, "state READY")
    return info


def wait_for(
    run_dir: Path | str,
    predicate: Callable[[PodInfo], bool],
    timeout: float = 60.0,
    what: str = "condition",
) -> PodInfo:
    """Poll the status until ``predicate`` holds; TimeoutError names ``what``."""
    deadline = time.monotonic() + timeout
    while True:
        info = pod_status(run_dir)
        if info is None:
            raise PodNotRunning(f"no pod emulator is running for {run_dir}")
        if predicate(info):
            return info
        if time.monotonic() > deadline:
            raise TimeoutError(f"pod did not reach {what} within {timeout}s (state {info.state})")
        time.sleep(0.05)


async def async_pod_status(run_dir: Path | str) -> PodInfo | None:
    return await asyncio.to_thread(pod_status, run_dir)


async def async_preempt(
    run_dir: Path | str, host: int | str, notice: Notice = None, wait: bool = True
) -> PodInfo:
    return await asyncio.to_thread(preempt, run_dir, host, notice, wait)


async def async_fault(
    run_dir: Path | str,
    host: int | str,
    kind: str,
    seconds: float | None = None,
    duration: float | None = None,
) -> PodInfo:
    return await asyncio.to_thread(fault, run_dir, host, kind, seconds, duration)


async def async_clear_faults(run_dir: Path | str, host: int | str = "all") -> PodInfo:
    return await asyncio.to_thread(clear_faults, run_dir, host)


async def async_set_zone(
    run_dir: Path | str,
    zone: str,
    capacity: int | None = None,
    stockout_s: float | None = None,
    clear_stockouts: bool = False,
) -> PodInfo:
    return await asyncio.to_thread(set_zone, run_dir, zone, capacity, stockout_s, clear_stockouts)


async def async_recreate(run_dir: Path | str, host: int | str, wait: bool = False) -> PodInfo:
    return await asyncio.to_thread(recreate, run_dir, host, wait)


async def async_start_pod(run_dir: Path | str, **kwargs: Any) -> PodInfo:
    return await asyncio.to_thread(start_pod, run_dir, **kwargs)


async def async_stop_pod(run_dir: Path | str) -> bool:
    return await asyncio.to_thread(stop_pod, run_dir)
