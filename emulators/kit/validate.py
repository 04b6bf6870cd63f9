"""The emulators' door: argparse value types that refuse bad input before a daemon starts.

The emulators stand alone (they import nothing of the console), so ``phantom pod|gke|wandb``
check their flags here, by type, the way ``console/config/validate.py`` does for the
console: a directory that must exist or be creatable, a finite number of seconds, an
environment variable's name. Each raises ``argparse.ArgumentTypeError`` (argparse names the
flag, the CLI exits 2) and never repeats a value that looks like a key.
"""

from __future__ import annotations

import argparse
import math
import os
import re
from pathlib import Path

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_TOKEN = re.compile(r"^[A-Za-z0-9_\-.+/=]{16,}$")


def looks_secret(text: str) -> bool:
    """A key- or token-shaped value (16+ characters mixing letters and digits)."""
    return (
        bool(_TOKEN.match(text))
        and any(c.isdigit() for c in text)
        and any(c.isalpha() for c in text)
    )


def shown(text: str) -> str:
    return "the value given (not shown: it looks like a key)" if looks_secret(text) else repr(text)


MAX_SECONDS = 366 * 86400.0  # a year: longer is a typo (and overflows sleeps and deadlines)


def finite(text: str, *, lo: float | None = None, above: float | None = None) -> float:
    """A finite number of seconds up to a year (nan and inf refused), ``>= lo`` or ``>
    above``."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text[:40]!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number of seconds, got {text[:40]!r}")
    if value > MAX_SECONDS:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_SECONDS:.0f} seconds (a year)")
    if lo is not None and value < lo:
        raise argparse.ArgumentTypeError(f"must be >= {lo:g} seconds, got {value}")
    if above is not None and not value > above:
        raise argparse.ArgumentTypeError(f"must be > {above:g} seconds, got {value}")
    return value


def run_dir(text: str) -> Path:
    """A directory that exists or can be created (not a file, not under a file)."""
    path = Path(text).expanduser()
    if path.exists():
        if not path.is_dir():
            raise argparse.ArgumentTypeError(f"{text!r} is a file, not a directory")
        return path
    parent = path.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise argparse.ArgumentTypeError(
            f"{text!r} cannot be created: {str(parent)!r} is a file; give a directory path"
        )
    if not os.access(parent, os.W_OK | os.X_OK):
        raise argparse.ArgumentTypeError(
            f"{text!r} cannot be created: {str(parent)!r} is not writable"
        )
    return path


def env_name(text: str) -> str:
    """The NAME of an environment variable, never its value."""
    if _ENV_NAME.match(text) and not looks_secret(text):
        return text
    raise argparse.ArgumentTypeError(
        f"{shown(text)} is not the name of an environment variable; give the variable's NAME "
        "(letters, digits and '_', e.g. WANDB_API_KEY), never the key itself"
    )


def key_file(text: str) -> Path:
    """A private key file that exists and is text (an OpenSSH or PEM key)."""
    path = Path(text).expanduser()
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} is a directory; give the private key file")
    try:
        data = path.read_bytes()[:65536]
    except OSError as exc:
        raise argparse.ArgumentTypeError(f"{text!r}: cannot read it ({exc.strerror})") from None
    if b"\x00" in data or b"PRIVATE KEY" not in data:
        raise argparse.ArgumentTypeError(f"{text!r} is not a private key (OpenSSH or PEM)")
    return path
