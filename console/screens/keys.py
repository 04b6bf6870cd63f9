"""The key bindings of the table's actions (``console.services.action_table``), as Textual
``Binding``s: a screen lists ``table_key("overview.recover")`` where the key goes, so its
key, label, tooltip and action come from the one row that declares them."""

from __future__ import annotations

from textual.binding import Binding

from console.services.action_table import ACTIONS, Key

_KEYS: dict[str, Key] = {k.id: k for a in ACTIONS for k in a.keys}


def table_key(binding_id: str, **extra: object) -> Binding:
    """The ``Binding`` the table declares under ``binding_id`` (``extra``: a group)."""
    k = _KEYS[binding_id]
    return Binding(
        k.key,
        k.action,
        k.label,
        show=k.show,
        id=k.id,
        tooltip=k.tooltip,
        **extra,  # type: ignore[arg-type]
    )
