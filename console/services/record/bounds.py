"""Journal rows stay small: what a command printed is kept as a tail, the rest in a side file.

A recovery step's row holds each host's ``stdout_tail``/``stderr_tail``; ``ray stop`` on a
host with many workers prints tens of KB of coloured text, and a watcher under journald for
a month would write gigabytes of it. Before a row is stored:

* each host's output loses its ANSI escapes and keeps its last ``OUTPUT_TAIL`` characters;
  when that cut something, the whole text (as the SSH layer kept it, scrubbed like the row)
  goes to a side file next to the journal, named in the row (``stdout_file``/``stderr_file``);
* any other string in the row's data, and its message, keeps its last ``STRING_TAIL``
  characters (a safety net: a row cannot grow without bound whatever a step puts in it).
"""

from __future__ import annotations

import os
import re
import secrets
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

OUTPUT_TAIL = 2048  # characters of each host's stdout / stderr kept in the row
STRING_TAIL = 4096  # characters of any other string kept in the row
OUTPUTS = ("stdout_tail", "stderr_tail")

_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def strip_ansi(text: str) -> str:
    return _ANSI.sub("", text)


def tail(text: str, keep: int) -> str:
    """The last ``keep`` characters of ``text``, from a line start when one is near, with a
    note of what was cut."""
    if len(text) <= keep:
        return text
    cut = text[-keep:]
    newline = cut.find("\n")
    if 0 <= newline < keep // 4:
        cut = cut[newline + 1 :]
    return f"[... {len(text) - len(cut)} characters cut ...]\n{cut}"


def bounded(value: Any, keep: int = STRING_TAIL) -> Any:
    """``value`` (JSON-like) with every string longer than ``keep`` cut to its tail."""
    if isinstance(value, str):
        return tail(value, keep)
    if isinstance(value, Mapping):
        return {k: bounded(v, keep) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [bounded(v, keep) for v in value]
    return value


class OutputFiles:
    """Where the whole output of a host goes when its row keeps only the tail: a directory
    next to the journal (``<journal>.output/``), one file per host and stream. ``None``
    directory (an in-memory journal): the tail only."""

    def __init__(self, directory: Path | None) -> None:
        self.directory = directory

    def host_output(
        self, per_host: Mapping[str, Any], action: str, at: float, scrub: Callable[[str], str]
    ) -> dict[str, Any]:
        """One host's result (a dict) with its outputs bounded and the full texts kept."""
        out = dict(per_host)
        for key in OUTPUTS:
            text = out.get(key)
            if not isinstance(text, str) or not text:
                continue
            clean = strip_ansi(text)
            out[key] = tail(clean, OUTPUT_TAIL)
            if len(clean) > OUTPUT_TAIL:
                out[key.replace("_tail", "_file")] = self._keep(
                    scrub(clean), action, str(out.get("host", "")), key, at
                )
        return out

    def _keep(self, text: str, action: str, host: str, key: str, at: float) -> str:
        if self.directory is None:
            return ""
        stream = key.removesuffix("_tail")
        name = (
            "-".join(_UNSAFE.sub("_", part) for part in (f"{at:.3f}", action, host, stream))
            + f"-{secrets.token_hex(3)}.log"
        )
        path = self.directory / name
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(text)
        except OSError:
            return ""  # the tail is in the row; a full disk must not stop the journal
        return str(path)
