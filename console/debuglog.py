"""The terminal is the product's: what other people's code says goes to the debug log.

Every ``phantom`` process (the commands, the TUI, ``watch``, ``serve``, ``mcp``) installs this
before it imports anything of a third party: a dependency's ``DeprecationWarning`` at import
(asyncssh on a newer cryptography printed ten lines before every command's own output), a
library's ``log.warning``, all of it lands in ``$XDG_STATE_HOME/phantom/debug.log``, with
secrets masked as everywhere else. Only our own loggers (``console``, ``engine``) still
reach stderr, WARNING and above, as they did before a handler was installed; in the TUI,
Textual swallows stderr as it always has.

The file is opened on the first record, so a quiet command writes nothing, and rotated at
5 MB (a watcher runs for weeks). A debug log that cannot be written is dropped in silence:
what it would hold is not the user's to see on the terminal either.
"""

from __future__ import annotations

import io
import logging
import logging.handlers
import sys
from pathlib import Path

from console.secrets import Scrubber

OURS = ("console", "engine")  # loggers whose warnings are the product's own words
MAX_BYTES = 5 * 1024 * 1024
BACKUPS = 2
FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

_installed: Path | None = None


class _DebugLog(logging.handlers.RotatingFileHandler):
    """The file, its directory made on the first record; its errors never reach stderr."""

    def __init__(self, path: Path) -> None:
        super().__init__(
            path, maxBytes=MAX_BYTES, backupCount=BACKUPS, encoding="utf-8", delay=True
        )
        self._scrub = Scrubber()

    def _open(self) -> io.TextIOWrapper:
        Path(self.baseFilename).parent.mkdir(parents=True, exist_ok=True)
        return super()._open()

    def format(self, record: logging.LogRecord) -> str:
        return self._scrub.text(super().format(record))

    def handleError(self, record: logging.LogRecord) -> None:
        pass  # logging's default prints a traceback to stderr: exactly what this module prevents


class _OwnWords(logging.Handler):
    """Our own WARNING+ records on stderr, as Python's last-resort handler printed them.
    ``sys.stderr`` is looked up at each record, so a front end that redirects it (Textual)
    still gets them."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.addFilter(lambda record: record.name.split(".", 1)[0] in OURS)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            sys.stderr.write(self.format(record) + "\n")
        except Exception:
            self.handleError(record)


def install(path: Path) -> None:
    """Route warnings and every log record to the debug log at ``path`` (once a process)."""
    global _installed
    if _installed is not None:
        return
    _installed = path
    root = logging.getLogger()
    debug = _DebugLog(path)
    debug.setFormatter(logging.Formatter(FORMAT))
    root.addHandler(debug)
    root.addHandler(_OwnWords())
    logging.captureWarnings(True)  # warnings.showwarning -> the "py.warnings" logger
