"""Shell command lines that start and stop Ray on one host (emulated or a real VM).

Pure functions: no I/O, every value shlex-quoted. The same commands run on a
real TPU VM (one Ray node per machine, Ray's default ports) and on the local
emulator, where several Ray nodes share one machine under different
``127.0.0.x`` node IPs. For the latter, everything Ray would bind to a fixed
default port is either passed explicitly (GCS, dashboard, client server) or set
to 0 so the OS picks a free one (node manager, object manager, metrics export,
dashboard agent, runtime-env agent, worker ports). Ray's dashboard agent also
binds 127.0.0.1 next to the node IP, so its default fixed port 52365 would
clash between nodes of one machine.

Sizing (``--num-cpus``, ``--memory``, ``--object-store-memory``) is passed only when
given: by default a node advertises its host's own CPUs and memory, as Ray detects them
(a 240-vCPU TPU VM host is not a 2-CPU one). The emulator's hosts share one small machine,
so its access sets small numbers explicitly (``console.wiring.pod``).
"""

from __future__ import annotations

import json
import math
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field

from engine.contract import SWEEP_DRIVER_EXIT_WITHIN_S

MIB = 1024 * 1024
GIB = 1024 * MIB

# Ray's temp dir on every node. Unquoted on purpose: the emulator gives each
# host its own short $TMPDIR (as each VM has its own /tmp); a real VM has none
# set and gets Ray's usual /tmp/ray. Passing it explicitly matters because a
# worker node without --temp-dir reuses the *head's* temp dir path.
TEMP_DIR_SHELL = '"${TMPDIR:-/tmp}/ray"'

USER_PATH_PREFIX = 'export PATH="$HOME/.local/bin:$PATH" && '

# Environment every Ray node starts with (a node's own ``env`` wins). gRPC's fork handlers
# are for children that keep using gRPC; Ray's Python processes fork only to exec (Ray's
# client proxier starts each client's server with ``Popen(preexec_fn=...)`` while its
# other threads serve gRPC). With the handlers on, such a child can abort before its exec
# (SIGABRT), which the proxier reports as "Starting Ray client server failed"; measured
# here: 12 of 300 fork+execs beside live gRPC streams aborted, 0 of 300 with the handlers
# off. gRPC's fork_support.md prescribes GRPC_ENABLE_FORK_SUPPORT=false for fork-then-exec.
#
# RAY_JOB_STOP_WAIT_TIME_S: a stopped job (`ray job stop`, the SDK's stop_job, the console's
# teardown) gets SIGTERM from its JobSupervisor actor, which SIGKILLs the driver's process tree
# when it has not exited this many seconds later (Ray's default 3). The supervisor reads it
# from its own environment (``os.environ`` in ``JobSupervisor.run``, an int), which it inherits
# from the raylet of the node it runs on, so it is set on every node's `ray start`. 3 s cuts a
# sweep driver in the middle of Ray Tune's stop (~10 s): no state saved, trials not
# checkpointed. The engine's driver is gone within SWEEP_DRIVER_EXIT_WITHIN_S after SIGTERM;
# the margin covers the supervisor's own poll on a loaded host.
JOB_STOP_MARGIN_S = 5
JOB_STOP_WAIT_S = math.ceil(SWEEP_DRIVER_EXIT_WITHIN_S) + JOB_STOP_MARGIN_S
NODE_ENV: Mapping[str, str] = {
    "GRPC_ENABLE_FORK_SUPPORT": "false",
    "RAY_JOB_STOP_WAIT_TIME_S": str(JOB_STOP_WAIT_S),
}


@dataclass(frozen=True)
class RayNodeOptions:
    """What one Ray node (head or worker) on one host needs."""

    node_ip: str
    num_cpus: int | None = None  # None: the host's own (Ray detects it)
    resources: Mapping[str, float] = field(default_factory=lambda: {"TPU": 8})
    object_store_memory: int | None = None  # bytes; None: Ray's default share of memory
    memory: int | None = None  # bytes; None: the host's available memory
    node_name: str | None = None
    temp_dir: str | None = None  # None: TEMP_DIR_SHELL
    # 0 = the OS picks a free port; fixed ports only where a client must know them.
    dashboard_agent_listen_port: int = 0
    node_manager_port: int = 0
    object_manager_port: int = 0
    metrics_export_port: int = 0
    min_worker_port: int = 0
    max_worker_port: int = 0
    ray: str = "ray"
    user_path: bool = False  # prefix `export PATH=$HOME/.local/bin:$PATH` (pip --user VMs)
    # Extra environment for the Ray processes, e.g. {"RAY_health_check_period_ms": "500"}.
    env: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class RaySizing:
    """What one Ray node advertises; None: the host's own, as Ray detects it."""

    num_cpus: int | None = None
    object_store_memory: int | None = None  # bytes
    memory: int | None = None  # bytes

    def over(self, default: RaySizing) -> RaySizing:
        """These values where set, ``default``'s elsewhere."""
        return RaySizing(
            num_cpus=self.num_cpus if self.num_cpus is not None else default.num_cpus,
            object_store_memory=(
                self.object_store_memory
                if self.object_store_memory is not None
                else default.object_store_memory
            ),
            memory=self.memory if self.memory is not None else default.memory,
        )


@dataclass(frozen=True)
class RayHeadOptions:
    """Ports a client reaches on the head; dashboard bound to loopback only."""

    gcs_port: int = 6379
    dashboard_port: int = 8265
    dashboard_host: str = "127.0.0.1"
    client_server_port: int = 10001


def gcs_address(head_ip: str, gcs_port: int) -> str:
    return f"{head_ip}:{gcs_port}"


def resources_json(resources: Mapping[str, float]) -> str:
    """Ray's --resources value; whole numbers as ints ({"TPU": 8})."""
    clean = {k: int(v) if float(v).is_integer() else float(v) for k, v in resources.items()}
    return json.dumps(clean, separators=(",", ":"), sort_keys=True)


def _check(node: RayNodeOptions) -> None:
    if node.num_cpus is not None and node.num_cpus < 0:
        raise ValueError(f"num_cpus must be >= 0, got {node.num_cpus}")
    if node.object_store_memory is not None and node.object_store_memory < 75 * MIB:
        raise ValueError(
            f"object_store_memory must be >= 75 MiB (Ray's minimum), got {node.object_store_memory}"
        )
    for key in ("CPU", "GPU", "memory", "object_store_memory"):
        if key in node.resources:
            raise ValueError(f"resources must not set {key!r}; use the dedicated option")


def _opt(name: str, value: object) -> str:
    return f"--{name}={shlex.quote(str(value))}"


def _node_args(node: RayNodeOptions) -> list[str]:
    _check(node)
    args = [_opt("node-ip-address", node.node_ip)]
    if node.num_cpus is not None:
        args.append(_opt("num-cpus", node.num_cpus))
    args.append(_opt("resources", resources_json(node.resources)))
    if node.object_store_memory is not None:
        args.append(_opt("object-store-memory", node.object_store_memory))
    if node.memory is not None:
        args.append(_opt("memory", node.memory))
    if node.node_name:
        args.append(_opt("node-name", node.node_name))
    temp = shlex.quote(node.temp_dir) if node.temp_dir else TEMP_DIR_SHELL
    args.append(f"--temp-dir={temp}")
    args += [
        _opt("dashboard-agent-listen-port", node.dashboard_agent_listen_port),
        _opt("node-manager-port", node.node_manager_port),
        _opt("object-manager-port", node.object_manager_port),
        _opt("min-worker-port", node.min_worker_port),
        _opt("max-worker-port", node.max_worker_port),
    ]
    if node.metrics_export_port:
        args.append(_opt("metrics-export-port", node.metrics_export_port))
    args.append("--disable-usage-stats")
    return args


def _join(node: RayNodeOptions, args: list[str]) -> str:
    for name in node.env:
        if not name.isidentifier():
            raise ValueError(f"env: {name!r} is not a valid environment variable name")
    env = {**NODE_ENV, **node.env}
    assigns = [f"{name}={shlex.quote(value)}" for name, value in sorted(env.items())]
    cmd = " ".join([*assigns, shlex.quote(node.ray), "start", *args])
    return (USER_PATH_PREFIX if node.user_path else "") + cmd


def head_start_command(node: RayNodeOptions, head: RayHeadOptions | None = None) -> str:
    """``ray start --head`` for ``node``; dashboard on ``head.dashboard_host`` only."""
    head = head or RayHeadOptions()
    args = [
        "--head",
        _opt("port", head.gcs_port),
        "--include-dashboard=true",
        _opt("dashboard-host", head.dashboard_host),
        _opt("dashboard-port", head.dashboard_port),
        _opt("ray-client-server-port", head.client_server_port),
        *_node_args(node),
    ]
    return _join(node, args)


def worker_start_command(node: RayNodeOptions, gcs: str) -> str:
    """``ray start --address`` joining the cluster whose GCS is ``gcs`` (ip:port)."""
    return _join(node, [_opt("address", gcs), *_node_args(node)])


def stop_command(ray: str = "ray", force: bool = True, user_path: bool = False) -> str:
    """``ray stop -f``: on the emulator it only stops that host's Ray (see rayshim)."""
    cmd = " ".join([shlex.quote(ray), "stop", *(["-f"] if force else [])])
    return (USER_PATH_PREFIX if user_path else "") + cmd


def drain_command(
    node_id: str,
    gcs: str,
    deadline_s: int,
    message: str,
    ray: str = "ray",
    user_path: bool = False,
) -> str:
    """``ray drain-node`` with reason PREEMPTION: the GCS places nothing new on the node, and
    knows it dies in ``deadline_s`` (Ray's hidden CLI over the DrainNode RPC, Ray >= 2.10)."""
    cmd = " ".join(
        [
            shlex.quote(ray),
            "drain-node",
            _opt("address", gcs),
            _opt("node-id", node_id),
            "--reason=DRAIN_NODE_REASON_PREEMPTION",
            _opt("reason-message", message),
            _opt("deadline-remaining-seconds", max(0, int(deadline_s))),
        ]
    )
    return (USER_PATH_PREFIX if user_path else "") + cmd
