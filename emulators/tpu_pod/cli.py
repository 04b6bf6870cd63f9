"""``phantom pod up|status|preempt|recreate|fault|zone|down`` and the daemon's ``serve``.

``pod_main(argv)`` is the entry the main CLI wires to ``phantom pod``; results
go to stdout, progress and diagnostics to stderr; exit 2 for usage errors.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from emulators.kit import cli as kit
from emulators.kit import validate
from emulators.tpu_pod import accelerators, client
from emulators.tpu_pod.accelerators import parse_quota
from emulators.tpu_pod.layout import (
    DEFAULT_ACCELERATOR_TYPE,
    DEFAULT_HOSTS,
    DEFAULT_NODE_NAME,
    DEFAULT_PREEMPT_GRACE,
    DEFAULT_PROJECT,
    DEFAULT_READY_DELAY,
    DEFAULT_SSH_PORT,
    DEFAULT_ZONE,
    DEFAULT_ZONES,
    MAX_HOSTS,
    SSH_USER,
    default_run_dir,
)
from emulators.tpu_pod.priority import MAX_NICE, lower_priority
from emulators.tpu_pod.zones import parse_capacity, parse_stockout, parse_zones

WORDS = kit.Words("pod emulator", "phantom pod")


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


def _nice(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 <= value <= MAX_NICE:
        raise argparse.ArgumentTypeError(f"must be 0..{MAX_NICE}, got {value}")
    return value


def _accelerator_type(text: str) -> str:
    """A Cloud TPU type from the table (``accelerators``), in either mode: an unknown one
    would start a pod no real API could create."""
    try:
        accelerators.parse(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text[:40]!r}: not a Cloud TPU type; use e.g. v4-8, v4-32, v5p-64, v5litepod-16 "
            "or v6e-8 (`phantom pod` README)"
        ) from None
    return text


def _zones(text: str) -> tuple[str, ...]:
    try:
        return parse_zones(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("--zones: ")) from None


def _fault_kinds(text: str) -> tuple[str, ...]:
    kinds = tuple(k.strip() for k in text.split(",") if k.strip())
    for kind in kinds:
        if kind not in client.FAULT_KINDS:
            raise argparse.ArgumentTypeError(
                f"unknown fault {kind!r}; use {','.join(client.FAULT_KINDS)}"
            )
    return kinds


def _add_run_dir(p: argparse.ArgumentParser) -> None:
    kit.add_run_dir(p, default_run_dir())


def _add_pod_flags(p: argparse.ArgumentParser) -> None:
    _add_run_dir(p)
    p.add_argument(
        "--hosts",
        type=_hosts,
        default=None,
        help=f"number of hosts (default {DEFAULT_HOSTS}; GCP-faithful: the type's)",
    )
    p.add_argument(
        "--accelerator-type",
        type=_accelerator_type,
        default=None,
        help=f"the node's TPU type (default {DEFAULT_ACCELERATOR_TYPE}); GCP-faithful, "
        "its host count is the pod's (v4-8: 1, v4-32: 4, v5p-64: 8)",
    )
    p.add_argument(
        "--ssh-port",
        type=_port,
        default=DEFAULT_SSH_PORT,
        help="SSH port shared by all host IPs (0 = one free on all)",
    )
    p.add_argument("--api-port", type=_port, default=0, help="TPU API port (0 = a free one)")
    p.add_argument(
        "--ready-delay",
        type=kit.seconds,
        default=DEFAULT_READY_DELAY,
        help="seconds a created/recreated host spends in CREATING",
    )
    p.add_argument("--chaos-seed", type=int, default=None, help="seed of the random preemptions")
    p.add_argument(
        "--chaos-interval",
        type=kit.seconds,
        default=None,
        help="mean seconds between random preemptions (off unless given)",
    )
    p.add_argument(
        "--chaos-notice",
        type=kit.seconds,
        default=None,
        help="preemption notice of chaos reclaims, seconds (default 0: abrupt SIGKILL)",
    )
    p.add_argument(
        "--chaos-faults",
        type=_fault_kinds,
        default=(),
        help=f"faults chaos may inject besides reclaims ({','.join(client.FAULT_KINDS)})",
    )
    p.add_argument(
        "--faithful",
        action="store_true",
        help="GCP-faithful: a reclaim takes the whole slice, only whole-node Delete/Create, "
        "external IPs",
    )
    p.add_argument("--rest-port", type=_port, default=0, help="REST TPU API port (0 = free)")
    p.add_argument(
        "--metadata-port",
        type=_port,
        default=0,
        help="GCE metadata server port on every host IP (0 = one free on all)",
    )
    p.add_argument(
        "--zones",
        type=_zones,
        default=DEFAULT_ZONES,
        help=f"zones, comma-separated (default {','.join(DEFAULT_ZONES)})",
    )
    p.add_argument(
        "--capacity",
        action="append",
        default=[],
        metavar="N|ZONE:N,...",
        help="slices per zone (default 1 each); a PREEMPTED node holds its slice",
    )
    p.add_argument(
        "--quota",
        action="append",
        default=[],
        metavar="FAMILY:N|ZONE:FAMILY:N,...",
        help="GCP-faithful quota per zone and family (v4:64 = 64 TensorCores of v4 in every "
        "zone); default: the zone's capacity in slices of the pod's own type",
    )
    p.add_argument(
        "--stockout",
        action="append",
        default=[],
        metavar="ZONE:START-END",
        help="no capacity in ZONE from START to END seconds after start-up (END empty: forever)",
    )
    p.add_argument("--stockout-seed", type=int, default=None, help="seeded stockout schedule")
    p.add_argument(
        "--stockout-mean",
        type=kit.seconds,
        default=180.0,
        help="mean length of seeded stockouts, seconds (gaps 3x as long)",
    )
    p.add_argument(
        "--preempt-grace",
        type=kit.seconds,
        default=DEFAULT_PREEMPT_GRACE,
        help="notice of `preempt --notice` without a value, seconds",
    )
    p.add_argument("--ssh-user", default=None, help="SSH user of every host (default phantom)")
    p.add_argument(
        "--nice",
        type=_nice,
        default=0,
        help="CPU niceness of the daemon and every process of its hosts (0..19; the "
        "console starts its own pod at 19 so busy hosts cannot take its frames)",
    )
    p.add_argument(
        "--ssh-key",
        type=validate.key_file,
        default=None,
        help="private key to log in with (its public half is authorized on every host; "
        "default: a key generated in the run dir)",
    )


def build_parser(prog: str = "phantom pod") -> argparse.ArgumentParser:
    parser = kit.Parser(prog=prog, description="Local emulated spot TPU pod on loopback.")
    sub = parser.add_subparsers(dest="cmd", required=True, parser_class=kit.Parser)
    up = sub.add_parser("up", help="start the emulator and wait until the node is READY")
    _add_pod_flags(up)
    up.add_argument(
        "--timeout",
        type=kit.positive_seconds,
        default=120.0,
        help="seconds to wait for READY (on failure the daemon is stopped)",
    )
    up.add_argument("--json", action="store_true", help="print the status as JSON")
    up.add_argument(
        "--zone",
        default=DEFAULT_ZONE,
        help=f"the zone the node starts in, one of --zones (default {DEFAULT_ZONE}); its "
        "place in --zones picks the hosts' addresses (the 2nd zone: 127.1.0.10, ...), so "
        "pods started in different zones sit side by side",
    )
    up.add_argument(
        "--node-name", default=DEFAULT_NODE_NAME, help=f"the node's name ({DEFAULT_NODE_NAME})"
    )
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
        else:
            p.add_argument(
                "--notice",
                type=kit.seconds,
                nargs="?",
                const=-1.0,
                default=None,
                metavar="S",
                help="give S seconds of notice first (metadata preempted=TRUE, SIGTERM); "
                "no value: the daemon's --preempt-grace",
            )
            p.add_argument(
                "--no-wait",
                action="store_true",
                help="with --notice: return once the notice is given",
            )
    f = sub.add_parser("fault", help="inject a fault on HOST (or all), or clear faults")
    _add_run_dir(f)
    f.add_argument("host", metavar="HOST", help="index, name, IP or 'all'")
    f.add_argument(
        "kind",
        metavar="KIND",
        choices=[*client.FAULT_KINDS, "clear"],
        help=f"{', '.join(client.FAULT_KINDS)} or clear",
    )
    f.add_argument(
        "--seconds",
        type=kit.seconds,
        default=None,
        help="hang/stale-api: how long (hang default: until cleared; stale-api 30); "
        "slow-api: the delay of every call (default 5)",
    )
    f.add_argument(
        "--duration",
        type=kit.seconds,
        default=None,
        help="slow-api: how long (default: until cleared)",
    )
    f.add_argument("--json", action="store_true", help="print the status as JSON")
    m = sub.add_parser(
        "maintenance", help="set HOST's (or all) metadata instance/maintenance-event"
    )
    _add_run_dir(m)
    m.add_argument("host", metavar="HOST", help="index, name, IP or 'all'")
    m.add_argument(
        "event",
        metavar="EVENT",
        choices=["NONE", "MIGRATE_ON_HOST_MAINTENANCE", "TERMINATE_ON_HOST_MAINTENANCE"],
        help="NONE, MIGRATE_ON_HOST_MAINTENANCE or TERMINATE_ON_HOST_MAINTENANCE",
    )
    m.add_argument("--json", action="store_true", help="print the status as JSON")
    z = sub.add_parser("zone", help="change a zone's capacity or stockouts now")
    _add_run_dir(z)
    z.add_argument("zone", metavar="ZONE")
    z.add_argument(
        "--capacity", type=kit.count(0, 1_000_000), default=None, help="slices the zone has"
    )
    z.add_argument(
        "--stockout",
        type=kit.seconds,
        default=None,
        metavar="S",
        help="no capacity from now for S seconds (0 = until cleared)",
    )
    z.add_argument("--clear-stockouts", action="store_true", help="drop every stockout window")
    z.add_argument("--json", action="store_true", help="print the status as JSON")
    down = sub.add_parser("down", help="stop the emulator; no process is left behind")
    _add_run_dir(down)
    serve = sub.add_parser("serve", help="run the daemon in the foreground (used by `up`)")
    _add_pod_flags(serve)
    serve.add_argument("--project", default=DEFAULT_PROJECT)
    serve.add_argument("--zone", default=DEFAULT_ZONE)
    serve.add_argument("--node-name", default=DEFAULT_NODE_NAME)
    return parser


def format_status(info: client.PodInfo) -> str:
    mode = "GCP-faithful" if info.faithful else "default"
    lines = [
        f"node      {info.node_path}  {info.state}  ({info.accelerator_type}, spot)",
        f"mode      {mode}  (preemption notice default {info.preempt_grace:g}s)",
        f"tpu api   gRPC {info.tpu_api}  REST {info.rest_endpoint}",
        f"ssh       user {info.ssh_user}  key {info.client_key}",
        f"          known_hosts {info.known_hosts}",
        f"metadata  port {info.metadata_port} on every host IP (GCE_METADATA_HOST)",
        f"bucket    {info.bucket_uri}",
        f"daemon    pid {info.pid}  run dir {info.run_dir}",
    ]
    for z in info.zones:
        out = "  STOCKOUT" if z.stockout else ""
        lines.append(f"zone      {z.name:<10} {z.used}/{z.capacity} slices used{out}")
    for n in info.nodes:
        if n.path != info.node_path:
            lines.append(f"also      {n.path}  {n.state}  ({n.hosts} hosts from {n.first_ip})")
    for q in info.queued_resources:
        lines.append(f"queued    {q['name']}  {q['state']}")
    for f in info.faults:
        lines.append(f"fault     {f['kind']} {f.get('node', '')}".rstrip())
    ext = any(h.external_ip for h in info.hosts)
    head = f"{'#':>3}  {'host':<24} {'ip':<15} " + (f"{'external':<15} " if ext else "")
    lines += ["", f"{head}{'port':>5}  {'state':<10} host key"]
    for h in info.hosts:
        extra = f"{h.external_ip:<15} " if ext else ""
        flags = f"  [{','.join(h.faults)}]" if h.faults else ""
        lines.append(
            f"{h.index:>3}  {h.name:<24} {h.ip:<15} {extra}{h.ssh_port:>5}  {h.state:<10} "
            f"{h.host_key_fingerprint}{flags}"
        )
    return "\n".join(lines)


def _print_status(run_dir: Path, as_json: bool) -> int:
    data = client.status_json(run_dir)
    return kit.print_status(
        WORDS, run_dir, data, as_json, lambda d: format_status(client.PodInfo.from_json(d))
    )


def pod_main(argv: list[str]) -> int:
    """Entry point of ``phantom pod ...``; returns the exit code."""
    args = kit.parse(build_parser(), argv)
    if isinstance(args, int):
        return args
    run_dir = kit.run_dir_of(args, default_run_dir)
    try:
        if args.cmd in ("serve", "up"):
            zones = args.zones
            try:
                capacity = parse_capacity(args.capacity, zones)
                stockouts = tuple(parse_stockout(s, zones) for s in args.stockout)
                quota = parse_quota(args.quota, zones)
            except ValueError as exc:
                raise client.PodUsageError(str(exc)) from None
        if args.cmd == "serve":
            # Before the daemon's imports start any thread: niceness is per thread on Linux,
            # and every thread and child started later inherits it.
            lower_priority(args.nice)
            from emulators.tpu_pod.daemon import DaemonConfig, run_daemon

            return run_daemon(
                DaemonConfig(
                    run_dir=run_dir,
                    hosts=args.hosts or DEFAULT_HOSTS,
                    ssh_port=args.ssh_port,
                    api_port=args.api_port,
                    ready_delay=args.ready_delay,
                    project=args.project,
                    zone=args.zone,
                    node_name=args.node_name,
                    accelerator_type=args.accelerator_type or DEFAULT_ACCELERATOR_TYPE,
                    chaos_seed=args.chaos_seed,
                    chaos_interval=args.chaos_interval or None,
                    faithful=args.faithful,
                    rest_port=args.rest_port,
                    metadata_port=args.metadata_port,
                    zones=zones,
                    capacity=capacity,
                    quota=quota,
                    stockouts=stockouts,
                    stockout_seed=args.stockout_seed,
                    stockout_mean=args.stockout_mean or 180.0,
                    preempt_grace=args.preempt_grace,
                    chaos_notice=args.chaos_notice or 0.0,
                    chaos_faults=args.chaos_faults,
                    ssh_user=args.ssh_user or SSH_USER,
                    ssh_key=args.ssh_key,
                )
            )
        if args.cmd == "up":
            if args.zone not in zones:
                raise client.PodUsageError(
                    f"--zone {args.zone!r} is not one of --zones {','.join(zones)}; pick one "
                    "of them (or add it to --zones)"
                )
            placed = [] if args.zone == DEFAULT_ZONE else ["--zone", args.zone]
            if args.node_name != DEFAULT_NODE_NAME:
                placed += ["--node-name", args.node_name]
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
                faithful=args.faithful,
                rest_port=args.rest_port,
                metadata_port=args.metadata_port,
                zones=zones if zones != DEFAULT_ZONES else None,
                capacity=",".join(args.capacity) or None,
                quota=args.quota,
                stockouts=args.stockout,
                stockout_seed=args.stockout_seed,
                stockout_mean=args.stockout_mean,
                preempt_grace=args.preempt_grace,
                chaos_notice=args.chaos_notice,
                chaos_faults=args.chaos_faults,
                ssh_user=args.ssh_user,
                ssh_key=args.ssh_key,
                accelerator_type=args.accelerator_type,
                nice=args.nice,
                extra_args=placed or None,
            )
            return _print_status(run_dir, args.json) if info else 1
        if args.cmd == "status":
            return _print_status(run_dir, args.json)
        if args.cmd == "preempt":
            notice: client.Notice = "default" if args.notice == -1.0 else args.notice
            client.preempt(run_dir, args.host, notice=notice, wait=not args.no_wait)
            return _print_status(run_dir, args.json)
        if args.cmd == "recreate":
            client.recreate(run_dir, args.host, wait=args.wait)
            return _print_status(run_dir, args.json)
        if args.cmd == "fault":
            if args.kind == "clear":
                client.clear_faults(run_dir, args.host)
            else:
                client.fault(run_dir, args.host, args.kind, args.seconds, args.duration)
            return _print_status(run_dir, args.json)
        if args.cmd == "maintenance":
            client.maintenance(run_dir, args.host, args.event)
            return _print_status(run_dir, args.json)
        if args.cmd == "zone":
            client.set_zone(run_dir, args.zone, args.capacity, args.stockout, args.clear_stockouts)
            return _print_status(run_dir, args.json)
        if args.cmd == "down":
            return kit.report_down(WORDS, run_dir, client.stop_pod(run_dir))
    except client.PodNotRunning as exc:
        kit.error(f"{exc}; {WORDS.hint}")
        return 1
    except client.PodError as exc:
        kit.error(exc)
        return exc.exit_code
    except TimeoutError as exc:
        kit.error(exc)
        return 1
    raise AssertionError(f"unhandled command {args.cmd}")


def main() -> None:
    raise SystemExit(pod_main(sys.argv[1:]))
