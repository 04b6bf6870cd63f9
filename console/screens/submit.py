"""Submit (modal): the seed's three modes as one form, validated before anything is sent.

Every change rebuilds a ``SubmitSpec`` and runs ``SubmitSpec.validate``: fields with a
problem are marked and listed, and the exact ``ray job submit`` command it would run is
shown underneath (secret values masked). Invalid input never leaves the form.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any, ClassVar

from rich.text import Text
from textual.app import ComposeResult, CSSPathType
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.validation import Integer
from textual.widget import Widget
from textual.widgets import Button, Footer, Input, Label, Select, Static

from console.services.submit import MODES, SWEEP_BACKENDS, SWEEP_METHODS, SubmitSpec
from console.widgets.env_input import EnvVarsInput, parse_env_vars

INT_FIELDS: dict[str, int] = {
    "num_nodes": 1,
    "agents_per_node": 1,
    "tpu_per_task": 0,
    "base_seed": 0,
    "run_cap": 1,
}
LABELS = {
    "mode": "Mode",
    "train_args": "Train args",
    "pip": "pip",
    "env_vars": "Env vars",
    "num_nodes": "Nodes",
    "agents_per_node": "Agents/node",
    "tpu_per_task": "TPU/task",
    "base_seed": "Seed",
    "sweep_kind": "Sweep",
    "sweep_method": "method",
    "run_cap": "cap",
    "sweep_backend": "via",
    "sweep_args": "Sweep args",
}
# Which fields matter in which mode (the rest are disabled, so tab skips them).
MODE_FIELDS = {
    "single": {"train_args", "pip", "env_vars", "base_seed"},
    "distributed": {"train_args", "pip", "env_vars", "num_nodes", "tpu_per_task", "base_seed"},
    "sweep": {
        "train_args",
        "pip",
        "env_vars",
        "num_nodes",
        "agents_per_node",
        "tpu_per_task",
        "sweep_kind",
        "sweep_method",
        "run_cap",
        "sweep_backend",
        "sweep_args",
    },
}


def _split_pip(text: str) -> list[str]:
    return [part for part in re.split(r"[\s,]+", text.strip()) if part]


def _env_text(env: Any) -> str:
    if not isinstance(env, dict):
        return ""
    return " ".join(f"{k}={v}" for k, v in env.items())


class SubmitScreen(ModalScreen[SubmitSpec | None]):
    CSS_PATH: ClassVar[CSSPathType | None] = ["modals.tcss", "submit.tcss"]
    BINDING_GROUP_TITLE = "Submit job"
    AUTO_FOCUS = "#train_args"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding(
            "ctrl+s",
            "submit",
            "Submit",
            priority=True,
            id="submit.send",
            tooltip="Validate and submit; on a problem the form stays open with the field marked",
        ),
        Binding(
            "escape", "cancel", "Cancel", id="submit.cancel", tooltip="Close without submitting"
        ),
    ]

    def __init__(
        self,
        initial: SubmitSpec,
        address: str,
        *,
        working_dir: str = ".",
        cursor_blink: bool = True,
    ) -> None:
        super().__init__()
        self.initial = initial
        self.address = address
        self.working_dir = working_dir
        self.cursor_blink = cursor_blink
        self.problems: dict[str, str] = {}

    # layout --------------------------------------------------------------------------------

    def _label(self, field: str, css: str = "label") -> Label:
        return Label(LABELS[field], id=f"label-{field}", classes=css)

    def _int_input(self, field: str) -> Input:
        value = getattr(self.initial, field)
        return Input(
            str(value),
            id=field,
            type="integer",
            compact=True,
            classes="num",
            validators=[Integer(minimum=INT_FIELDS[field] if field != "base_seed" else None)],
        )

    def compose(self) -> ComposeResult:
        spec = self.initial
        env = dict(spec.runtime_env)
        with Vertical(id="dialog", classes="submit"):
            yield Static("Submit a job", id="dialog-title")
            with Horizontal(classes="row"):
                yield self._label("mode")
                yield Select(
                    [(m, m) for m in MODES],
                    value=spec.mode,
                    allow_blank=False,
                    compact=True,
                    id="mode",
                )
                yield self._label("num_nodes", "label-s")
                yield self._int_input("num_nodes")
                yield self._label("agents_per_node", "label-s")
                yield self._int_input("agents_per_node")
            with Horizontal(classes="row"):
                yield self._label("train_args")
                yield Input(spec.train_args, id="train_args", compact=True)
            with Horizontal(classes="row"):
                yield self._label("pip")
                yield Input(
                    " ".join(env.get("pip") or []),
                    placeholder="requirements, e.g. stable-baselines3>=2.2 gymnasium wandb",
                    id="pip",
                    compact=True,
                )
            with Horizontal(classes="row"):
                yield self._label("env_vars")
                yield EnvVarsInput(
                    _env_text(env.get("env_vars")),
                    placeholder="NAME=value …  secrets as NAME=$NAME",
                    id="env_vars",
                    compact=True,
                )
            with Horizontal(classes="row"):
                yield self._label("tpu_per_task")
                yield self._int_input("tpu_per_task")
                yield self._label("base_seed", "label-s")
                yield self._int_input("base_seed")
            with Horizontal(classes="row"):
                yield self._label("sweep_kind")
                yield Input(spec.sweep_kind, id="sweep_kind", compact=True)
                yield self._label("sweep_method", "label-s")
                yield Select(
                    [(m, m) for m in SWEEP_METHODS],
                    value=spec.sweep_method if spec.sweep_method in SWEEP_METHODS else "random",
                    allow_blank=False,
                    compact=True,
                    id="sweep_method",
                )
                yield self._label("run_cap", "label-s")
                yield self._int_input("run_cap")
                yield self._label("sweep_backend", "label-s")
                yield Select(
                    [(b, b) for b in SWEEP_BACKENDS],
                    value=spec.sweep_backend if spec.sweep_backend in SWEEP_BACKENDS else "tune",
                    allow_blank=False,
                    compact=True,
                    id="sweep_backend",
                )
            with Horizontal(classes="row"):
                yield self._label("sweep_args")
                yield Input(
                    spec.sweep_args,
                    placeholder="more engine.sweep flags, e.g. --trial-timesteps 3000",
                    id="sweep_args",
                    compact=True,
                )
            yield Static(id="problems")
            yield Static("will run:", id="preview-title")
            yield Static(id="preview")
            with Horizontal(id="dialog-buttons"):
                yield Button("Cancel (esc)", id="cancel", compact=True)
                yield Button("Submit (ctrl+s)", id="send", variant="primary", compact=True)
        yield Footer(compact=True)

    def on_resize(self) -> None:
        # Room for a blank line between fields on a tall terminal; dense at 80x24.
        self.set_class(self.size.height >= 36, "-roomy")

    def on_mount(self) -> None:
        for box in self.query(Input):
            box.cursor_blink = self.cursor_blink
        self.revalidate()

    # validation ----------------------------------------------------------------------------

    def field(self, name: str) -> Widget:
        return self.query_one(f"#{name}")

    def value(self, name: str) -> str:
        widget = self.field(name)
        if isinstance(widget, Select):
            return str(widget.value)
        assert isinstance(widget, Input)
        return widget.value

    def build(self) -> tuple[SubmitSpec, dict[str, str]]:
        """The spec the form describes now, and every problem keyed by form field."""
        problems: dict[str, str] = {}
        ints: dict[str, int] = {}
        for name, minimum in INT_FIELDS.items():
            raw = self.value(name).strip()
            try:
                ints[name] = int(raw)
            except ValueError:
                problems[name] = f"{raw!r} is not a whole number"
                ints[name] = max(minimum, getattr(self.initial, name))
        env_vars, env_problem = parse_env_vars(self.value("env_vars"))
        if env_problem:
            problems["env_vars"] = env_problem
        runtime_env = {
            k: v for k, v in self.initial.runtime_env.items() if k not in ("pip", "env_vars")
        }
        pip = _split_pip(self.value("pip"))
        if pip:
            runtime_env["pip"] = pip
        if env_vars:
            runtime_env["env_vars"] = env_vars
        spec = replace(
            self.initial,
            mode=self.value("mode"),
            train_args=self.value("train_args").strip(),
            runtime_env=runtime_env,
            sweep_kind=self.value("sweep_kind").strip(),
            sweep_method=self.value("sweep_method"),
            sweep_backend=self.value("sweep_backend"),
            num_nodes=ints["num_nodes"],
            agents_per_node=ints["agents_per_node"],
            tpu_per_task=ints["tpu_per_task"],
            base_seed=ints["base_seed"],
            run_cap=ints["run_cap"],
            sweep_args=self.value("sweep_args").strip(),
        )
        for key, message in spec.validate().items():
            if key == "runtime_env":
                key = "pip" if ".pip" in message else "env_vars"
            problems.setdefault(key, message)
        relevant = MODE_FIELDS.get(spec.mode, set(LABELS))
        problems = {k: v for k, v in problems.items() if k in relevant or k == "mode"}
        return spec, problems

    def revalidate(self) -> None:
        spec, self.problems = self.build()
        relevant = MODE_FIELDS.get(spec.mode, set(LABELS))
        for name in LABELS:
            widget = self.field(name)
            if name != "mode":
                widget.disabled = name not in relevant
            bad = name in self.problems
            widget.set_class(bad, "-invalid", "-problem")
            self.query_one(f"#label-{name}", Label).set_class(bad, "-problem")
        problems = Text()
        for name, message in self.problems.items():
            if problems:
                problems.append("\n")
            problems.append(f"✗ {LABELS.get(name, name)}: ", "bold red")
            problems.append(message, "red")
        box = self.query_one("#problems", Static)
        box.display = bool(self.problems)
        box.update(problems)
        preview = Text(spec.command_preview(self.address, self.working_dir), overflow="fold")
        if self.problems:
            preview.stylize("dim")
        self.query_one("#preview", Static).update(preview)

    def on_input_changed(self, event: Input.Changed) -> None:
        event.stop()
        self.revalidate()

    def on_select_changed(self, event: Select.Changed) -> None:
        event.stop()
        self.revalidate()

    # actions -------------------------------------------------------------------------------

    def action_submit(self) -> None:
        spec, problems = self.build()
        self.revalidate()
        if problems:
            first = next(iter(problems))
            self.field(first).focus()
            self.notify(
                f"Not submitted: fix {len(problems)} marked field(s), first {LABELS[first]}.",
                severity="error",
            )
            return
        self.dismiss(spec)

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
