"""argparse value types shared by the engine's command lines (train, launcher, sweep).

Each raises ``argparse.ArgumentTypeError`` so argparse names the flag and exits 2.
"""

from __future__ import annotations

import argparse
import re

MAX_FLAG_CHARS = 65_536  # a flag value longer than this is a mistake (e.g. a file pasted in)
# what ray.init(address=...) takes: auto, local, host:port or ray://host:port
_RAY_ADDRESS = re.compile(r"^(auto|local|(ray://)?[A-Za-z0-9_.\-\[\]:]+:\d{1,5})$")


def positive_int(text: str) -> int:
    try:
        value = int(bounded_text(text))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a positive integer, got {text[:40]!r}"
        ) from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def positive_int_or_auto(text: str) -> int | str:
    """A positive integer, or ``auto`` (resolved later, e.g. from the console's advice)."""
    if bounded_text(text).strip().lower() == "auto":
        return "auto"
    try:
        return positive_int(text)
    except argparse.ArgumentTypeError as exc:
        raise argparse.ArgumentTypeError(f"{exc} (or auto)") from None


def non_negative_int(text: str) -> int:
    try:
        value = int(bounded_text(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text[:40]!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def non_negative_float(text: str) -> float:
    try:
        value = float(bounded_text(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text[:40]!r}") from None
    if not value >= 0 or value == float("inf"):  # also nan and inf
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
    return value


def positive_float(text: str) -> float:
    value = non_negative_float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


def bounded_text(text: str) -> str:
    """Any text up to MAX_FLAG_CHARS characters without NUL."""
    if len(text) > MAX_FLAG_CHARS:
        raise argparse.ArgumentTypeError(f"{len(text)} characters (at most {MAX_FLAG_CHARS})")
    if "\x00" in text:
        raise argparse.ArgumentTypeError("contains a NUL character")
    return text


def ray_address(text: str) -> str:
    if not _RAY_ADDRESS.match(bounded_text(text)):
        raise argparse.ArgumentTypeError(
            f"{text[:80]!r} is not a Ray address; use auto, host:port (the GCS, e.g. "
            "127.0.0.1:6379) or ray://host:10001"
        )
    return text
