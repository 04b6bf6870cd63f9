"""A keyed table for thousands of rows that change many times a second (the host list).

Textual's DataTable keys every render cache on one table-wide update counter, so a single
``update_cell`` re-renders every visible cell (measured ~0.3 s per frame at 1,024 hosts on
this 2-core machine). Here each row's rendered ``Strip`` is cached against that row's cells,
and a change refreshes only the screen lines of the rows that changed: a frame costs what
changed, not what is visible. Same small API as ``PhantomTable`` (``set_columns``,
``sync_rows``, ``row_keys``, ``cell_texts``, ``highlighted_key``), row cursor, `enter` opens.

A column whose every cell changes with time alone (an age: "4s", "5s"...) can be *live*
(``set_live``): its cell is asked for when a row is drawn, so only the visible rows pay for
it, and ``refresh_live`` redraws them. Otherwise a clock tick at 10,000 rows rebuilt every
row's cells once a second (30-100 ms on the event loop: the TUI's slowest frames).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import ClassVar

from rich.cells import set_cell_size
from rich.segment import Segment
from rich.style import Style
from textual.binding import Binding, BindingType
from textual.geometry import Size
from textual.message import Message
from textual.scroll_view import ScrollView
from textual.strip import Strip

Cell = tuple[str, str]  # (text, rich style)
Column = tuple[str, str, int]  # (key, label, width)
_PARTIAL_REFRESH_MAX = 64  # more changed rows than this: one full refresh is cheaper


class FastTable(ScrollView, can_focus=True):
    COMPONENT_CLASSES: ClassVar[set[str]] = {"fast-table--header", "fast-table--cursor"}
    DEFAULT_CSS = """
    FastTable {
        background: $surface;
        height: 1fr;
        & > .fast-table--header {
            text-style: bold;
            color: $text-muted;
            background: $panel;
        }
        & > .fast-table--cursor {
            background: $block-cursor-blurred-background;
        }
        &:focus > .fast-table--cursor {
            color: $block-cursor-foreground;
            background: $block-cursor-background;
            text-style: $block-cursor-text-style;
        }
    }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("enter", "select", "Open", id="table.open", tooltip="Open the highlighted row"),
        Binding("up,k", "cursor(-1)", "Up", show=False, id="table.up", tooltip="Previous row"),
        Binding("down,j", "cursor(1)", "Down", show=False, id="table.down", tooltip="Next row"),
        Binding("pageup", "page(-1)", "Page up", show=False, id="table.pageup", tooltip="Page up"),
        Binding(
            "pagedown", "page(1)", "Page down", show=False, id="table.pagedown", tooltip="Page down"
        ),
        Binding("home", "jump(0)", "First", show=False, id="table.home", tooltip="First row"),
        Binding("end", "jump(-1)", "Last", show=False, id="table.end", tooltip="Last row"),
    ]

    class RowSelected(Message):
        def __init__(self, table: FastTable, key: Hashable) -> None:
            super().__init__()
            self.table = table
            self.key = key

        @property
        def control(self) -> FastTable:
            return self.table

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:  # noqa: A002
        super().__init__(id=id, classes=classes)
        self._columns: list[Column] = []
        self._order: list[Hashable] = []
        self._index: dict[Hashable, int] = {}
        self._cells: dict[Hashable, tuple[Cell, ...]] = {}
        # per row: the cells, cursor and live cell it was drawn with, and the strip
        self._strips: dict[Hashable, tuple[tuple[Cell, ...], bool, Cell | None, Strip]] = {}
        self._styles: dict[tuple[str, Style, bool], Style] = {}
        self._header: Strip | None = None
        self._live: tuple[int, Callable[[Hashable], Cell]] | None = None
        self.cursor_row = 0

    # data ------------------------------------------------------------------------------------

    def set_columns(self, columns: Sequence[Column]) -> None:
        self._columns = list(columns)
        self._order, self._index, self._cells = [], {}, {}
        self._invalidate()
        self._resize()

    def set_live(self, column: int, cell: Callable[[Hashable], Cell] | None) -> None:
        """Column ``column`` is drawn from ``cell(row key)`` at render time (None: from the
        rows' cells again). The rows' own cells in that column are then never shown."""
        self._live = None if cell is None else (column, cell)
        self.refresh()

    def refresh_live(self) -> None:
        """Redraw the visible rows whose live cell changed (a clock tick)."""
        if self._live is not None:
            self.refresh()

    @property
    def row_keys(self) -> list[Hashable]:
        return list(self._order)

    @property
    def row_count(self) -> int:
        return len(self._order)

    def row_cells(self, key: Hashable) -> tuple[Cell, ...] | None:
        """The row's cells (text, style) as last given (None: no such row)."""
        return self._cells.get(key)

    def cell_texts(self, key: Hashable) -> tuple[str, ...]:
        """The row's texts as drawn now (a live column's included)."""
        return tuple(text for text, _ in self._shown(key))

    def _shown(self, key: Hashable, live: Cell | None = None) -> tuple[Cell, ...]:
        cells = self._cells[key]
        if self._live is None or self._live[0] >= len(cells):
            return cells
        column, cell = self._live
        return (*cells[:column], live or cell(key), *cells[column + 1 :])

    def highlighted_key(self) -> Hashable | None:
        if 0 <= self.cursor_row < len(self._order):
            return self._order[self.cursor_row]
        return None

    def sync_rows(self, rows: Sequence[tuple[Hashable, tuple[Cell, ...]]]) -> int:
        """Show exactly ``rows`` in order; returns how many cells changed."""
        keys = [key for key, _ in rows]
        if keys != self._order:
            cursor_key = self.highlighted_key()
            self._order = keys
            self._index = {key: i for i, key in enumerate(keys)}
            self._cells = dict(rows)
            self._strips = {k: v for k, v in self._strips.items() if k in self._index}
            if cursor_key in self._index:
                self.cursor_row = self._index[cursor_key]
            self.cursor_row = max(0, min(self.cursor_row, len(keys) - 1))
            self._resize()
            self.refresh()
            return sum(len(cells) for _, cells in rows)
        return self.update_rows(rows)

    def update_rows(self, rows: Sequence[tuple[Hashable, tuple[Cell, ...]]]) -> int:
        """New cells for rows already shown (keys and order stay); returns cells changed."""
        written = 0
        changed: list[int] = []
        for key, cells in rows:
            old = self._cells[key]
            if old is cells or old == cells:
                continue
            written += sum(1 for a, b in zip(old, cells, strict=True) if a != b)
            self._cells[key] = cells
            changed.append(self._index[key])
        if len(changed) > _PARTIAL_REFRESH_MAX:
            self.refresh()
        else:
            top = int(self.scroll_y)
            bottom = top + max(0, self.size.height - 1)
            for row in changed:
                if top <= row < bottom:
                    self.refresh_line(row + 1)
        return written

    def _resize(self) -> None:
        width = sum(w + 2 for _, _, w in self._columns)
        self.virtual_size = Size(width, len(self._order) + 1)

    def _invalidate(self) -> None:
        self._strips.clear()
        self._styles.clear()
        self._header = None

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._invalidate()

    # rendering -------------------------------------------------------------------------------

    def _style(self, spec: str, base: Style, cursor: bool) -> Style:
        key = (spec, base, cursor)
        style = self._styles.get(key)
        if style is None:
            style = base + Style.parse(spec) if spec else base
            if cursor:
                style += self.get_component_rich_style("fast-table--cursor")
            self._styles[key] = style
        return style

    def _row_strip(self, cells: Sequence[Cell], base: Style, cursor: bool) -> Strip:
        segments = []
        for (_, _, width), (text, spec) in zip(self._columns, cells, strict=False):
            segments.append(
                Segment(" " + set_cell_size(text, width) + " ", self._style(spec, base, cursor))
            )
        return Strip(segments)

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        base = self.rich_style
        scroll_x = int(self.scroll_x)
        if y == 0:
            header = base + self.get_component_rich_style("fast-table--header")
            if self._header is None:
                self._header = self._row_strip(
                    [(label, "") for _, label, _ in self._columns], header, False
                )
            return self._header.crop_extend(scroll_x, scroll_x + width, header)
        row = int(self.scroll_y) + y - 1
        if not 0 <= row < len(self._order):
            return Strip.blank(width, base)
        key = self._order[row]
        cells = self._cells[key]
        cursor = row == self.cursor_row
        live = self._live[1](key) if self._live is not None else None
        cached = self._strips.get(key)
        if cached is not None and cached[0] is cells and cached[1] == cursor and cached[2] == live:
            strip = cached[3]
        else:
            strip = self._row_strip(self._shown(key, live), base, cursor)
            self._strips[key] = (cells, cursor, live, strip)
        return strip.crop_extend(scroll_x, scroll_x + width, base)

    # cursor ----------------------------------------------------------------------------------

    def move_cursor(self, row: int) -> None:
        if not self._order:
            return
        old = self.cursor_row
        self.cursor_row = max(0, min(row, len(self._order) - 1))
        self.refresh_line(old + 1)
        self.refresh_line(self.cursor_row + 1)
        visible = max(1, self.size.height - 1)
        if self.cursor_row < self.scroll_y:
            self.scroll_to(y=self.cursor_row, animate=False)
        elif self.cursor_row >= self.scroll_y + visible:
            self.scroll_to(y=self.cursor_row - visible + 1, animate=False)

    def action_cursor(self, delta: int) -> None:
        self.move_cursor(self.cursor_row + delta)

    def action_page(self, direction: int) -> None:
        self.move_cursor(self.cursor_row + direction * max(1, self.size.height - 2))

    def action_jump(self, row: int) -> None:
        self.move_cursor(row if row >= 0 else len(self._order) - 1)

    def action_select(self) -> None:
        key = self.highlighted_key()
        if key is not None:
            self.post_message(self.RowSelected(self, key))

    def on_focus(self) -> None:
        self._invalidate()  # the cursor row's colours depend on focus
        self.refresh()

    def on_blur(self) -> None:
        self._invalidate()
        self.refresh()
