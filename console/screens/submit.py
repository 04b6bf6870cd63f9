"""Submit (modal): the seed's three modes as one form, validated before anything is sent.

Every change rebuilds a ``SubmitSpec`` and runs ``SubmitSpec.validate`` (``FormScreen``):
fields with a problem are marked and listed, and the exact ``ray job submit`` command it
would run is shown underneath (secret values masked). Invalid input never leaves the form.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import replace
from typing import Any, ClassVar

from rich.text import Text
from textual.app import ComposeResult, CSSPathType
from textual.binding import BindingType
from textual.containers import Horizontal, Vertical
from textual.validation import Integer
from textual.widgets import Footer, Input, Label, Select, Static

from console.screens.form import FormScreen
from console.screens.keys import bindings
from console.services.jobs.spec import MODES, SWEEP_BACKENDS, SWEEP_METHODS, SubmitSpec
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


class SubmitScreen(FormScreen[SubmitSpec | None]):
    LABELS = LABELS
    ALWAYS_ON = frozenset({"mode"})
    CSS_PATH: ClassVar[CSSPathType | None] = ["modals.tcss", "form.tcss", "submit.tcss"]
    BINDING_GROUP_TITLE = "Submit job"
    AUTO_FOCUS = "#train_args"
    BINDINGS: ClassVar[list[BindingType]] = list(bindings("submit"))

    def __init__(
        self,
        initial: SubmitSpec,
        address: str,
        *,
        working_dir: str = ".",
        cursor_blink: bool = True,
        sweep_url: Callable[[SubmitSpec], str] | None = None,
    ) -> None:
        super().__init__(cursor_blink=cursor_blink)
        self.initial = initial
        self.address = address
        self.working_dir = working_dir
        # a W&B sweep's page for a spec ("" when it cannot be named), shown under the command
        self.sweep_url = sweep_url

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
            yield from self.compose_outcome("Submit (ctrl+s)")
        yield Footer(compact=True)

    # what the form says --------------------------------------------------------------------

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
            if key == "runtime_env":  # the form's field is the part the error names
                bad = spec.runtime_env_problem()
                key = "pip" if bad is not None and bad.part == "pip" else "env_vars"
            problems.setdefault(key, message)
        problems = {k: v for k, v in problems.items() if self.applies(k, spec) or k == "mode"}
        return spec, problems

    def applies(self, name: str, value: SubmitSpec | None) -> bool:
        assert value is not None
        return name in MODE_FIELDS.get(value.mode, set(LABELS))

    def revalidate(self) -> None:
        super().revalidate()
        # The W&B sweep's page beside "will run:" (the preview below is full at 80x24); it
        # ends in <id> until W&B gives the sweep its id, when it starts.
        spec, _ = self.build()
        url = self.sweep_url(spec) if self.sweep_url is not None else ""
        title = Text("will run:")
        if url:
            title.append("   W&B sweep ", "bold")
            title.append(url)
        self.query_one("#preview-title", Static).update(title)

    def preview_text(self, value: SubmitSpec | None) -> Text:
        assert value is not None
        preview = Text(value.command_preview(self.address, self.working_dir), overflow="fold")
        if self.problems:
            preview.stylize("dim")
        return preview
