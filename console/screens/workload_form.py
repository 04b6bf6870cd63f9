"""New workload (modal, GKE): the fields of ``workload create`` as one form.

What `s` opens on a GKE cluster, where work runs as JobSets (xpk's standard and Pathways
templates, or a checkpoint-conversion Job), not as Ray jobs. Every change rebuilds a
``WorkloadSpec`` and runs ``WorkloadSpec.validate``: fields with a problem are marked and
listed; a valid spec shows the equivalent xpk command line and where the run writes.
Secrets are referenced as ``NAME=$NAME`` (their values are read from the console's
environment at submit time and travel in a Kubernetes Secret), never typed in.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult, CSSPathType
from textual.binding import BindingType
from textual.containers import Horizontal, Vertical
from textual.validation import Integer
from textual.widgets import Footer, Input, Label, Select, Static

from console.screens.form import FormScreen
from console.screens.keys import bindings
from console.services.jobs.workload import (
    CONVERT_COMMAND,
    CONVERT_DIRECTIONS,
    TEMPLATES,
    TPU_TYPES,
    WorkloadPreview,
    WorkloadSpec,
)
from console.widgets.env_input import EnvVarsInput, parse_env_vars

LABELS = {
    "name": "Name",
    "template": "Template",
    "image": "Image",
    "command": "Command",
    "tpu_type": "TPU type",
    "slices": "slices",
    "max_restarts": "restarts",
    "spot": "spot",
    "env": "Env vars",
    "hf_token_env": "HF token var",
    "run_name": "run name",
    "base_output_directory": "Output",
    "maxtext_ckpt_path": "Checkpoint",
    "convert_direction": "Convert",
    "convert_src": "from",
}
INT_FIELDS = ("slices", "max_restarts")
CONVERT_ONLY = {"convert_direction", "convert_src"}
NOT_FOR_CONVERT = {"command", "tpu_type", "slices", "max_restarts", "spot"}

Preview = Callable[[WorkloadSpec], WorkloadPreview]


def form_field(spec_key: str) -> str:
    """The form field a ``WorkloadSpec.validate`` key belongs to (``env.X`` -> ``env``)."""
    return "env" if spec_key.startswith("env.") else spec_key


class WorkloadFormScreen(FormScreen[WorkloadSpec | None]):
    LABELS = LABELS
    VERB = "created"
    CSS_PATH: ClassVar[CSSPathType | None] = ["modals.tcss", "form.tcss", "workload_form.tcss"]
    BINDING_GROUP_TITLE = "New workload"
    AUTO_FOCUS = "#name"
    BINDINGS: ClassVar[list[BindingType]] = list(bindings("workload_form"))

    def __init__(self, initial: WorkloadSpec, preview: Preview, *, cursor_blink: bool = True):
        super().__init__(cursor_blink=cursor_blink)
        self.initial = initial
        self.preview = preview

    # layout --------------------------------------------------------------------------------

    def _label(self, field: str, css: str = "label") -> Label:
        return Label(LABELS[field], id=f"label-{field}", classes=css)

    def _input(self, field: str, placeholder: str = "", css: str = "") -> Input:
        return Input(
            str(getattr(self.initial, field)),
            placeholder=placeholder,
            id=field,
            compact=True,
            classes=css,
        )

    def _select(self, field: str, options: tuple[str, ...] | list[str], value: str) -> Select[str]:
        # A value from the config that is not an option stays, shown as a problem: never
        # silently swapped for the first option.
        choices = [*options, *([value] if value and value not in options else [])]
        return Select(
            [(o, o) for o in choices],
            value=value if value in choices else choices[0],
            allow_blank=False,
            compact=True,
            id=field,
        )

    def compose(self) -> ComposeResult:
        spec = self.initial
        with Vertical(id="dialog", classes="workload"):
            yield Static("New workload (JobSet on GKE)", id="dialog-title")
            with Horizontal(classes="row"):
                yield self._label("name")
                yield self._input("name", "lower-case, e.g. grpo-llama3", "name")
                yield self._label("template", "label-s")
                yield self._select("template", TEMPLATES, spec.template)
            with Horizontal(classes="row"):
                yield self._label("image")
                yield self._input("image", "gcr.io/PROJECT/IMAGE:TAG")
            with Horizontal(classes="row"):
                yield self._label("command")
                yield self._input("command", "e.g. bash run_gptoss_20b_rl.sh")
            with Horizontal(classes="row"):
                yield self._label("tpu_type")
                yield self._select("tpu_type", list(TPU_TYPES), spec.tpu_type)
                for name in INT_FIELDS:
                    yield self._label(name, "label-s")
                    yield Input(
                        str(getattr(spec, name)),
                        id=name,
                        type="integer",
                        compact=True,
                        classes="num",
                        validators=[Integer(minimum=0)],
                    )
                yield self._label("spot", "label-s")
                yield self._select("spot", ("yes", "no"), "yes" if spec.spot else "no")
            with Horizontal(classes="row"):
                yield self._label("env")
                yield EnvVarsInput(
                    " ".join(f"{k}={v}" for k, v in spec.env.items()),
                    placeholder="NAME=value …  secrets as NAME=$NAME",
                    id="env",
                    compact=True,
                )
            with Horizontal(classes="row"):
                yield self._label("hf_token_env")
                yield self._input("hf_token_env", "a variable NAME, never the token", "short")
                yield self._label("run_name", "label-s")
                yield self._input("run_name", "default: the name (same name resumes)")
            with Horizontal(classes="row"):
                yield self._label("base_output_directory")
                yield self._input("base_output_directory", "gs://bucket/path")
            with Horizontal(classes="row"):
                yield self._label("maxtext_ckpt_path")
                yield self._input("maxtext_ckpt_path", "gs://bucket/path/0/items (optional)")
            with Horizontal(classes="row"):
                yield self._label("convert_direction")
                yield self._select("convert_direction", CONVERT_DIRECTIONS, spec.convert_direction)
                yield self._label("convert_src", "label-s")
                yield self._input("convert_src", "HF model dir or MaxText checkpoint")
            yield from self.compose_outcome("Create (ctrl+s)")
        yield Footer(compact=True)

    # what the form says --------------------------------------------------------------------

    def build(self) -> tuple[WorkloadSpec, dict[str, str]]:
        """The spec the form describes now, and every problem keyed by form field."""
        problems: dict[str, str] = {}
        ints: dict[str, int] = {}
        for name in INT_FIELDS:
            raw = self.text(name)
            try:
                ints[name] = int(raw)
            except ValueError:
                problems[name] = f"{raw!r} is not a whole number"
                ints[name] = getattr(self.initial, name)
        env, env_problem = parse_env_vars(self.text("env"))
        if env_problem:
            problems["env"] = env_problem
        template = self.text("template")
        command = self.text("command")
        if template == "convert":
            command = CONVERT_COMMAND
        spec = replace(
            self.initial,
            name=self.text("name"),
            template=template,
            image=self.text("image"),
            command=command,
            tpu_type=self.text("tpu_type"),
            slices=ints["slices"],
            max_restarts=ints["max_restarts"],
            spot=self.text("spot") == "yes",
            env=env,
            hf_token_env=self.text("hf_token_env"),
            run_name=self.text("run_name"),
            base_output_directory=self.text("base_output_directory"),
            maxtext_ckpt_path=self.text("maxtext_ckpt_path"),
            convert_direction=self.text("convert_direction"),
            convert_src=self.text("convert_src"),
        )
        for key, message in spec.validate().items():
            problems.setdefault(form_field(key), message)
        return spec, {k: v for k, v in problems.items() if self.applies(k, spec)}

    def text(self, name: str) -> str:
        return self.value(name).strip()

    def applies(self, name: str, value: WorkloadSpec | None) -> bool:
        assert value is not None
        if value.template == "convert":
            return name not in NOT_FOR_CONVERT
        return name not in CONVERT_ONLY

    def preview_text(self, value: WorkloadSpec | None) -> Text:
        assert value is not None
        if self.problems:
            return Text("(fix the marked fields to see the xpk command line)", style="dim")
        try:
            preview = self.preview(value)
        except Exception as exc:  # the backend's own refusal, e.g. no workloads here
            return Text(str(exc), style="red")
        text = Text(preview.command_line, overflow="fold")
        text.append(f"\nwrites to {preview.output_uri or value.output_uri}", "dim")
        if preview.secret_keys:
            keys = ", ".join(preview.secret_keys)
            text.append(f"\nsecrets from this console's environment: {keys}", "dim")
        return text
