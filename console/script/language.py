"""The script language: one table of every action's signature, and its reference text.

    # comment                       blank lines and '#' comments are ignored
    pod up [--hosts N]              shell-style quoting (shlex); a line ending in '\\'
    submit single --train-args "--algo ppo --total-timesteps 2048"   continues on the next
    set continue-on-error on|off    directive: from here on a failed step does not stop
    ray-up --continue               per line: this step's failure does not stop the script
    finally                         directive: every later line runs even after a failure

``ACTIONS`` is the one table: the parser, the validator, the runner's dispatch and
``usage_text()`` (``phantom --script-help``) all read it. Host arguments take an index
(``2``), a name (``<node_name>-w2``) or, on the local emulator, an IP (``127.0.0.12``).
``last`` (and an omitted job id) is the job of the latest ``submit``/``relaunch-sweep``/
``workload create``. An action names what the cluster must be able to do (``needs``, a
``Capability`` its backend declares: the pod emulator's verbs for ``pod``/``preempt``/
``recreate``, the GKE emulator's for ``gke up|down`` and ``preempt-slice``, Ray's for
``ray-up``); a script for a cluster that cannot is refused before anything runs.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from typing import Any

from console.services.capabilities import Capability
from console.services.jobs.spec import SWEEP_BACKENDS, SWEEP_METHODS
from console.services.jobs.workload import CONVERT_DIRECTIONS, TEMPLATES, TPU_TYPES
from console.services.model import JobStatus

ACTOR = "script"
JOB_STATUSES = tuple(
    str(s)
    for s in (
        JobStatus.PENDING,
        JobStatus.RUNNING,
        JobStatus.SUCCEEDED,
        JobStatus.FAILED,
        JobStatus.PREEMPTED,
        JobStatus.STOPPED,
    )
)
WORKLOAD_STATES = (*JOB_STATUSES, "COMPLETED")  # COMPLETED: the JobSet's word for SUCCEEDED
MAX_EMULATED_HOSTS = 1024  # the emulator's own limit (a v4-4096 slice has 1,024 hosts)
# Emulated host i in its first zone: 127.0.<i // 200>.<10 + i % 200>.
FIRST_LOCAL_OCTET = 10
LOCAL_HOSTS_PER_BLOCK = 200


@dataclass(frozen=True)
class Arg:
    """A positional argument or a ``--flag`` of an action.

    ``kind`` picks the converter: int, seconds, str, choice, onoff, host, host_or_all,
    job, runtime_env, kind, bool (flag without value).
    """

    name: str  # positional: metavar; flag: "--name"
    kind: str
    metavar: str = ""
    help: str = ""
    choices: tuple[str, ...] = ()
    min: float | None = None
    max: float | None = None
    optional: bool = False
    variadic: bool = False
    default: Any = None
    repeat: bool = False

    @property
    def dest(self) -> str:
        """Key in a step's args: the flag without dashes, or the positional's name."""
        return self.name.lstrip("-").replace("-", "_")

    @property
    def is_flag(self) -> bool:
        return self.name.startswith("--")

    def usage(self) -> str:
        if self.is_flag:
            text = self.name if self.kind == "bool" else f"{self.name} {self.meta()}"
            return f"[{text}]" + ("..." if self.repeat else "")
        text = self.meta() + (" ..." if self.variadic else "")
        return f"[{text}]" if self.optional or self.variadic else text

    def meta(self) -> str:
        if self.metavar:
            return self.metavar
        if self.choices:
            return "|".join(self.choices)
        return self.dest.upper()


@dataclass(frozen=True)
class ActionDef:
    name: str
    summary: str
    positionals: tuple[Arg, ...] = ()
    flags: tuple[Arg, ...] = ()
    sets_job: bool = False  # defines what `last` refers to
    needs: Capability | None = None  # what the cluster must be able to do (None: any cluster)

    def usage_parts(self) -> list[str]:
        parts = [self.name, *(a.usage() for a in self.positionals)]
        return parts + [f.usage() for f in self.flags]

    def usage(self) -> str:
        return " ".join(self.usage_parts())

    def flag(self, name: str) -> Arg | None:
        return next((f for f in self.flags if f.name == name), None)


_TIMEOUT_HELP = "seconds (90, 1.5, 90s, 5m, 1h)"


def _timeout(default: str) -> Arg:
    return Arg("--timeout", "seconds", "S", f"give up after S {_TIMEOUT_HELP}; default {default}")


_JOB = Arg("job", "job", "ID|last", "a Ray submission id, or last (the default)", optional=True)
_LOGS_REF = Arg(
    "job",
    "job",
    "ID|POD|WORKLOAD|last",
    "a Ray submission id; on GKE a workload or a pod; or last (the default)",
    optional=True,
)
_WORKLOAD_FLAGS = (
    Arg(
        "--template",
        "choice",
        choices=TEMPLATES,
        help="xpk's standard or Pathways JobSet, "
        "or the HF <-> MaxText conversion Job (default standard)",
    ),
    Arg("--spec", "path", "FILE", "the spec as TOML/JSON/YAML (flags override it)"),
    Arg("--image", "str", "IMAGE", "container image (default: gke.image)"),
    Arg("--command", "str", '"..."', "what every worker runs (default: gke.command)"),
    Arg("--tpu-type", "choice", choices=tuple(TPU_TYPES), help="default gke.tpu_type"),
    Arg("--slices", "int", "N", min=1, max=64),
    Arg("--max-restarts", "int", "N", min=0, max=1000),
    Arg("--spot", "onoff", "on|off"),
    Arg("--env", "env", "NAME=VALUE", "container env; secrets as NAME=$VAR only", repeat=True),
    Arg("--hf-token-env", "str", "VAR", "the variable holding your HF token (default HF_TOKEN)"),
    Arg("--run-name", "str", "RUN", "default: the workload name (same name: resumes)"),
    Arg("--base-output-dir", "str", "URI", "gs://bucket/path or file:///path"),
    Arg("--checkpoint", "str", "URI", "MAXTEXT_CKPT_PATH (must exist)"),
    Arg("--grace", "int", "S", "terminationGracePeriodSeconds", min=0, max=3600),
    Arg("--direction", "choice", choices=CONVERT_DIRECTIONS, help="convert: which way"),
    Arg("--src", "str", "URI", "convert: the checkpoint to convert"),
    Arg("--dry-run", "bool", help="only show the manifest and the xpk command line"),
)

ACTIONS: dict[str, ActionDef] = {
    a.name: a
    for a in (
        ActionDef(
            "pod up",
            "start the local pod emulator and wait until READY (local only)",
            flags=(
                Arg("--hosts", "int", "N", "number of hosts", min=1, max=MAX_EMULATED_HOSTS),
                Arg("--ready-delay", "seconds", "S", "seconds a (re)created host stays CREATING"),
                Arg(
                    "--ssh-port",
                    "int",
                    "PORT",
                    "SSH port on every host (0: any free)",
                    min=0,
                    max=65535,
                ),
            ),
            needs=Capability.POD_EMULATOR,
        ),
        ActionDef(
            "pod down",
            "stop the emulator and every process of its hosts (local only)",
            needs=Capability.POD_EMULATOR,
        ),
        ActionDef(
            "gke up",
            "start the local GKE emulator (provider gke, no kubeconfig)",
            flags=(
                Arg("--slices", "int", "N", "v5p-64 slices (default gke.slices)", min=1, max=16),
                Arg("--quota-stall", "bool", help="preempted slices never come back"),
            ),
            needs=Capability.GKE_EMULATOR,
        ),
        ActionDef(
            "gke down",
            "stop the GKE emulator and every container it runs",
            needs=Capability.GKE_EMULATOR,
        ),
        ActionDef(
            "workload create",
            "create a GKE workload (xpk's JobSet, or the conversion Job); sets `last`",
            positionals=(Arg("name", "name", "NAME"),),
            flags=_WORKLOAD_FLAGS,
            sets_job=True,
            needs=Capability.WORKLOADS,
        ),
        ActionDef(
            "workload delete",
            "delete a workload and its Secret (`xpk workload delete`)",
            positionals=(Arg("name", "name", "NAME"),),
            needs=Capability.WORKLOADS,
        ),
        ActionDef(
            "wait-workload",
            "wait until the workload reaches STATE (COMPLETED = SUCCEEDED; fails early if "
            "it ends otherwise and nothing resubmits it)",
            positionals=(
                Arg("job", "job", "NAME|last"),
                Arg("status", "choice", choices=WORKLOAD_STATES),
            ),
            flags=(_timeout("3600"),),
            needs=Capability.WORKLOADS,
        ),
        ActionDef(
            "preempt-slice",
            "preempt a TPU slice as GKE reclaims spot capacity (GKE emulator only)",
            positionals=(Arg("slice", "str", "SLICE", "index or node pool name"),),
            flags=(Arg("--grace", "seconds", "S", "pods' grace before SIGKILL (default 30)"),),
            needs=Capability.GKE_EMULATOR,
        ),
        ActionDef(
            "wait-ready",
            "wait until the TPU node and every host are READY",
            flags=(_timeout("recovery.ready_timeout_s"),),
        ),
        ActionDef(
            "bootstrap",
            "run the bootstrap command on the hosts (default: all)",
            positionals=(Arg("hosts", "host", "HOST", variadic=True),),
            needs=Capability.HOSTS,
        ),
        ActionDef(
            "ray-up",
            "start the Ray head and join every worker (restarts if up)",
            needs=Capability.RAY,
        ),
        ActionDef(
            "tunnel",
            "open the SSH tunnel to the dashboard and Ray client ports",
            needs=Capability.TUNNEL,
        ),
        ActionDef(
            "submit",
            "submit a job (the seed's RAY_MODE); sets `last`",
            positionals=(Arg("mode", "choice", choices=("single", "distributed", "sweep")),),
            flags=(
                Arg("--train-args", "str", '"..."', "arguments of engine.train"),
                Arg(
                    "--runtime-env", "runtime_env", "FILE|JSON", "Ray runtime env (default: config)"
                ),
                Arg("--num-nodes", "int", "N", min=1),
                Arg("--tpu-per-task", "int", "N", min=0),
                Arg("--agents-per-node", "int", "N", min=1),
                Arg("--base-seed", "int", "N", min=0),
                Arg("--sweep-kind", "str", "K"),
                Arg("--sweep-method", "choice", choices=SWEEP_METHODS),
                Arg("--sweep-backend", "choice", choices=SWEEP_BACKENDS),
                Arg("--run-cap", "int", "N", min=1),
                Arg("--sweep-id", "str", "ID", "resume this sweep"),
                Arg(
                    "--sweep-args",
                    "str",
                    '"..."',
                    "more engine.sweep flags, e.g. '--trial-timesteps 3000 --max-failures 10'",
                ),
                Arg("--submission-id", "str", "ID"),
            ),
            sets_job=True,
            needs=Capability.RAY_JOBS,
        ),
        ActionDef(
            "wait-job",
            "wait until the job reaches STATUS (fails early if it ends otherwise; RUNNING "
            "means started, so an already SUCCEEDED job counts)",
            positionals=(_JOB, Arg("status", "choice", choices=JOB_STATUSES)),
            flags=(_timeout("3600"),),
        ),
        ActionDef(
            "logs",
            "the job's log (last N lines in the step result); on GKE a workload's "
            "(its coordinator pod) or a pod's",
            positionals=(_LOGS_REF,),
            flags=(Arg("--tail", "int", "N", "lines to keep (default 100)", min=1),),
        ),
        ActionDef("stop-job", "stop a job", positionals=(_JOB,)),
        ActionDef(
            "preempt",
            "preempt a host or all of them (local only)",
            positionals=(Arg("host", "host_or_all", "HOST|all"),),
            needs=Capability.POD_EMULATOR,
        ),
        ActionDef(
            "recreate",
            "recreate a host: bare sandbox, new host key (local only)",
            positionals=(Arg("host", "host", "HOST"),),
            needs=Capability.POD_EMULATOR,
        ),
        ActionDef(
            "recover",
            "run the recovery loop now (or join the running one) and wait",
            flags=(_timeout("1800"),),
        ),
        ActionDef(
            "relaunch-sweep",
            "relaunch the sweep agents with the same sweep id; sets `last`",
            sets_job=True,
            needs=Capability.RAY_JOBS,
        ),
        ActionDef(
            "auto-recovery",
            "switch the watchdog's automatic recovery on or off",
            positionals=(Arg("enabled", "onoff", "on|off"),),
        ),
        ActionDef(
            "wait-event",
            "wait for an event of KIND (e.g. preempted, recovered, stalled) seen since the "
            "script started and not matched by an earlier wait-event",
            positionals=(Arg("kind", "kind", "KIND"),),
            flags=(Arg("--host", "host", "HOST"), _timeout("600")),
        ),
        ActionDef("status", "snapshot of pod, Ray, jobs and cadence (as `phantom status --json`)"),
        ActionDef(
            "ledger",
            "goodput, badput by cause, chip-hours, spot against on-demand and the checkpoint "
            "advice, from the journal (as `status --json`'s ledger); --since: the last S only",
            flags=(Arg("--since", "seconds", "S", f"look back S {_TIMEOUT_HELP}; default: all"),),
        ),
        ActionDef(
            "teardown",
            "`ray stop -f` everywhere and close the tunnel (VMs stay)",
            needs=Capability.RAY,
        ),
        ActionDef("sleep", "wait S seconds", positionals=(Arg("seconds", "seconds", "S"),)),
        ActionDef(
            "finally",
            "directive: the lines after it always run (cleanup), also after a failed step; "
            "each continues on error; there, teardown and pod down act only if this script "
            "started Ray / the pod",
        ),
        ActionDef(
            "set",
            "directive: set continue-on-error on|off (no step of its own)",
            positionals=(
                Arg("setting", "choice", choices=("continue-on-error",)),
                Arg("enabled", "onoff", "on|off"),
            ),
        ),
    )
}
# Every action accepts it: this line's failure does not stop the script.
CONTINUE_FLAG = Arg("--continue", "bool", help="a failure of this step does not stop the script")
TWO_WORD = {"pod", "gke", "workload"}
DEFAULT_TIMEOUTS = {
    "wait-job": 3600.0,
    "wait-workload": 3600.0,
    "recover": 1800.0,
    "wait-event": 600.0,
}


def _wrap_units(units: list[str], width: int, first: str, rest: str) -> list[str]:
    """Wrap whole units (``[--flag VALUE]`` never splits across lines)."""
    lines: list[str] = []
    cur = first
    for u in units:
        if cur.strip() and len(cur) + 1 + len(u) > width:
            lines.append(cur)
            cur = rest + u
        else:
            cur = cur + (" " if cur.strip() else "") + u
    lines.append(cur)
    return lines


def usage_text() -> str:
    """The language reference, generated from ``ACTIONS`` (fits 80 columns)."""
    lines = ["phantom --script FILE|-   one action per line; '#' comments; shell quoting", ""]
    for a in ACTIONS.values():
        lines += _wrap_units(a.usage_parts(), 78, "  ", "      ")
        lines += textwrap.wrap(a.summary, 78, initial_indent="      ", subsequent_indent="      ")
    lines += [
        "",
        "  any action: --continue   a failure of this step does not stop the script",
        "  HOST: index, <node_name>-w<i>, or (local) 127.0.0.(10+i)",
        "  SLICE: a TPU slice's index or node pool name (GKE emulator)",
        "  S (seconds): 90, 1.5, 90s, 5m, 1h",
        "  exit: 0 ok, 1 a step failed, 2 invalid script/config (nothing run),",
        "        130 interrupted (after stopping what the script started)",
    ]
    return "\n".join(lines)
