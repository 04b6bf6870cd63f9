"""``python -m emulators.wandb up|status|down`` (``phantom wandb ...``) and the daemon's ``serve``.

``wandb_main(argv)`` returns the exit code (2 for usage errors); results go to stdout,
progress and diagnostics to stderr. The API key is never printed: ``status`` names the
variable it was read from, or the file a generated one is kept in.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from emulators.kit import cli as kit
from emulators.kit import validate
from emulators.wandb import client
from emulators.wandb import layout as L

WORDS = kit.Words("W&B emulator", "phantom wandb")


def _run_dir(p: argparse.ArgumentParser) -> None:
    kit.add_run_dir(p, L.default_run_dir())


def _server_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--crash-after",
        type=kit.positive_seconds,
        default=300.0,
        metavar="S",
        help="a running run with no heartbeat for S seconds shows as crashed (default 300)",
    )
    p.add_argument(
        "--agent-timeout",
        type=kit.positive_seconds,
        default=60.0,
        metavar="S",
        help="a sweep agent silent for S seconds loses its preempted run to another agent "
        "(default 60)",
    )


def build_parser(prog: str = "phantom wandb") -> argparse.ArgumentParser:
    parser = kit.Parser(
        prog=prog,
        description="Emulated W&B server on loopback for the wandb SDK and CLI "
        "(WANDB_BASE_URL=<its URL>).",
    )
    sub = parser.add_subparsers(dest="cmd", required=True, parser_class=kit.Parser)
    up = sub.add_parser("up", help="start the server and wait until it answers")
    _run_dir(up)
    up.add_argument(
        "--port", type=kit.count(0, 65535), default=0, help="port on 127.0.0.1 (0 = a free one)"
    )
    up.add_argument(
        "--api-key-env",
        type=validate.env_name,
        default=L.API_KEY_ENV,
        metavar="VAR",
        help=f"read the accepted API key from $VAR (default {L.API_KEY_ENV}; unset: "
        "generate one into RUN_DIR/api_key)",
    )
    _server_flags(up)
    up.add_argument(
        "--timeout",
        type=kit.positive_seconds,
        default=30.0,
        metavar="S",
        help="seconds to wait for the server to answer (default 30); on failure it is stopped",
    )
    up.add_argument("--json", action="store_true", help="print the status as JSON")
    st = sub.add_parser("status", help="show the URL, state file and counts")
    _run_dir(st)
    st.add_argument("--json", action="store_true")
    down = sub.add_parser("down", help="stop the server (its state is kept in the run dir)")
    _run_dir(down)
    serve = sub.add_parser("serve", help="run the server in the foreground (used by `up`)")
    _run_dir(serve)
    serve.add_argument("--port", type=kit.count(0, 65535), default=0)
    _server_flags(serve)
    return parser


def format_status(data: dict[str, object]) -> str:
    key = (
        f"from ${data['api_key_env']}"
        if data.get("api_key_env")
        else f"in {data.get('api_key_file')}"
    )
    return "\n".join(
        [
            f"server    {data['base_url']}  (WANDB_BASE_URL)",
            f"api key   {key}",
            f"state     {data['state_file']}",
            f"daemon    pid {data['pid']}  run dir {data['run_dir']}",
            f"holds     {data['projects']} projects, {data['runs']} runs, "
            f"{data['sweeps']} sweeps, {data['agents']} agents",
        ]
    )


def _print_status(run_dir: Path, as_json: bool) -> int:
    return kit.print_status(WORDS, run_dir, client.status_json(run_dir), as_json, format_status)


def wandb_main(argv: list[str]) -> int:
    args = kit.parse(build_parser(), argv)
    if isinstance(args, int):
        return args
    run_dir = kit.run_dir_of(args, L.default_run_dir)
    try:
        if args.cmd == "serve":
            from emulators.wandb.server import ServerConfig, run_server

            return run_server(
                ServerConfig(
                    run_dir=run_dir,
                    port=args.port,
                    crash_after=args.crash_after,
                    agent_timeout=args.agent_timeout,
                )
            )
        if args.cmd == "up":
            client.start(
                run_dir,
                port=args.port,
                key_env=args.api_key_env,
                timeout=args.timeout,
                extra_args=[
                    "--crash-after",
                    str(args.crash_after),
                    "--agent-timeout",
                    str(args.agent_timeout),
                ],
                progress=lambda s: print(f"wandb: {s}", file=sys.stderr),
            )
            return _print_status(run_dir, args.json)
        if args.cmd == "status":
            return _print_status(run_dir, args.json)
        if args.cmd == "down":
            return kit.report_down(WORDS, run_dir, client.stop(run_dir))
    except client.WandbEmuError as exc:
        kit.error(exc)
        return exc.exit_code
    raise AssertionError(f"unhandled command {args.cmd}")


def main() -> None:
    raise SystemExit(wandb_main(sys.argv[1:]))
