"""The shared pieces of ``phantom pod|gke|wandb up|status|down``.

Exit codes: 0 done, 1 no emulator running (or it failed), 2 bad usage. Results go to
stdout, progress and diagnostics to stderr.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from emulators.kit import validate


class Parser(argparse.ArgumentParser):
    """Usage errors come back as a ``SystemExit(message)`` that ``parse`` turns into 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        raise SystemExit(f"{self.prog}: error: {message}") from None


def parse(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace | int:
    """The parsed arguments, or the exit code (2 for bad usage, 0 after --help)."""
    try:
        return parser.parse_args(argv)
    except SystemExit as exc:
        if isinstance(exc.code, str):
            print(exc.code, file=sys.stderr)
            return 2
        return int(exc.code or 0)


def add_run_dir(p: argparse.ArgumentParser, default: Path) -> None:
    p.add_argument(
        "--run-dir",
        type=validate.run_dir,
        default=None,
        help=f"state directory of the emulator (default {default})",
    )


def run_dir_of(args: argparse.Namespace, default: Callable[[], Path]) -> Path:
    given: Path | None = args.run_dir
    return (given or default()).expanduser().absolute()


def seconds(text: str) -> float:
    """A finite number of seconds >= 0."""
    return validate.finite(text, lo=0)


def positive_seconds(text: str) -> float:
    """A finite number of seconds > 0."""
    return validate.finite(text, above=0)


def count(lo: int, hi: int) -> Callable[[str], int]:
    """A whole number in ``lo..hi``."""

    def parse_count(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
        if not lo <= value <= hi:
            raise argparse.ArgumentTypeError(f"must be {lo}..{hi}, got {value}")
        return value

    return parse_count


@dataclass(frozen=True)
class Words:
    """How the CLI names an emulator: "pod emulator", started by "phantom pod"."""

    what: str
    command: str

    def not_running(self, run_dir: Path) -> str:
        return f"no {self.what} is running for {run_dir}; {self.hint}"

    @property
    def hint(self) -> str:
        return f"start one with `{self.command} up`"


def error(message: object) -> None:
    print(f"error: {message}", file=sys.stderr)


def print_status(
    words: Words,
    run_dir: Path,
    data: dict[str, Any] | None,
    as_json: bool,
    render: Callable[[dict[str, Any]], str],
) -> int:
    """Print a status (``render``ed, or as JSON); 1 and a hint when none is running."""
    if data is None:
        print(words.not_running(run_dir), file=sys.stderr)
        return 1
    print(json.dumps(data, indent=2) if as_json else render(data))
    return 0


def report_down(words: Words, run_dir: Path, stopped: bool) -> int:
    """``down`` says what it did on stderr and succeeds either way."""
    if stopped:
        print(f"{words.what} for {run_dir} stopped", file=sys.stderr)
    else:
        print(f"no {words.what} was running for {run_dir}", file=sys.stderr)
    return 0
