"""`phantom`: the console's command line.

    phantom                      open the console (TUI) on the configured cluster
    phantom --script FILE|-      run a script of console actions headless (JSON lines out)
    phantom status [--json]      one snapshot of pod, Ray, jobs and cadence, then exit
    phantom watch [--metrics ADDR:PORT] [--once]   the watchdog unattended (JSON lines out)
    phantom serve [--bind ADDR:PORT]               the console in a browser (textual-serve)
    phantom mcp [--allow TOOL,...] [--allow-all]   the actions and reads for AI agents (MCP)
    phantom report [--since DATE] --format md|html|json   the ledger: goodput, badput, cost
    phantom init [PATH]          write a commented example config
    phantom --version            the installed version (CHANGELOG.md says what changed)
    phantom --cluster NAME ...   act on one cluster of a [[clusters]] fleet (docs/fleet.md)
    phantom pod up|status|preempt|recreate|down   the local spot-pod emulator
    phantom gke up|status|preempt|down            the local GKE emulator (kubectl works on it)
    phantom wandb up|status|down                  the local W&B server (the wandb SDK and CLI work on it)

Exit codes are an API: 0 ok, 1 an action failed, 2 bad usage / config / script, 130 interrupted.
Heavy modules (ray, jax, torch, textual) are imported only by the command that needs them.
What third-party code says (warnings, log lines) goes to the debug log, not the terminal
(console/debuglog.py): $XDG_STATE_HOME/phantom/debug.log.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from console import debuglog, exit_codes
from console.config import (
    Config,
    ConfigError,
    default_config_path,
    default_state_dir,
    load_config,
    load_fleet,
)

if TYPE_CHECKING:
    from console.config.fleet import Fleet


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        self.exit(exit_codes.USAGE, f"phantom: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="phantom",
        description="Operations console for RL training on preemptible TPU pods with Ray.",
        epilog=(
            "With no config file phantom drives the built-in local pod emulator (4 hosts on "
            "127.0.0.10-13). `phantom init` writes an example config."
        ),
    )
    parser.add_argument(
        "--config",
        metavar="PATH",
        help=f"config file (default: {default_config_path()}, if it exists)",
    )
    parser.add_argument(
        "--cluster",
        metavar="NAME",
        help="the cluster to act on, by its [[clusters]] name (needed when the config has "
        "several; with `pod`/`gke`: that cluster's emulator)",
    )
    parser.add_argument(
        "--script",
        metavar="FILE",
        help="run console actions from FILE ('-' for stdin) without a screen",
    )
    parser.add_argument(
        "--metrics",
        type=_listen,
        metavar="ADDR:PORT",
        help="with the TUI: also serve Prometheus /metrics and /healthz there "
        "(`phantom watch --metrics` without a screen)",
    )
    parser.add_argument(
        "--script-help",
        action="store_true",
        help="print the script language reference (actions, flags, exit codes) and exit",
    )
    parser.add_argument("--version", action=_Version, help="print the version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    status = sub.add_parser("status", help="print one snapshot of the cluster and exit")
    status.add_argument("--json", action="store_true", help="machine-readable JSON")
    status.add_argument(
        "--cadence-deadline",
        type=_seconds,
        metavar="S",
        help="seconds to wait for the metric sources; a slower one is shown as stale "
        "(default: recovery.cadence_deadline_s, 5)",
    )
    watch = sub.add_parser(
        "watch",
        help="run the watchdog unattended: recover, journal, alert, export metrics",
        description="The console without a screen, left running (a container, a systemd "
        "service): the same services, watchdog and journal as the TUI. One line per journal "
        "row on stdout; SIGTERM/SIGINT stop it cleanly (exit 0); one watcher per cluster "
        "(a second exits 2).",
    )
    watch.add_argument(
        "--metrics",
        type=_listen,
        metavar="ADDR:PORT",
        help="serve Prometheus /metrics and /healthz there (e.g. 127.0.0.1:9464)",
    )
    watch.add_argument(
        "--once", action="store_true", help="one pass: poll, finish any recovery, exit"
    )
    watch.add_argument(
        "--format", choices=("json", "text"), default="json", help="JSON lines (default) or text"
    )
    serve = sub.add_parser(
        "serve",
        help="the console in a browser (textual-serve), loopback unless told otherwise",
        description="Each browser tab runs its own console. Binding anything but loopback "
        "needs a token in the environment (--token-env, default PHANTOM_SERVE_TOKEN).",
    )
    serve.add_argument(
        "--bind",
        type=_listen,
        default="127.0.0.1:8000",
        metavar="ADDR:PORT",
        help="where to listen (default 127.0.0.1:8000)",
    )
    serve.add_argument(
        "--token-env",
        default="PHANTOM_SERVE_TOKEN",
        metavar="NAME",
        help="the variable holding the token a non-loopback bind requires",
    )
    mcp = sub.add_parser(
        "mcp",
        help="serve the console's actions and reads to AI agents (Model Context Protocol)",
        description="An MCP server on stdio (or streamable HTTP on loopback): one tool per "
        "action, resources for status, events, incidents and the ledger. Read-only unless "
        "allowed: acting tools refuse, saying how to allow them. Every call is journaled.",
    )
    mcp.add_argument(
        "--allow",
        action="append",
        default=[],
        metavar="TOOL[,TOOL]",
        help="let agents run these acting tools (e.g. preempt,recover,submit)",
    )
    mcp.add_argument("--allow-all", action="store_true", help="let agents run every acting tool")
    mcp.add_argument(
        "--allow-destructive",
        action="store_true",
        help="also the tools that stop or delete (teardown, stop_job, workload_delete), "
        "with --allow naming them or --allow-all",
    )
    mcp.add_argument(
        "--http",
        type=_listen,
        metavar="ADDR:PORT",
        help="streamable HTTP at http://ADDR:PORT/mcp (loopback only) instead of stdio",
    )
    report = sub.add_parser(
        "report",
        help="the ledger as a document: goodput, badput by cause, cost (md, html or json)",
        description="Goodput, badput by cause, recovery per step, chip-hours and spot against "
        "on-demand, from the journal alone (no cluster needed). The HTML is one "
        "self-contained page with inline SVG charts. Over a fleet of several clusters: a row "
        "per cluster and the fleet's total (`phantom --cluster NAME report`: that one).",
    )
    report.add_argument(
        "--format", required=True, choices=("md", "html", "json"), help="md, html or json"
    )
    report.add_argument(
        "--since",
        type=_since,
        metavar="DATE",
        help="from DATE (2026-12-01 or 2026-12-01T08:30, UTC unless it has an offset); "
        "default: the journal's first row",
    )
    report.add_argument("--output", "-o", metavar="PATH", help="write here instead of stdout")
    report.add_argument(
        "--runs",
        metavar="DIR",
        help="the WANDB_DIR the jobs logged to: their run files give the engine's steps "
        "(restart warm-up and redone work) for runs --logs does not cover",
    )
    report.add_argument(
        "--logs",
        metavar="PATH",
        help="the trainers' logs (a file, or a directory read whole: ray job logs saved to "
        "files, Ray's session logs): their step lines give the engine's steps, exact also "
        "for a trainer that was SIGKILLed; a GKE run's TensorBoard event files there (its "
        "output directory) give its steps",
    )
    report.add_argument(
        "--journal",
        metavar="PATH",
        help="the journal to read (default: journal.sqlite in the state directory)",
    )
    trust = sub.add_parser(
        "trust",
        help="accept a host's new SSH host key after its VM was recreated",
        description="Replace the known_hosts entry of HOST with the key the TPU API publishes "
        "for it (or, if none is published, the key the host offers now).",
    )
    trust.add_argument("host", help="host name (phantom-pod-w2), short name (w2), index or IP")
    init = sub.add_parser("init", help="write a commented example config")
    init.add_argument(
        "path", nargs="?", help=f"where to write it (default: {default_config_path()})"
    )
    init.add_argument("--force", action="store_true", help="overwrite an existing file")
    pod = sub.add_parser(
        "pod",
        help="the local spot-pod emulator: up|status|preempt|recreate|down",
        add_help=False,
    )
    pod.add_argument("pod_args", nargs=argparse.REMAINDER)
    gke = sub.add_parser(
        "gke",
        help="the local GKE emulator (JobSets, pods, kubectl): up|status|preempt|down",
        add_help=False,
    )
    gke.add_argument("gke_args", nargs=argparse.REMAINDER)
    wandb = sub.add_parser(
        "wandb",
        help="the local W&B server (runs, sweeps, agents; WANDB_BASE_URL): up|status|down",
        add_help=False,
    )
    wandb.add_argument("wandb_args", nargs=argparse.REMAINDER)
    return parser


def version() -> str:
    """The installed package's version (its metadata: one number, pyproject's)."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed("phantom-console")
    except PackageNotFoundError:  # a checkout on sys.path, never installed
        return "(not installed: run `make setup`)"


class _Version(argparse.Action):
    """``--version``, its metadata read only when asked (every command builds the parser)."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, *_: object) -> None:
        print(f"phantom {version()}")
        parser.exit()


def _load(args: argparse.Namespace) -> Config:
    return load_config(
        args.config,
        discover=not os.environ.get("PHANTOM_NO_CONFIG_DISCOVERY"),
        cluster=args.cluster,
    )


def cmd_init(path_arg: str | None, force: bool) -> int:
    path = Path(path_arg) if path_arg else default_config_path()
    if path.is_dir():
        print(
            f"phantom: {path} is a directory; give the path of the file to write", file=sys.stderr
        )
        return exit_codes.USAGE
    if path.exists() and not force:
        print(f"phantom: {path} exists; pass --force to overwrite it", file=sys.stderr)
        return exit_codes.USAGE
    from console.config.example import example_config
    from console.config.validate import Invalid, check_output, is_config, kept_paths, write_atomic

    try:  # never over the journal, a run dir or a file that is not a config, even --force
        target = check_output(
            "phantom init", path, keep=kept_paths(Config()), may_replace=is_config,
            replaced_what="a phantom config (TOML)",
        )  # fmt: skip
    except Invalid as exc:
        print(exc, file=sys.stderr)
        return exit_codes.USAGE
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(target, example_config())
    except OSError as exc:
        print(
            f"phantom: cannot write {path}: {exc.strerror or exc}; pick a writable path "
            "(`phantom init PATH`)",
            file=sys.stderr,
        )
        return exit_codes.FAILED
    print(str(path))
    return exit_codes.OK


def cmd_trust(config: Config, host: str) -> int:
    import asyncio

    from console.wiring import make_services

    async def go() -> int:
        try:
            services = make_services(config, autostart_pod=False)
        except Exception as exc:  # the factory names what is missing (no pod, bad key...)
            print(f"phantom: cannot reach the cluster: {exc}", file=sys.stderr)
            return exit_codes.FAILED
        try:
            result = await services.trust_host(host)
        except ValueError as exc:  # unknown host
            print(f"phantom: {exc}", file=sys.stderr)
            return exit_codes.USAGE
        finally:
            await services.stop()
        print(result.message, file=sys.stdout if result.ok else sys.stderr)
        return exit_codes.OK if result.ok else exit_codes.FAILED

    return asyncio.run(go())


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 < value <= 366 * 86400:  # also nan and inf; over a year is a typo
        raise argparse.ArgumentTypeError(
            f"{text!r}: seconds greater than 0 (at most a year), e.g. 2.5"
        )
    return value


def _listen(text: str) -> object:
    from console.config.listen import parse_listen

    try:
        return parse_listen(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _since(text: str) -> float:
    from console.report import parse_since

    return parse_since(text)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] in (["pod"], ["gke"], ["wandb"]):  # each emulator has its own parser (and --help)
        from console.wiring import emulator_cli

        return emulator_cli(argv[0], argv[1:])
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.script_help:
        from console.script.language import usage_text

        print(usage_text())
        return exit_codes.OK
    if args.command == "init":
        return cmd_init(args.path, args.force)
    if args.command == "serve":  # the tabs' consoles load the config themselves
        from console.serve.main import ServeOptions, serve_main

        if args.cluster is not None:  # a fleet's cluster: checked here, not in every tab
            try:
                _load(args)
            except ConfigError as exc:
                print(exc.render(), file=sys.stderr)
                return exit_codes.USAGE
        return serve_main(ServeOptions(args.bind, args.token_env, args.config, args.cluster))
    try:
        if args.command in ("pod", "gke", "wandb"):
            from console.wiring import emulator_cli, emulator_cli_args

            argv = list(getattr(args, f"{args.command}_args"))
            if args.cluster is not None and args.command != "wandb":
                argv = emulator_cli_args(args.command, argv, _load(args))
            return emulator_cli(args.command, argv)
        if args.command is None and args.script is None and args.cluster is None:
            fleet = load_fleet(
                args.config, discover=not os.environ.get("PHANTOM_NO_CONFIG_DISCOVERY")
            )
            if len(fleet.members) > 1:  # the console over every cluster, its Fleet screen first
                if args.metrics is not None:
                    print(
                        f"phantom: --metrics with {fleet.source}'s {len(fleet.members)} "
                        "clusters: one cluster's series only for now; pass --cluster NAME",
                        file=sys.stderr,
                    )
                    return exit_codes.USAGE
                from console.tui.main import run_fleet_tui

                return run_fleet_tui(fleet)
        if args.command in ("watch", "status") and args.script is None and args.cluster is None:
            # With no --cluster these two take every cluster of a fleet (a [cluster] config:
            # its one, as always).
            fleet = load_fleet(
                args.config, discover=not os.environ.get("PHANTOM_NO_CONFIG_DISCOVERY")
            )
            if len(fleet.members) > 1 or fleet.members[0].state_dir:
                return _fleet_command(args, fleet)
        if args.command == "report" and args.script is None and args.cluster is None:
            # Every cluster of a fleet, a row each and their total (`--cluster NAME`: one).
            fleet = load_fleet(
                args.config, discover=not os.environ.get("PHANTOM_NO_CONFIG_DISCOVERY")
            )
            if len(fleet.members) > 1:
                return _report(args, fleet.members)
        whole: Fleet | None = None  # the clusters a script or an agent may choose from
        if (args.script is not None and not args.command) or (
            args.command == "mcp" and args.cluster is None
        ):
            # A script's lines act on the clusters they choose (`use NAME`, --cluster NAME):
            # it gets the whole fleet, --cluster the one chosen before its first `use`. An
            # agent's calls name theirs (`cluster`): the server drives every cluster.
            whole = load_fleet(
                args.config, discover=not os.environ.get("PHANTOM_NO_CONFIG_DISCOVERY")
            )
            config = whole.select(args.cluster) if args.cluster is not None else whole.members[0]
        else:
            config = _load(args)
    except ConfigError as exc:
        print(exc.render(), file=sys.stderr)
        return exit_codes.USAGE
    try:
        if args.script is not None:
            if args.command:
                parser.error("--script cannot be combined with a command")
            from console.script.main import script_main

            assert whole is not None
            return script_main(args.script, whole, cluster=args.cluster)
        if args.command == "watch":
            from console.watch.main import WatchOptions, watch_main

            return watch_main(config, WatchOptions(args.metrics, args.once, args.format))
        if args.command == "mcp":
            from console.mcp.policy import Policy, PolicyError
            from console.mcp.server import McpOptions, mcp_main

            try:
                policy = Policy.parse(args.allow, args.allow_all, args.allow_destructive)
            except PolicyError as exc:
                print(f"phantom mcp: {exc}", file=sys.stderr)
                return exit_codes.USAGE
            return mcp_main(whole or config, McpOptions(policy, args.http))
        if args.command == "trust":
            return cmd_trust(config, args.host)
        if args.command == "report":
            return _report(args, [config])
        if args.command == "status":
            from console.status import status_main

            if args.cadence_deadline is not None:
                recovery = replace(config.recovery, cadence_deadline_s=args.cadence_deadline)
                config = replace(config, recovery=recovery)
            return status_main(config, as_json=args.json)
        from console.tui.main import run_tui

        if args.metrics is not None:
            from console.config.listen import bind_problem

            problem = bind_problem(args.metrics)
            if problem:
                print(
                    f"phantom: --metrics {args.metrics}: cannot listen there ({problem}); "
                    "pick a free port",
                    file=sys.stderr,
                )
                return exit_codes.USAGE
        return run_tui(config, metrics=args.metrics)
    except KeyboardInterrupt:
        return exit_codes.INTERRUPTED


def _report(args: argparse.Namespace, configs: Sequence[Config]) -> int:
    from console.report import report_main

    return report_main(
        configs,
        fmt=args.format,
        since=args.since,
        journal_path=args.journal,
        output=args.output,
        runs_dir=args.runs,
        logs_path=args.logs,
    )


def _fleet_command(args: argparse.Namespace, fleet: Fleet) -> int:
    """`phantom watch` or `phantom status` over every cluster of a ``[[clusters]]`` fleet."""
    try:
        if args.command == "watch":
            from console.watch.main import WatchOptions, watch_fleet_main

            return watch_fleet_main(fleet, WatchOptions(args.metrics, args.once, args.format))
        from console.status import status_fleet_main

        if args.cadence_deadline is not None:
            fleet = replace(
                fleet,
                members=tuple(
                    replace(
                        c,
                        recovery=replace(c.recovery, cadence_deadline_s=args.cadence_deadline),
                    )
                    for c in fleet.members
                ),
            )
        return status_fleet_main(fleet, as_json=args.json)
    except KeyboardInterrupt:
        return exit_codes.INTERRUPTED


def run() -> int:
    """The program (`phantom`, `python -m console`): the debug log takes what third-party code
    says before anything of theirs is imported, then the command runs. Tests that call
    ``main`` in their own process leave their logging as pytest set it."""
    debuglog.install(default_state_dir() / "debug.log")
    return main()


if __name__ == "__main__":
    raise SystemExit(run())
