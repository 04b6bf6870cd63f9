"""``python -m emulators.gke up|status|preempt SLICE|down`` and the daemon's ``serve``.

``gke_main(argv)`` returns the exit code (2 for usage errors); results go to stdout,
progress and diagnostics to stderr.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path

from emulators.gke import client
from emulators.gke import layout as L


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        raise SystemExit(f"{self.prog}: error: {message}") from None


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0 seconds, got {value}")
    return value


def _count(lo: int, hi: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
        if not lo <= value <= hi:
            raise argparse.ArgumentTypeError(f"must be {lo}..{hi}, got {value}")
        return value

    return parse


def _run_dir(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--run-dir",
        type=Path,
        default=None,
        help=f"state directory of the emulator (default {L.default_run_dir()})",
    )


def _cluster_flags(p: argparse.ArgumentParser) -> None:
    _run_dir(p)
    p.add_argument(
        "--slices",
        type=_count(1, L.MAX_SLICES),
        default=L.DEFAULT_SLICES,
        help="v5p-64 slices (8 TPU nodes each) besides the cpu-np pool",
    )
    p.add_argument(
        "--port",
        type=_count(0, 65535),
        default=0,
        help="API server port on 127.0.0.1 (0 = a free one)",
    )
    p.add_argument(
        "--recreate-delay",
        type=_seconds,
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
        type=_seconds,
        default=L.DEFAULT_SHUTDOWN_GRACE,
        help="node shutdown grace cap on preemption (seconds)",
    )
    p.add_argument(
        "--bookmark-interval",
        type=_seconds,
        default=L.DEFAULT_BOOKMARK_INTERVAL,
        help="seconds between watch BOOKMARKs (allowWatchBookmarks=true)",
    )
    p.add_argument(
        "--log-idle-timeout",
        type=_seconds,
        default=L.DEFAULT_LOG_IDLE_TIMEOUT,
        help="close a log follow idle this long (0 = never)",
    )
    p.add_argument(
        "--log-max-duration",
        type=_seconds,
        default=0.0,
        help="close any log follow after this long (0 = never)",
    )
    p.add_argument(
        "--watch-history",
        type=_count(1, 10_000_000),
        default=L.DEFAULT_WATCH_HISTORY,
        help="change events kept for watch resume (older ones get 410 Gone)",
    )
    p.add_argument(
        "--job-backoff",
        type=_seconds,
        default=10.0,
        help="base of the Job controller's replacement back-off (seconds)",
    )
    p.add_argument(
        "--crash-backoff",
        type=_seconds,
        default=10.0,
        help="base of the kubelet's CrashLoopBackOff (seconds)",
    )
    p.add_argument(
        "--schedule-retry",
        type=_seconds,
        default=10.0,
        help="seconds between FailedScheduling events of a pending pod",
    )


def build_parser(prog: str = "python -m emulators.gke") -> argparse.ArgumentParser:
    parser = _Parser(
        prog=prog,
        description="Emulated GKE cluster (v5p-64 spot slices) on "
        "loopback, for kubectl and kubernetes-asyncio.",
    )
    sub = parser.add_subparsers(dest="cmd", required=True, parser_class=_Parser)
    up = sub.add_parser("up", help="start the emulator and wait until its API answers")
    _cluster_flags(up)
    _daemon_flags(up)
    up.add_argument("--timeout", type=_seconds, default=60.0)
    up.add_argument("--json", action="store_true", help="print the status as JSON")
    st = sub.add_parser("status", help="show the server, kubeconfig and slices")
    _run_dir(st)
    st.add_argument("--json", action="store_true")
    pre = sub.add_parser("preempt", help="preempt a slice as GKE reclaims spot TPUs")
    _run_dir(pre)
    pre.add_argument("slice", metavar="SLICE", help="slice index or node pool name")
    pre.add_argument(
        "--grace",
        type=_seconds,
        default=None,
        help="node shutdown grace (pods get min(their grace, this); default 30)",
    )
    pre.add_argument("--json", action="store_true")
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
    for s in info.slices:
        lines.append(
            f"{s.name:<22} {s.state:<11} {len(s.nodes)} x {L.TPU_MACHINE_TYPE} "
            f"({L.TPU_ACCELERATOR} {L.TPU_TOPOLOGY}, spot)"
        )
    return "\n".join(lines)


def _print_status(run_dir: Path, as_json: bool) -> int:
    data = client.status_json(run_dir)
    if data is None:
        print(
            f"no GKE emulator is running for {run_dir}; start one with `phantom gke up`",
            file=sys.stderr,
        )
        return 1
    print(json.dumps(data, indent=2) if as_json else format_status(client.GkeInfo.from_json(data)))
    return 0


def gke_main(argv: list[str]) -> int:
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:
        if isinstance(exc.code, str):
            print(exc.code, file=sys.stderr)
            return 2
        return int(exc.code or 0)
    run_dir: Path = (args.run_dir or L.default_run_dir()).expanduser().absolute()
    extra: list[str] = []
    if args.cmd in ("up", "serve"):
        for key in _DAEMON_KEYS:
            extra += [f"--{key.replace('_', '-')}", str(getattr(args, key))]
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
        if args.cmd == "down":
            if client.stop(run_dir):
                print(f"GKE emulator for {run_dir} stopped", file=sys.stderr)
            else:
                print(f"no GKE emulator was running for {run_dir}", file=sys.stderr)
            return 0
    except client.GkeNotRunning as exc:
        print(f"error: {exc}; start one with `phantom gke up`", file=sys.stderr)
        return 1
    except client.GkeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    raise AssertionError(f"unhandled command {args.cmd}")


def main() -> None:
    raise SystemExit(gke_main(sys.argv[1:]))
