"""What `phantom watch` prints: one line per journal row (JSON, or plain text for a terminal).

Rows come scrubbed from the journal; the writer scrubs again (the one ``Scrubber``) so a
line never carries a secret whatever a row holds. Lines are flushed one by one: a log shipper
reading a pipe sees each at once.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Mapping
from typing import Any, Literal, TextIO

from console.secrets import Scrubber
from console.services.model import Event, Update, to_jsonable
from console.services.record.incidents import incident_of

Format = Literal["json", "text"]


def event_record(ev: Event) -> dict[str, Any]:
    """One journal row as the JSON line carries it (its cluster and incident id at the top)."""
    return {
        "type": "event",
        "cluster": ev.cluster,
        "id": ev.id,
        "at": ev.at,
        "kind": str(ev.kind),
        "host": ev.host,
        "actor": ev.actor,
        "incident": incident_of(ev),
        "message": ev.message,
        "data": to_jsonable(dict(ev.data)),
    }


def event_text(ev: Event, *, cluster: bool = False) -> str:
    """The row as a line of text; ``cluster``: its cluster's name after the time (a fleet)."""
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ev.at))
    parts = [stamp, *([ev.cluster] if cluster and ev.cluster else []), str(ev.kind)]
    if ev.host:
        parts.append(ev.host)
    parts.append(ev.message)
    iid = incident_of(ev)
    if iid:
        parts.append(f"[{iid}]")
    return "  ".join(parts)


class LineWriter:
    """Thread-safe: the bus may publish from a worker thread."""

    def __init__(
        self, out: TextIO, fmt: Format, scrub: Scrubber, *, name_clusters: bool = False
    ) -> None:
        self._out = out
        self._fmt = fmt
        self._scrub = scrub
        self._name_clusters = name_clusters  # text lines name the cluster (a fleet's watch)
        self._lock = threading.Lock()

    def on_update(self, update: Update) -> None:
        """The bus callback: every journal row, as a line."""
        if isinstance(update, Event):
            self.event(update)

    def event(self, ev: Event) -> None:
        if self._fmt == "json":
            self._write(json.dumps(self._scrub.data(event_record(ev)), default=str))
        else:
            self._write(self._scrub.text(event_text(ev, cluster=self._name_clusters)))

    def note(self, state: str, text: str, **data: Any) -> None:
        """The watcher's own lines: started, stopping, stopped."""
        if self._fmt == "json":
            record: Mapping[str, Any] = {"type": "watch", "state": state, "message": text, **data}
            self._write(json.dumps(self._scrub.data(to_jsonable(record)), default=str))
        else:
            self._write(self._scrub.text(f"phantom watch: {text}"))

    def _write(self, line: str) -> None:
        with self._lock:
            self._out.write(line + "\n")
            self._out.flush()
