"""A DataTable that shows `enter` in the footer and updates only the cells that changed."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import ClassVar

from rich.text import Text
from textual.binding import Binding, BindingType
from textual.widgets import DataTable

Cell = tuple[str, str]  # (text, rich style)


class PhantomTable(DataTable[Text]):
    """Row cursor, no zebra noise; ``sync_rows`` diffs against what is on screen.

    Rendering 1,024 hosts a few times a second must not rebuild the table: rows keep their
    key, and only cells whose (text, style) changed are written (``update_cell``).
    """

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding(
            "enter",
            "select_cursor",
            "Open",
            id="table.open",
            tooltip="Open the highlighted row",
        ),
    ]

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:  # noqa: A002
        super().__init__(id=id, classes=classes, cursor_type="row", zebra_stripes=False)
        self._cells: dict[Hashable, tuple[Cell, ...]] = {}
        self._order: list[Hashable] = []
        self._column_keys: list[str] = []

    def set_columns(self, columns: Sequence[tuple[str, str, int | None]]) -> None:
        """(key, label, width) per column; clears the rows."""
        self.clear(columns=True)
        self._cells.clear()
        self._order = []
        self._column_keys = [key for key, _, _ in columns]
        for key, label, width in columns:
            self.add_column(label, key=key, width=width)

    @property
    def row_keys(self) -> list[Hashable]:
        return list(self._order)

    def sync_rows(self, rows: Sequence[tuple[Hashable, tuple[Cell, ...]]]) -> int:
        """Show exactly ``rows`` (in order); returns how many cells were written."""
        keys = [key for key, _ in rows]
        if keys != self._order:
            return self._rebuild(rows)
        written = 0
        for key, cells in rows:
            old = self._cells.get(key)
            if old == cells:
                continue
            for i, cell in enumerate(cells):
                if old is None or old[i] != cell:
                    self.update_cell(str(key), self._column_keys[i], Text(cell[0], style=cell[1]))
                    written += 1
            self._cells[key] = cells
        return written

    def _rebuild(self, rows: Sequence[tuple[Hashable, tuple[Cell, ...]]]) -> int:
        cursor_key = (
            self._order[self.cursor_row] if 0 <= self.cursor_row < len(self._order) else None
        )
        self.clear(columns=False)
        self._cells = {}
        self._order = []
        for key, cells in rows:
            self.add_row(*(Text(text, style=style) for text, style in cells), key=str(key))
            self._cells[key] = cells
            self._order.append(key)
        if cursor_key in self._cells:
            self.move_cursor(row=self._order.index(cursor_key), animate=False)
        return sum(len(cells) for _, cells in rows)

    def highlighted_key(self) -> Hashable | None:
        if 0 <= self.cursor_row < len(self._order):
            return self._order[self.cursor_row]
        return None

    def cell_texts(self, key: Hashable) -> tuple[str, ...]:
        """What the row shows now (tests and the benchmark compare it to the state)."""
        return tuple(str(v) for v in self.get_row(str(key)))
