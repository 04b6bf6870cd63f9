"""``python -m emulators.gke up|status|preempt SLICE|down`` and the daemon's ``serve``.

``gke_main(argv)`` returns the exit code (2 for usage errors); results go to stdout,
progress and diagnostics to stderr.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from emulators.gke import client
from emulators.gke import layout as L
from emulators.kit import cli as kit

WORDS = kit.Words("GKE emulator", "phantom gke")


def _run_dir(p: argparse.ArgumentParser) -> None:
    kit.add_run_dir(p, L.default_run_dir())


def _tpu_type(text: str) -> str:
    """A TPU type of a GKE TPU node pool (the Cloud TPU table's v4, v5p, v5litepod, v6e)."""
    try:
        L.slice_shape(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def _cluster_name(text: str) -> str:
    problem = L.cluster_name_problem(text)
    if problem:
        raise argparse.ArgumentTypeError(problem)
    return text


def _cluster_flags(p: argparse.ArgumentParser) -> None:
    _run_dir(p)
    p.add_argument(
        "--slices",
        type=kit.count(1, L.MAX_SLICES),
        default=L.DEFAULT_SLICES,
        help="TPU slices (node pools <cluster>-np-<i>) besides the cpu-np pool",
    )
    p.add_argument(
        "--tpu-type",
        type=_tpu_type,
        default=L.DEFAULT_TPU_TYPE,
        help="TPU type of every slice: v4-N, v5p-N, v5litepod-N or v6e-N, 4 chips a node "
        f"(v4-32: 4 nodes, v5p-64: 8, v5litepod-16: 4, v6e-16: 4; default {L.DEFAULT_TPU_TYPE})",
    )
    p.add_argument(
        "--cluster",
        type=_cluster_name,
        default=L.CLUSTER,
        help=f"the GKE cluster's name, as xpk's --cluster names it (default {L.CLUSTER})",
    )
    p.add_argument(
        "--port",
        type=kit.count(0, 65535),
        default=0,
        help="API server port on 127.0.0.1 (0 = a free one)",
    )
    p.add_argument(
        "--recreate-delay",
        type=kit.seconds,
        default=L.DEFAULT_RECREATE_DELAY,
        help="seconds before a preempted slice's nodes come back",
    )
    p.add_argument(
        "--quota-stall",
        action="store_true",
        help="preempted slices never come back (pods stay Pending)",
    )


def _daemon_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--shutdown-grace",
        type=kit.seconds,
        default=L.DEFAULT_SHUTDOWN_GRACE,
        help="node shutdown grace cap on preemption (seconds)",
    )
    p.add_argument(
        "--bookmark-interval",
        type=kit.seconds,
        default=L.DEFAULT_BOOKMARK_INTERVAL,
        help="seconds between watch BOOKMARKs (allowWatchBookmarks=true)",
    )
    p.add_argument(
        "--log-idle-timeout",
        type=kit.seconds,
        default=L.DEFAULT_LOG_IDLE_TIMEOUT,
        help="close a log follow idle this long (0 = never)",
    )
    p.add_argument(
        "--log-max-duration",
        type=kit.seconds,
        default=0.0,
        help="close any log follow after this long (0 = never)",
    )
    p.add_argument(
        "--watch-history",
        type=kit.count(1, 10_000_000),
        default=L.DEFAULT_WATCH_HISTORY,
        help="change events kept for watch resume (older ones get 410 Gone)",
    )
    p.add_argument(
        "--job-backoff",
        type=kit.seconds,
        default=10.0,
        help="base of the Job controller's replacement back-off (seconds)",
    )
    p.add_argument(
        "--crash-backoff",
        type=kit.seconds,
        default=10.0,
        help="base of the kubelet's CrashLoopBackOff (seconds)",
    )
    p.add_argument(
        "--schedule-retry",
        type=kit.seconds,
        default=10.0,
        help="seconds between FailedScheduling events of a pending pod",
    )


def build_parser(prog: str = "phantom gke") -> argparse.ArgumentParser:
    parser = kit.Parser(
        prog=prog,
        description="Emulated GKE cluster (spot TPU slices: v4, v5p, v5e, v6e) on "
        "loopback, for kubectl, kubernetes-asyncio and xpk.",
    )
    sub = parser.add_subparsers(dest="cmd", required=True, parser_class=kit.Parser)
    up = sub.add_parser("up", help="start the emulator and wait until its API answers")
    _cluster_flags(up)
    _daemon_flags(up)
    up.add_argument(
        "--timeout",
        type=kit.positive_seconds,
        default=60.0,
        metavar="S",
        help="seconds to wait for the API server (default 60); on failure it is stopped",
    )
    up.add_argument("--json", action="store_true", help="print the status as JSON")
    st = sub.add_parser("status", help="show the server, kubeconfig and slices")
    _run_dir(st)
    st.add_argument("--json", action="store_true")
    pre = sub.add_parser("preempt", help="preempt a slice as GKE reclaims spot TPUs")
    _run_dir(pre)
    pre.add_argument("slice", metavar="SLICE", help="slice index or node pool name")
    pre.add_argument(
        "--grace",
        type=kit.seconds,
        default=None,
        help="node shutdown grace (pods get min(their grace, this); default 30)",
    )
    pre.add_argument("--json", action="store_true")
    fail = sub.add_parser("fail-node", help="a node's VM dies at once; GKE repairs its slice")
    _run_dir(fail)
    fail.add_argument("node", metavar="NODE", help="node name (kubectl get nodes)")
    fail.add_argument(
        "--repair-after",
        type=kit.seconds,
        default=2.0,
        help="seconds before auto-repair recreates the slice (default 2)",
    )
    fail.add_argument("--json", action="store_true")
    crash = sub.add_parser("crash", help="kill a running pod's container (default SIGKILL)")
    _run_dir(crash)
    crash.add_argument("pod", metavar="POD", help="pod name")
    crash.add_argument("--container", default="", help="container name (default: the first)")
    crash.add_argument(
        "--signal", type=kit.count(1, 64), default=9, help="signal number (default 9)"
    )
    crash.add_argument("--json", action="store_true")
    oom = sub.add_parser("oom", help="the OOM killer takes a running pod's container (137)")
    _run_dir(oom)
    oom.add_argument("pod", metavar="POD", help="pod name")
    oom.add_argument("--container", default="", help="container name (default: the first)")
    oom.add_argument("--json", action="store_true")
    down = sub.add_parser("down", help="stop the emulator; no process is left behind")
    _run_dir(down)
    serve = sub.add_parser("serve", help="run the daemon in the foreground (used by `up`)")
    _cluster_flags(serve)
    _daemon_flags(serve)
    return parser


_DAEMON_KEYS = (
    "shutdown_grace",
    "bookmark_interval",
    "log_idle_timeout",
    "log_max_duration",
    "watch_history",
    "job_backoff",
    "crash_backoff",
    "schedule_retry",
)


def format_status(info: client.GkeInfo) -> str:
    lines = [
        f"cluster     {info.cluster}  ({info.project}, {info.location})  emulated GKE 1.33",
        f"server      {info.server}",
        f"kubeconfig  {info.kubeconfig}  (context {info.context})",
        f"bucket      {info.bucket}  (gs://BUCKET/PATH in containers)",
        f"daemon      pid {info.pid}  run dir {info.run_dir}"
        + ("  QUOTA STALL" if info.quota_stall else ""),
        "",
        f"{'slice':<22} {'state':<11} nodes",
    ]
    shape = L.slice_shape(info.tpu_type)
    for s in info.slices:
        lines.append(
            f"{s.name:<22} {s.state:<11} {len(s.nodes)} x {shape.machine_type} "
            f"({info.tpu_type}: {shape.accelerator} {shape.topology}, spot)"
        )
    return "\n".join(lines)


def _print_status(run_dir: Path, as_json: bool) -> int:
    data = client.status_json(run_dir)
    return kit.print_status(
        WORDS, run_dir, data, as_json, lambda d: format_status(client.GkeInfo.from_json(d))
    )


def gke_main(argv: list[str]) -> int:
    args = kit.parse(build_parser(), argv)
    if isinstance(args, int):
        return args
    run_dir = kit.run_dir_of(args, L.default_run_dir)
    extra: list[str] = []
    if args.cmd in ("up", "serve"):
        for key in _DAEMON_KEYS:
            extra += [f"--{key.replace('_', '-')}", str(getattr(args, key))]
    if args.cmd in ("up", "serve"):
        problem = client.cluster_problem(args.slices, args.tpu_type, args.cluster)
        if problem:
            kit.error(problem)
            return 2
    try:
        if args.cmd == "serve":
            from emulators.gke.daemon import DaemonConfig, run_daemon

            return run_daemon(
                DaemonConfig(
                    run_dir=run_dir,
                    slices=args.slices,
                    port=args.port,
                    recreate_delay=args.recreate_delay,
                    quota_stall=args.quota_stall,
                    tpu_type=args.tpu_type,
                    cluster=args.cluster,
                    **{k: getattr(args, k) for k in _DAEMON_KEYS},
                )
            )
        if args.cmd == "up":
            client.start(
                run_dir,
                slices=args.slices,
                port=args.port,
                recreate_delay=args.recreate_delay,
                quota_stall=args.quota_stall,
                timeout=args.timeout,
                tpu_type=args.tpu_type,
                cluster=args.cluster,
                extra_args=extra,
                progress=lambda s: print(f"gke: {s}", file=sys.stderr),
            )
            return _print_status(run_dir, args.json)
        if args.cmd == "status":
            return _print_status(run_dir, args.json)
        if args.cmd == "preempt":
            result = client.preempt_slice(run_dir, args.slice, args.grace)
            if args.json:
                print(json.dumps(result, indent=2))
            else:
                print(
                    f"slice {result['slice']}: preemption notice sent to "
                    f"{len(result['nodes'])} nodes, {len(result['pods'])} pods "
                    f"(grace {result['grace']:g}s)"
                )
            return 0
        if args.cmd in ("fail-node", "crash", "oom"):
            if args.cmd == "fail-node":
                result = client.fail_node(run_dir, args.node, args.repair_after)
                text = (
                    f"node {result['node']}: down, {len(result['pods'])} pods lost; slice "
                    f"{result['slice']} repaired in {result['repair_after']:g}s"
                )
            elif args.cmd == "oom":
                result = client.oom_kill(run_dir, args.pod, args.container)
                text = f"pod {result['pod']}: container {result['container']} OOM-killed"
            else:
                result = client.crash_container(run_dir, args.pod, args.container, args.signal)
                text = (
                    f"pod {result['pod']}: container {result['container']} sent {result['signal']}"
                )
            print(json.dumps(result, indent=2) if args.json else text)
            return 0
        if args.cmd == "down":
            return kit.report_down(WORDS, run_dir, client.stop(run_dir))
    except client.GkeNotRunning as exc:
        kit.error(f"{exc}; {WORDS.hint}")
        return 1
    except client.GkeError as exc:
        kit.error(exc)
        return exc.exit_code
    raise AssertionError(f"unhandled command {args.cmd}")


def main() -> None:
    raise SystemExit(gke_main(sys.argv[1:]))
