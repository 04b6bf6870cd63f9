"""What a GKE workload submission is, validated field by field before anything is sent.

One ``WorkloadSpec`` serves ``--script``'s ``workload create`` line, the TUI's form and the
recovery's resubmission (it is recorded as submitted; secrets stay ``$NAME`` references).
Three templates, as xpk makes them: ``standard`` (`xpk workload create`: one JobSet, a Job
per slice), ``pathways`` (`xpk workload create-pathways`: a CPU head with the Pathways
proxy and resource manager, TPU workers per slice) and ``convert`` (the HF <-> MaxText
checkpoint conversion, a batch Job). ``validate`` returns every problem keyed by field so a
form can mark each one; the backend renders the manifest and the xpk command line.

Secrets are never inline: an env value whose name looks secret must be ``"$NAME"`` (read
from the console's environment at submit time and delivered as a Kubernetes Secret), the
Hugging Face token is named by ``hf_token_env`` only, and a value shaped like an HF token is
refused wherever it appears.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from console.config.gke_tpu import TPU_TYPES, TpuType, gke_tpu_type
from console.config.names import ENV_NAME_RE as _ENV_NAME
from console.config.names import NAME_RE as _NAME
from console.config.validate import Invalid
from console.secrets import is_secret_name
from console.services.jobs.spec import SpecError

TEMPLATES = ("standard", "pathways", "convert")
CONVERT_DIRECTIONS = ("to_maxtext", "to_huggingface")
# On the emulator every gs:// bucket is a directory of its run dir: this is the one the
# seed's BASE_OUTPUT_DIRECTORY points at when the config names none.
EMULATOR_OUTPUT = "gs://phantom-bucket/maxtext-runs"
CONVERT_COMMAND = "bash convert_checkpoint.sh"
MAX_NAME = 40  # xpk's workload name limit: pod names add "-slice-job-<i>-<j>-<hash>"
# Set by the console from the spec's own fields; a user's env must not shadow them.
RESERVED_ENV = ("BASE_OUTPUT_DIRECTORY", "RUN_NAME", "MAXTEXT_CKPT_PATH", "WORKLOAD_NAME")
# A trainer that checkpoints when signalled names the signal here (``checkpoint`` asks with
# it). The signal reaches the container's main process, xpk's wrapper, which passes it on.
ASK_ENV = "PHANTOM_CHECKPOINT_SIGNAL"
# Signals a wrapper can pass on and a trainer can take as an ask: not those that kill or stop
# (SIGKILL, SIGSTOP cannot be caught; SIGTERM is the preemption notice), nor the shell's own.
ASK_SIGNALS = ("SIGUSR1", "SIGUSR2", "SIGHUP")


# The run name is a path component and a label value: at most 63, alphanumeric at both ends.
_RUN_NAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$")
_URI = re.compile(r"^(gs://[a-z0-9][-a-z0-9_.]{1,61}[a-z0-9](/.*)?|file:///.*)$")
_HF_TOKEN = re.compile(r"\bhf_[A-Za-z0-9]{30,}\b")
# The image reference grammar of github.com/distribution/reference (what the kubelet parses).
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|[-]+)[a-z0-9]+)*"
_DOMAIN_PART = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = rf"(?:{_DOMAIN_PART}(?:\.{_DOMAIN_PART})*|\[[0-9a-fA-F:]+\])(?::[0-9]+)?"
_REFERENCE = re.compile(
    rf"^(?:{_DOMAIN}/)?{_COMPONENT}(?:/{_COMPONENT})*"
    r"(?::[\w][\w.-]{0,127})?(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*"
    r":[0-9a-fA-F]{32,})?$"
)


def image_problem(ref: str) -> str:
    """ "" for a well-formed image reference, else what is wrong and the expected form."""
    if not ref:
        return "required, e.g. gcr.io/PROJECT/IMAGE:TAG"
    if ref != ref.strip() or " " in ref:
        return f"{ref!r}: no spaces in an image reference"
    if not _REFERENCE.match(ref) or len(ref.split("@")[0].rsplit(":", 1)[0]) > 255:
        return (
            f"{ref!r} is not an image reference (invalid reference format); use "
            "[REGISTRY/]REPOSITORY[:TAG][@sha256:DIGEST] in lower case, e.g. "
            "gcr.io/my-project/maxtext-rl:latest"
        )
    return ""


@dataclass(frozen=True)
class WorkloadSpec:
    name: str
    template: str = "standard"
    image: str = ""
    command: str = ""
    tpu_type: str = "v5p-64"
    slices: int = 1
    max_restarts: int = 3
    spot: bool = True
    env: Mapping[str, str] = field(default_factory=dict)
    hf_token_env: str = "HF_TOKEN"  # the NAME of the variable, never the token
    run_name: str = ""  # "" = the workload name (same run name -> resumes from checkpoints)
    base_output_directory: str = ""
    maxtext_ckpt_path: str = ""  # MAXTEXT_CKPT_PATH: must exist before submit
    termination_grace_s: int = 30
    convert_direction: str = "to_maxtext"  # convert: to_maxtext / to_huggingface
    convert_src: str = ""  # convert: HF model dir (empty: download) or MaxText checkpoint

    def but(self, name: str, **fields: Any) -> WorkloadSpec:
        """These defaults (the config's, built once by the wiring), named ``name`` and
        overridden by ``fields`` (None = default)."""
        values = {k: v for k, v in fields.items() if v is not None}
        if values.get("template") == "convert" and "command" not in fields:
            values["command"] = CONVERT_COMMAND
        return dataclasses.replace(self, name=name, **values)

    @property
    def effective_run_name(self) -> str:
        return self.run_name or self.name

    @property
    def tpu(self) -> TpuType | None:
        return TPU_TYPES.get(self.tpu_type)

    @property
    def output_uri(self) -> str:
        """Where the run writes: ``{base_output_directory}/{run_name}`` (convert: the base)."""
        base = self.base_output_directory.rstrip("/")
        return base if self.template == "convert" else f"{base}/{self.effective_run_name}"

    def secret_refs(self) -> dict[str, str]:
        """Container variable -> the console variable whose value the Secret carries."""
        refs = {k: v[1:] for k, v in self.env.items() if v.startswith("$")}
        if self.hf_token_env:
            refs.setdefault("HF_TOKEN", self.hf_token_env)
        return refs

    def plain_env(self) -> dict[str, str]:
        return {k: v for k, v in self.env.items() if not v.startswith("$")}

    @property
    def ask_signal(self) -> str:
        """The signal that asks the trainer for a checkpoint (``ASK_ENV``), "" if none."""
        value = self.env.get(ASK_ENV, "")
        return value if value in ASK_SIGNALS else ""

    def validate(self) -> dict[str, str]:
        """Every problem, keyed by field name (empty dict: valid)."""
        p: dict[str, str] = {}
        if not _NAME.match(self.name) or len(self.name) > MAX_NAME:
            p["name"] = (
                f"{self.name!r}: lower-case letters, digits and '-', starting with a letter, "
                f"at most {MAX_NAME} characters (it names the JobSet and its pods)"
            )
        if self.template not in TEMPLATES:
            p["template"] = f"{self.template!r}: use one of {', '.join(TEMPLATES)}"
        problem = image_problem(self.image)
        if problem:
            p["image"] = problem
        if self.template in ("standard", "pathways"):
            try:
                if not shlex.split(self.command):
                    p["command"] = "required, e.g. bash run_gptoss_20b_rl.sh"
            except ValueError as exc:
                p["command"] = f"bad quoting: {exc}"
        if self.template != "convert":
            try:
                gke_tpu_type("tpu_type", self.tpu_type)
            except Invalid as exc:
                p["tpu_type"] = str(exc).removeprefix("tpu_type ")
        if not 1 <= self.slices <= 64:
            p["slices"] = f"must be between 1 and 64, got {self.slices}"
        if not 0 <= self.max_restarts <= 1000:
            p["max_restarts"] = f"must be between 0 and 1000, got {self.max_restarts}"
        if not 0 <= self.termination_grace_s <= 3600:
            p["termination_grace_s"] = f"must be 0..3600 seconds, got {self.termination_grace_s}"
        self._check_env(p)
        if self.hf_token_env and (
            not _ENV_NAME.match(self.hf_token_env) or _HF_TOKEN.search(self.hf_token_env)
        ):
            p["hf_token_env"] = (
                f"{self._shown(self.hf_token_env)}: the NAME of an environment variable "
                "(e.g. HF_TOKEN), never the token itself"
            )
        if not _RUN_NAME.match(self.effective_run_name):
            p["run_name"] = (
                f"{self.effective_run_name!r}: at most 63 letters, digits, '.', '_' and '-', "
                "starting and ending with a letter or digit"
            )
        if not self.base_output_directory:
            p["base_output_directory"] = "required: gs://bucket/path or file:///path"
        elif not _URI.match(self.base_output_directory):
            p["base_output_directory"] = (
                f"{self.base_output_directory!r}: use gs://bucket/path or file:///abs/path"
            )
        if self.maxtext_ckpt_path and not _URI.match(self.maxtext_ckpt_path):
            p["maxtext_ckpt_path"] = (
                f"{self.maxtext_ckpt_path!r}: use gs://bucket/path/0/items or file:///path"
            )
        if self.template == "convert":
            if self.convert_direction not in CONVERT_DIRECTIONS:
                p["convert_direction"] = (
                    f"{self.convert_direction!r}: use {' or '.join(CONVERT_DIRECTIONS)}"
                )
            if self.convert_src and not _URI.match(self.convert_src):
                p["convert_src"] = f"{self.convert_src!r}: use gs://bucket/path or file:///path"
            if self.convert_direction == "to_huggingface" and not self.convert_src:
                p["convert_src"] = "required for to_huggingface: the MaxText checkpoint"
        if _HF_TOKEN.search(self.command):
            p["command"] = (
                "contains what looks like a Hugging Face token: never inline it; name its "
                "variable with hf_token_env"
            )
        return p

    def _check_env(self, p: dict[str, str]) -> None:
        for key, value in self.env.items():
            label = f"env.{key}"
            if not _ENV_NAME.match(str(key)):
                p[label] = f"{key!r} is not a variable name (letters, digits and '_')"
            elif not isinstance(value, str):
                p[label] = f"must be a string, got {type(value).__name__}"
            elif key in RESERVED_ENV:
                p[label] = "set by the console from the spec; use its own field instead"
            elif key == ASK_ENV and value not in ASK_SIGNALS:
                p[label] = (
                    f"{value!r}: the signal that asks the trainer for a checkpoint, one of "
                    f"{', '.join(ASK_SIGNALS)} (e.g. SIGUSR2)"
                )
            elif value.startswith("$"):
                if not _ENV_NAME.match(value[1:]):
                    p[label] = f"{value!r}: a reference is $NAME of a variable"
            elif (is_secret_name(key) and value) or _HF_TOKEN.search(value):
                p[label] = (
                    f'do not inline a secret; write "${key}" so its value is read from the '
                    "console's environment at submit time and sent as a Kubernetes Secret"
                )
        if self.hf_token_env and "HF_TOKEN" in self.env and "env.HF_TOKEN" not in p:
            p["env.HF_TOKEN"] = "the Hugging Face token comes from hf_token_env; remove it"

    @staticmethod
    def _shown(value: str) -> str:
        return "the value" if _HF_TOKEN.search(value) else repr(value)

    def checked(self) -> WorkloadSpec:
        problems = self.validate()
        if problems:
            raise SpecError(problems)
        return self

    def to_json(self) -> str:
        data = dataclasses.asdict(self)
        data["env"] = dict(self.env)  # $NAME references, never values
        return json.dumps(data, sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> WorkloadSpec:
        data = json.loads(text)
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})

    def display(self) -> dict[str, Any]:
        """The spec as a JSON-able dict safe to show (env references stay $NAME)."""
        out = dataclasses.asdict(self)
        out["env"] = dict(self.env)
        out["run_name"] = self.effective_run_name
        return out


@dataclass(frozen=True)
class WorkloadPreview:
    """What a submission will create, before it does: the manifest (YAML, secrets by
    reference only), the equivalent xpk (or kubectl) command line and the Cloud Console
    links (computed for display, never opened)."""

    name: str
    kind: str  # JobSet / Job
    manifest: Mapping[str, Any]
    manifest_yaml: str
    command_line: str
    console_url: str = ""
    logs_url: str = ""
    secret_name: str = ""  # the Secret the $NAME values travel in ("" when none)
    secret_keys: tuple[str, ...] = ()
    output_uri: str = ""
