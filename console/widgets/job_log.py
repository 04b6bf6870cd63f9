"""Textual's ``Log`` for a job's lines at thousands a second.

``Log.write_lines`` measures the new lines' width in a thread worker, one per call, which
hands the result back with ``call_from_thread``: at 10,000 lines/s that is a worker, a
thread hop and a blocking round trip to the event loop some 100 times a second, all
contending for the GIL with the loop that draws the frames. Measuring a batch here costs
less than starting that worker (the lines are short; ``cell_len`` caches).
"""

from __future__ import annotations

from rich.cells import cell_len
from textual.widgets import Log


class JobLog(Log):
    """A ``Log`` that keeps its width on the event loop, in the call that wrote the lines."""

    def _update_size(self, updates: int, lines: list[str]) -> None:  # type: ignore[override]
        if lines:
            width = max(map(cell_len, map(self._process_line, lines)))
            self._update_maximum_width(updates, width)
