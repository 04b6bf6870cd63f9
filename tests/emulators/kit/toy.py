"""The smallest emulator the kit makes: a daemon with a pid file and a control socket,
its thin client and its ``up|status|down`` CLI, each a few lines over ``emulators.kit``.

``python -m tests.emulators.kit.toy serve --run-dir D`` is the daemon. Its control ops
besides ``status`` and ``shutdown``: ``crash`` (SIGKILL itself: no clean-up, the pid file
stays), ``deaf`` (close the control socket and keep running) and ``stubborn`` (ignore
SIGTERM).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from emulators.kit import cli as kit
from emulators.kit import control
from emulators.kit.layout import ControlledLayout, absolute

MODULE = "tests.emulators.kit.toy"
ROOT = Path(__file__).resolve().parents[3]
WORDS = kit.Words("toy emulator", "toy")


class ToyError(Exception):
    exit_code = 1


class ToyUsageError(ToyError):
    exit_code = 2


class ToyNotRunning(ToyError):
    pass


ERRORS = control.Errors("toy emulator", ToyError, ToyUsageError, ToyNotRunning)


@dataclass(frozen=True)
class ToyLayout(ControlledLayout):
    CONTROL_PREFIX = "phantom-toy"


def layout(run_dir: Path | str) -> ToyLayout:
    return ToyLayout(absolute(run_dir))


# --- the daemon ---------------------------------------------------------------------------


async def _serve(lay: ToyLayout) -> int:
    stop = asyncio.Event()
    ops = {"count": 0}

    async def dispatch(req: dict[str, Any]) -> dict[str, Any]:
        op = req.get("op")
        if op == "shutdown":
            stop.set()
            return {"ok": True, "pid": os.getpid()}
        if op == "crash":
            os.kill(os.getpid(), signal.SIGKILL)
        if op == "stubborn":  # SIGTERM is ignored: only SIGKILL ends it
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            return {"ok": True, "pid": os.getpid()}
        if op == "deaf":  # the socket goes, the process stays: only its pid reaches it
            server.close()
            return {"ok": True, "pid": os.getpid()}
        if op != "status":
            return {"ok": False, "code": 2, "error": f"unknown op {op!r}"}
        ops["count"] += 1
        return {"ok": True, "status": {"pid": os.getpid(), "run_dir": str(lay.run_dir), **ops}}

    try:
        server = await control.start_control_server(lay.control_address, dispatch)
    except OSError:
        print(f"error: the toy emulator is already running for {lay.run_dir}", file=sys.stderr)
        return 1
    lay.pid_file.write_text(f"{os.getpid()}\n")
    try:
        await stop.wait()
    finally:
        server.close()
        with contextlib.suppress(FileNotFoundError):
            lay.pid_file.unlink()
    return 0


# --- the thin client ----------------------------------------------------------------------


def request(run_dir: Path, payload: dict[str, Any]) -> dict[str, Any]:
    lay = layout(run_dir)
    return control.request(lay.control_address, payload, 10.0, ERRORS, lay.run_dir)


def status(run_dir: Path) -> dict[str, Any] | None:
    try:
        data: dict[str, Any] = request(run_dir, {"op": "status"})["status"]
    except ToyNotRunning:
        return None
    return data


def start(run_dir: Path, timeout: float = 30.0) -> dict[str, Any]:
    lay = layout(run_dir)
    if status(lay.run_dir) is not None:
        raise ToyError(f"the toy emulator is already running for {lay.run_dir}")
    lay.run_dir.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", MODULE, "serve", "--run-dir", str(lay.run_dir)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = control.spawn(argv, lay, env)

    def exited(_code: int) -> ToyError:
        return ToyError(f"the toy emulator failed to start: {control.daemon_error(lay)}")

    def timed_out() -> ToyError:
        stop(lay.run_dir)
        return ToyError(f"the toy emulator did not answer within {timeout:.0f}s")

    return control.wait_up(proc, lambda: status(lay.run_dir), timeout, exited, timed_out)


def stop(run_dir: Path, timeout: float = 10.0) -> bool:
    lay = layout(run_dir)
    ask = lambda: request(lay.run_dir, {"op": "shutdown"})  # noqa: E731
    return control.shut_down(lay, MODULE, ask, ToyNotRunning, timeout)


# --- the CLI ----------------------------------------------------------------------------------


def build_parser() -> kit.Parser:
    parser = kit.Parser(prog="toy")
    sub = parser.add_subparsers(dest="cmd", required=True, parser_class=kit.Parser)
    for name in ("up", "status", "down", "serve"):
        p = sub.add_parser(name)
        kit.add_run_dir(p, Path("."))
        if name in ("up", "status"):
            p.add_argument("--json", action="store_true")
        if name == "up":
            p.add_argument("--timeout", type=kit.seconds, default=30.0)
    return parser


def main(argv: list[str]) -> int:
    args = kit.parse(build_parser(), argv)
    if isinstance(args, int):
        return args
    run_dir = kit.run_dir_of(args, Path.cwd)
    render = lambda d: f"toy  pid {d['pid']}  run dir {d['run_dir']}"  # noqa: E731
    try:
        if args.cmd == "serve":
            return asyncio.run(_serve(layout(run_dir)))
        if args.cmd == "up":
            start(run_dir, args.timeout)
        if args.cmd in ("up", "status"):
            return kit.print_status(WORDS, run_dir, status(run_dir), args.json, render)
        if args.cmd == "down":
            return kit.report_down(WORDS, run_dir, stop(run_dir))
    except ToyError as exc:
        kit.error(exc)
        return exc.exit_code
    raise AssertionError(args.cmd)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
