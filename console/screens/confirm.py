"""Every destructive action goes through this: say what will happen, default to No."""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import BindingType
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Footer, Static

from console.screens.keys import bindings


class ConfirmScreen(ModalScreen[bool]):
    CSS_PATH = "modals.tcss"
    BINDING_GROUP_TITLE = "Confirm"
    AUTO_FOCUS = "#cancel"
    BINDINGS: ClassVar[list[BindingType]] = list(bindings("confirm"))

    def __init__(self, title: str, body: str, confirm_label: str = "Yes") -> None:
        super().__init__()
        self.title_text = title
        self.body = body
        self.confirm_label = confirm_label

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog", classes="confirm"):
            yield Static(self.title_text, id="dialog-title")
            yield Static(self.body, id="dialog-body")
            with Horizontal(id="dialog-buttons"):
                yield Button("Cancel (n)", id="cancel", compact=True)
                yield Button(
                    f"{self.confirm_label} (y)", id="confirm", variant="error", compact=True
                )
        yield Footer(compact=True)

    def action_confirm(self) -> None:
        self.dismiss(True)

    def action_cancel(self) -> None:
        self.dismiss(False)

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "confirm")
