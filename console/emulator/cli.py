"""``phantom pod up|status|preempt|recreate|down`` and the daemon's ``serve``.

``pod_main(argv)`` is the entry the main CLI wires to ``phantom pod``; results
go to stdout, progress and diagnostics to stderr; exit 2 for usage errors.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from console.emulator import client
from console.emulator.layout import (
    DEFAULT_ACCELERATOR_TYPE,
    DEFAULT_HOSTS,
    DEFAULT_NODE_NAME,
    DEFAULT_PROJECT,
    DEFAULT_READY_DELAY,
    DEFAULT_SSH_PORT,
    DEFAULT_ZONE,
    MAX_HOSTS,
    default_run_dir,
)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        raise SystemExit(f"{self.prog}: error: {message}") from None


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"port must be 0..65535 (0 = any free), got {value}")
    return value


def _hosts(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 1 <= value <= MAX_HOSTS:
        raise argparse.ArgumentTypeError(f"must be 1..{MAX_HOSTS}, got {value}")
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0 seconds, got {value}")
    return value


def _add_run_dir(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--run-dir",
        type=Path,
        default=None,
        help=f"state directory of the emulator (default {default_run_dir()})",
    )


def _add_pod_flags(p: argparse.ArgumentParser) -> None:
    _add_run_dir(p)
    p.add_argument("--hosts", type=_hosts, default=DEFAULT_HOSTS, help="number of hosts")
    p.add_argument(
        "--ssh-port",
        type=_port,
        default=DEFAULT_SSH_PORT,
        help="SSH port shared by all host IPs (0 = one free on all)",
    )
    p.add_argument("--api-port", type=_port, default=0, help="TPU API port (0 = a free one)")
    p.add_argument(
        "--ready-delay",
        type=_seconds,
        default=DEFAULT_READY_DELAY,
        help="seconds a created/recreated host spends in CREATING",
    )
    p.add_argument("--chaos-seed", type=int, default=None, help="seed of the random preemptions")
    p.add_argument(
        "--chaos-interval",
        type=_seconds,
        default=None,
        help="mean seconds between random preemptions (off unless given)",
    )


def build_parser(prog: str = "phantom pod") -> argparse.ArgumentParser:
    parser = _Parser(prog=prog, description="Local emulated spot TPU pod on loopback.")
    sub = parser.add_subparsers(dest="cmd", required=True, parser_class=_Parser)
    up = sub.add_parser("up", help="start the emulator and wait until the node is READY")
    _add_pod_flags(up)
    up.add_argument("--timeout", type=_seconds, default=120.0, help="seconds to wait for READY")
    up.add_argument("--json", action="store_true", help="print the status as JSON")
    st = sub.add_parser("status", help="show node and hosts")
    _add_run_dir(st)
    st.add_argument("--json", action="store_true", help="machine-readable output")
    for name, text in (
        ("preempt", "kill every process of HOST (or all) and mark it PREEMPTED"),
        ("recreate", "recreate HOST (or all): bare sandbox, new host key, READY after a delay"),
    ):
        p = sub.add_parser(name, help=text)
        _add_run_dir(p)
        p.add_argument("host", metavar="HOST", help="index, name, IP or 'all'")
        p.add_argument("--json", action="store_true", help="print the status as JSON")
        if name == "recreate":
            p.add_argument("--wait", action="store_true", help="wait until the node is READY")
    down = sub.add_parser("down", help="stop the emulator; no process is left behind")
    _add_run_dir(down)
    serve = sub.add_parser("serve", help="run the daemon in the foreground (used by `up`)")
    _add_pod_flags(serve)
    serve.add_argument("--project", default=DEFAULT_PROJECT)
    serve.add_argument("--zone", default=DEFAULT_ZONE)
    serve.add_argument("--node-name", default=DEFAULT_NODE_NAME)
    serve.add_argument("--accelerator-type", default=DEFAULT_ACCELERATOR_TYPE)
    return parser


def format_status(info: client.PodInfo) -> str:
    lines = [
        f"node      {info.node_path}  {info.state}  ({info.accelerator_type}, spot)",
        f"tpu api   {info.tpu_api}",
        f"ssh       user {info.ssh_user}  key {info.client_key}",
        f"          known_hosts {info.known_hosts}",
        f"bucket    {info.bucket_uri}",
        f"daemon    pid {info.pid}  run dir {info.run_dir}",
        "",
        f"{'#':>3}  {'host':<24} {'ip':<15} {'port':>5}  {'state':<10} host key",
    ]
    for h in info.hosts:
        lines.append(
            f"{h.index:>3}  {h.name:<24} {h.ip:<15} {h.ssh_port:>5}  {h.state:<10} "
            f"{h.host_key_fingerprint}"
        )
    return "\n".join(lines)


def _print_status(run_dir: Path, as_json: bool) -> int:
    status = client.status_json(run_dir)
    if status is None:
        print(
            f"no pod emulator is running for {run_dir}; start one with `phantom pod up`",
            file=sys.stderr,
        )
        return 1
    if as_json:
        print(json.dumps(status, indent=2))
    else:
        print(format_status(client.PodInfo.from_json(status)))
    return 0


def pod_main(argv: list[str]) -> int:
    """Entry point of ``phantom pod ...``; returns the exit code."""
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:
        if isinstance(exc.code, str):
            print(exc.code, file=sys.stderr)
            return 2
        return int(exc.code or 0)
    run_dir: Path = (args.run_dir or default_run_dir()).expanduser().absolute()
    try:
        if args.cmd == "serve":
            from console.emulator.daemon import DaemonConfig, run_daemon

            return run_daemon(
                DaemonConfig(
                    run_dir=run_dir,
                    hosts=args.hosts,
                    ssh_port=args.ssh_port,
                    api_port=args.api_port,
                    ready_delay=args.ready_delay,
                    project=args.project,
                    zone=args.zone,
                    node_name=args.node_name,
                    accelerator_type=args.accelerator_type,
                    chaos_seed=args.chaos_seed,
                    chaos_interval=args.chaos_interval or None,
                )
            )
        if args.cmd == "up":
            info = client.start_pod(
                run_dir,
                hosts=args.hosts,
                ssh_port=args.ssh_port,
                api_port=args.api_port,
                ready_delay=args.ready_delay,
                timeout=args.timeout,
                chaos_seed=args.chaos_seed,
                chaos_interval=args.chaos_interval or None,
                progress=lambda s: print(f"pod: {s}", file=sys.stderr),
            )
            return _print_status(run_dir, args.json) if info else 1
        if args.cmd == "status":
            return _print_status(run_dir, args.json)
        if args.cmd == "preempt":
            client.preempt(run_dir, args.host)
            return _print_status(run_dir, args.json)
        if args.cmd == "recreate":
            client.recreate(run_dir, args.host, wait=args.wait)
            return _print_status(run_dir, args.json)
        if args.cmd == "down":
            if client.stop_pod(run_dir):
                print(f"pod emulator for {run_dir} stopped", file=sys.stderr)
            else:
                print(f"no pod emulator was running for {run_dir}", file=sys.stderr)
            return 0
    except client.PodNotRunning as exc:
        print(f"error: {exc}; start one with `phantom pod up`", file=sys.stderr)
        return 1
    except client.PodError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    except TimeoutError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    raise AssertionError(f"unhandled command {args.cmd}")


def main() -> None:
    raise SystemExit(pod_main(sys.argv[1:]))
