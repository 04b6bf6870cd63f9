"""``FormScreen``: a modal form validated on every change, shared by the job and workload forms.

A subclass composes its fields (each with a ``Label`` ``#label-<field>``), a ``#problems``
and a ``#preview`` Static and two buttons (``#send``, ``#cancel``), and says how the fields
make a value (``build``: the value and every problem keyed by field), which fields apply to
that value, and what the preview shows. On every change the form marks the fields with a
problem and lists them; ``ctrl+s`` dismisses with the value only when there is none.
"""

from __future__ import annotations

from typing import ClassVar, TypeVar

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.screen import ModalScreen
from textual.widget import Widget
from textual.widgets import Button, Input, Label, Select, Static

T = TypeVar("T")


class FormScreen(ModalScreen[T]):
    LABELS: ClassVar[dict[str, str]] = {}  # field id -> its label, in form order
    VERB = "submitted"  # "Not <VERB>: fix ..." when ctrl+s finds problems
    ALWAYS_ON: ClassVar[frozenset[str]] = frozenset()  # fields never disabled

    def __init__(self, *, cursor_blink: bool = True) -> None:
        super().__init__()
        self.cursor_blink = cursor_blink
        self.problems: dict[str, str] = {}

    # what a subclass says ------------------------------------------------------------------

    def build(self) -> tuple[T, dict[str, str]]:
        """The value the form describes now, and every problem keyed by form field."""
        raise NotImplementedError

    def applies(self, name: str, value: T) -> bool:
        """Whether field ``name`` matters for ``value`` (the others are disabled)."""
        return True

    def preview_text(self, value: T) -> Text:
        raise NotImplementedError

    # shared --------------------------------------------------------------------------------

    def compose_outcome(self, send: str) -> ComposeResult:
        """Below the fields: the problems, the preview and the two buttons."""
        yield Static(id="problems")
        yield Static("will run:", id="preview-title")
        yield Static(id="preview")
        with Horizontal(id="dialog-buttons"):
            yield Button("Cancel (esc)", id="cancel", compact=True)
            yield Button(send, id="send", variant="primary", compact=True)

    def on_resize(self) -> None:
        # Room for a blank line between fields on a tall terminal; dense at 80x24.
        self.set_class(self.size.height >= 36, "-roomy")

    def on_mount(self) -> None:
        for box in self.query(Input):
            box.cursor_blink = self.cursor_blink
        self.revalidate()

    def field(self, name: str) -> Widget:
        return self.query_one(f"#{name}")

    def value(self, name: str) -> str:
        widget = self.field(name)
        if isinstance(widget, Select):
            return str(widget.value)
        assert isinstance(widget, Input)
        return widget.value

    def revalidate(self) -> None:
        value, self.problems = self.build()
        for name in self.LABELS:
            widget = self.field(name)
            if name not in self.ALWAYS_ON:
                widget.disabled = not self.applies(name, value)
            bad = name in self.problems
            widget.set_class(bad, "-invalid", "-problem")
            self.query_one(f"#label-{name}", Label).set_class(bad, "-problem")
        problems = Text()
        for name, message in self.problems.items():
            if problems:
                problems.append("\n")
            problems.append(f"✗ {self.LABELS.get(name, name)}: ", "bold red")
            problems.append(message, "red")
        box = self.query_one("#problems", Static)
        box.display = bool(self.problems)
        box.update(problems)
        self.query_one("#preview", Static).update(self.preview_text(value))

    def on_input_changed(self, event: Input.Changed) -> None:
        event.stop()
        self.revalidate()

    def on_select_changed(self, event: Select.Changed) -> None:
        event.stop()
        self.revalidate()

    def action_submit(self) -> None:
        value, problems = self.build()
        self.revalidate()
        if problems:
            first = next(iter(problems))
            self.field(first).focus()
            self.notify(
                f"Not {self.VERB}: fix {len(problems)} marked field(s), "
                f"first {self.LABELS[first]}.",
                severity="error",
            )
            return
        self.dismiss(value)

    def action_cancel(self) -> None:
        self.dismiss(None)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.focus_next()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "send":
            self.action_submit()
        else:
            self.action_cancel()
