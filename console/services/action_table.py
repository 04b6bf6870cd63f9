"""The one table of actions: every front end (keys, palette, help, script, MCP) reads it.

Each ``Action`` row says, once: its name (the MCP tool's), a one-line description for people
and agents, its typed arguments (``Arg``: a JSON schema and a pydantic model come from them),
whether it reads, acts or destroys, the capability it needs (so the providers it applies to),
its key bindings (screen, key, label), its palette entry, its script verb. A front end offers
exactly the rows that name it, and refuses an action through one check, ``refusal_for``:
the TUI's ``check_action``, the palette, the script parser and the MCP server agree because
they call the same function (``tests/services/test_action_table.py`` walks every row).

Script directives (``set``, ``finally``) are syntax of the script language, not actions:
they stay in ``console.script.language``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from console.services.capabilities import Capability, refusal
from console.services.jobs.spec import SWEEP_BACKENDS, SWEEP_METHODS
from console.services.jobs.workload import CONVERT_DIRECTIONS, TEMPLATES, TPU_TYPES
from console.services.model import JobStatus

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


class Front(StrEnum):
    """Who offers an action."""

    KEYS = "keys"  # a key on a TUI screen (footer and help follow)
    PALETTE = "palette"  # the TUI's command palette (ctrl+p)
    SCRIPT = "script"  # a verb of `phantom --script`
    MCP = "mcp"  # a tool of `phantom mcp`


class Effect(StrEnum):
    """What an action does to the cluster: an agent may read unless allowed more."""

    READS = "reads"
    ACTS = "acts"
    DESTROYS = "destroys"  # stops or deletes what runs: its own allow on MCP


class Provider(StrEnum):
    TPU_VM = "tpu_vm"  # cluster.provider = local or gcp
    GKE = "gke"


# Which providers have each capability (the backends' declarations, by kind).
PROVIDERS: dict[Capability, frozenset[Provider]] = {
    Capability.HOSTS: frozenset({Provider.TPU_VM}),
    Capability.VMS: frozenset({Provider.TPU_VM}),
    Capability.RAY: frozenset({Provider.TPU_VM}),
    Capability.TUNNEL: frozenset({Provider.TPU_VM}),
    Capability.RAY_JOBS: frozenset({Provider.TPU_VM}),
    Capability.WORKLOADS: frozenset({Provider.GKE}),
    Capability.RECOVER: frozenset({Provider.TPU_VM, Provider.GKE}),
    Capability.POD_EMULATOR: frozenset({Provider.TPU_VM}),
    Capability.GKE_EMULATOR: frozenset({Provider.GKE}),
}

# An Arg's kind -> its JSON schema (before bounds, choices and help).
_SCHEMA: dict[str, dict[str, Any]] = {
    "int": {"type": "integer"},
    "seconds": {"type": "number", "minimum": 0},
    "str": {"type": "string"},
    "choice": {"type": "string"},
    "onoff": {"type": "boolean"},
    "bool": {"type": "boolean"},
    "host": {"type": "string"},
    "host_or_all": {"type": "string"},
    "job": {"type": "string"},
    "kind": {"type": "string"},
    "runtime_env": {"type": "object"},
    "env": {"type": "string", "pattern": "^[A-Za-z_][A-Za-z0-9_]*=.*$"},
    "name": {"type": "string", "pattern": "^[a-z][-a-z0-9]*$"},
    "path": {"type": "string"},
}


@dataclass(frozen=True)
class Arg:
    """A positional argument or a ``--flag`` of an action.

    ``kind`` picks the converter: int, seconds, str, choice, onoff, host, host_or_all,
    job, runtime_env, kind, env, name, path, bool (a flag without value).
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

    @property
    def required(self) -> bool:
        return not (self.is_flag or self.optional or self.variadic)

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

    def json_schema(self) -> dict[str, Any]:
        one = dict(_SCHEMA[self.kind])
        if self.choices:
            one["enum"] = list(self.choices)
        if self.min is not None:
            one["minimum"] = self.min
        if self.max is not None:
            one["maximum"] = self.max
        if self.help:
            one["description"] = self.help
        if self.variadic or self.repeat:
            return {
                "type": "array",
                "items": one,
                **({"description": self.help} if self.help else {}),
            }
        return one


@dataclass(frozen=True)
class Key:
    """A key binding of an action on one screen (``app`` for the app's own)."""

    screen: str
    key: str
    label: str
    tooltip: str
    id: str  # the Binding id
    action: str  # what the binding runs: "app.recover", or the screen's own "delete"
    show: bool = True


@dataclass(frozen=True)
class Action:
    """One row of the table."""

    name: str  # the canonical name: the MCP tool's
    description: str  # one line for people and agents (the script's --script-help line)
    effect: Effect
    needs: Capability | None = None  # None: every cluster
    fronts: frozenset[Front] = frozenset()
    tui: str | None = None  # the app's intent id (check_action, the palette)
    label: str = ""  # the palette's title
    hint: str = ""  # the palette's help line (default: the description)
    per_host: bool = False  # the palette offers it once per host
    confirm: bool = False  # asks first (it stops or kills something)
    keys: tuple[Key, ...] = ()
    script: str | None = None  # the script verb
    positionals: tuple[Arg, ...] = ()
    flags: tuple[Arg, ...] = ()
    sets_job: bool = False  # a script's `last` refers to what it made

    @property
    def acts(self) -> bool:
        return self.effect is not Effect.READS

    @property
    def providers(self) -> frozenset[Provider]:
        return PROVIDERS[self.needs] if self.needs else frozenset(Provider)

    @property
    def args(self) -> tuple[Arg, ...]:
        return self.positionals + self.flags

    def offered_on(self, front: Front) -> bool:
        return front in self.fronts

    def input_schema(self, *, skip: Iterable[str] = ()) -> dict[str, Any]:
        """The arguments as a JSON schema object (an MCP tool's ``inputSchema``)."""
        left_out = set(skip)
        props = {a.dest: a.json_schema() for a in self.args if a.dest not in left_out}
        required = [a.dest for a in self.args if a.required and a.dest not in left_out]
        schema: dict[str, Any] = {
            "type": "object",
            "properties": props,
            "additionalProperties": False,
        }
        if required:
            schema["required"] = required
        return schema


def refusal_for(action: Action, capabilities: Iterable[Capability]) -> str | None:
    """Why a cluster with ``capabilities`` cannot run ``action`` (None: it can). The one
    check every front end makes."""
    if action.needs is None or action.needs in set(capabilities):
        return None
    return refusal(action.script or action.name, action.needs)


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
    Arg(
        "--tpu-type",
        "choice",
        choices=tuple(TPU_TYPES),
        metavar="TPU_TYPE",  # v4-N, v5p-N, v5litepod-N, v6e-N: too many to list in usage
        help="default gke.tpu_type",
    ),
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

K, P, S, M = Front.KEYS, Front.PALETTE, Front.SCRIPT, Front.MCP
READS, ACTS, DESTROYS = Effect.READS, Effect.ACTS, Effect.DESTROYS


def _on(*fronts: Front) -> frozenset[Front]:
    return frozenset(fronts)


# The script's verbs in its reference's order; the TUI-only and MCP-only rows after them.
ACTIONS: tuple[Action, ...] = (
    Action(
        "pod_up",
        "start the local pod emulator and wait until READY (local only)",
        ACTS,
        Capability.POD_EMULATOR,
        _on(S),
        script="pod up",
        flags=(
            Arg("--hosts", "int", "N", "number of hosts", min=1, max=MAX_EMULATED_HOSTS),
            Arg("--ready-delay", "seconds", "S", "seconds a (re)created host stays CREATING"),
            Arg("--ssh-port", "int", "PORT", "SSH port on every host (0: any free)", min=0,
                max=65535),
        ),
    ),
    Action(
        "pod_down",
        "stop the emulator and every process of its hosts (local only)",
        DESTROYS,
        Capability.POD_EMULATOR,
        _on(S),
        script="pod down",
    ),
    Action(
        "gke_up",
        "start the local GKE emulator (provider gke, no kubeconfig)",
        ACTS,
        Capability.GKE_EMULATOR,
        _on(S),
        script="gke up",
        flags=(
            Arg("--slices", "int", "N", "v5p-64 slices (default gke.slices)", min=1, max=16),
            Arg("--quota-stall", "bool", help="preempted slices never come back"),
        ),
    ),
    Action(
        "gke_down",
        "stop the GKE emulator and every container it runs",
        DESTROYS,
        Capability.GKE_EMULATOR,
        _on(S),
        script="gke down",
    ),
    Action(
        "workload_create",
        "create a GKE workload (xpk's JobSet, or the conversion Job); sets `last`",
        ACTS,
        Capability.WORKLOADS,
        _on(S, M),
        script="workload create",
        positionals=(Arg("name", "name", "NAME"),),
        flags=_WORKLOAD_FLAGS,
        sets_job=True,
    ),
    Action(
        "workload_delete",
        "delete a workload and its Secret (`xpk workload delete`)",
        DESTROYS,
        Capability.WORKLOADS,
        _on(K, S, M),
        tui="delete_workload",
        label="Delete workload",
        hint="Delete the selected workload and its Secret (asks to confirm)",
        confirm=True,
        keys=(
            Key("workloads", "x", "Delete",
                "Delete the highlighted workload and its pods (asks to confirm)",
                "workloads.delete", "delete"),
        ),
        script="workload delete",
        positionals=(Arg("name", "name", "NAME"),),
    ),
    Action(
        "wait_workload",
        "wait until the workload reaches STATE (COMPLETED = SUCCEEDED; fails early if "
        "it ends otherwise and nothing resubmits it)",
        READS,
        Capability.WORKLOADS,
        _on(S),
        script="wait-workload",
        positionals=(
            Arg("job", "job", "NAME|last"),
            Arg("status", "choice", choices=WORKLOAD_STATES),
        ),
        flags=(_timeout("3600"),),
    ),
    Action(
        "preempt_slice",
        "preempt a TPU slice as GKE reclaims spot capacity (GKE emulator only)",
        ACTS,
        Capability.GKE_EMULATOR,
        _on(K, S, M),
        tui="preempt_slice",
        label="Preempt slice (emulator)",
        hint="Reclaim the selected workload's TPU slice as GKE does (asks to confirm)",
        confirm=True,
        keys=(
            Key("workloads", "p", "Preempt",
                "GKE emulator: reclaim the highlighted pod's TPU slice (asks to confirm)",
                "workloads.preempt_slice", "preempt_slice"),
        ),
        script="preempt-slice",
        positionals=(Arg("slice", "str", "SLICE", "index or node pool name"),),
        flags=(Arg("--grace", "seconds", "S", "pods' grace before SIGKILL (default 30)"),),
    ),
    Action(
        "wait_ready",
        "wait until the TPU node and every host are READY",
        READS,
        None,
        _on(S),
        script="wait-ready",
        flags=(_timeout("recovery.ready_timeout_s"),),
    ),
    Action(
        "bootstrap",
        "run the bootstrap command on the hosts (default: all)",
        ACTS,
        Capability.HOSTS,
        _on(K, P, S, M),
        tui="bootstrap",
        label="Re-bootstrap host",
        hint="Run the bootstrap command again on this host only",
        per_host=True,
        keys=(
            Key("host", "b", "Re-bootstrap", "Run the bootstrap command on this host again",
                "host.bootstrap", "bootstrap"),
        ),
        script="bootstrap",
        positionals=(Arg("hosts", "host", "HOST", variadic=True),),
    ),
    Action(
        "ray_up",
        "start the Ray head and join every worker (restarts if up)",
        ACTS,
        Capability.RAY,
        _on(P, S, M),
        tui="ray_up",
        label="Restart Ray",
        hint="Start the head and join every worker; restarts Ray (asks to confirm)",
        confirm=True,
        script="ray-up",
    ),
    Action(
        "tunnel",
        "open the SSH tunnel to the dashboard and Ray client ports",
        ACTS,
        Capability.TUNNEL,
        _on(P, S, M),
        tui="open_tunnel",
        label="Re-open tunnel",
        hint="Re-open the SSH tunnel to the Ray dashboard",
        script="tunnel",
    ),
    Action(
        "submit",
        "submit a job (submit_ray_job.sh's RAY_MODE); sets `last`",
        ACTS,
        Capability.RAY_JOBS,
        _on(S, M),
        script="submit",
        positionals=(Arg("mode", "choice", choices=("single", "distributed", "sweep")),),
        flags=(
            Arg("--train-args", "str", '"..."', "arguments of engine.train"),
            Arg("--runtime-env", "runtime_env", "FILE|JSON", "Ray runtime env (default: config)"),
            Arg("--num-nodes", "int", "N", min=1),
            Arg("--tpu-per-task", "int", "N", min=0),
            Arg("--agents-per-node", "int", "N", min=1),
            Arg("--base-seed", "int", "N", min=0),
            Arg("--sweep-kind", "str", "K"),
            Arg("--sweep-method", "choice", choices=SWEEP_METHODS),
            Arg("--sweep-backend", "choice", choices=SWEEP_BACKENDS),
            Arg("--run-cap", "int", "N", min=1),
            Arg("--sweep-id", "str", "ID", "resume this sweep"),
            Arg("--sweep-args", "str", '"..."',
                "more engine.sweep flags, e.g. '--trial-timesteps 3000 --max-failures 10'"),
            Arg("--submission-id", "str", "ID"),
        ),
        sets_job=True,
    ),
    Action(
        "wait_job",
        "wait until the job reaches STATUS (fails early if it ends otherwise; RUNNING "
        "means started, so an already SUCCEEDED job counts)",
        READS,
        None,
        _on(S),
        script="wait-job",
        positionals=(_JOB, Arg("status", "choice", choices=JOB_STATUSES)),
        flags=(_timeout("3600"),),
    ),
    Action(
        "logs",
        "the job's log (last N lines in the step result); on GKE a workload's "
        "(its coordinator pod) or a pod's",
        READS,
        None,
        _on(S, M),
        script="logs",
        positionals=(_LOGS_REF,),
        flags=(Arg("--tail", "int", "N", "lines to keep (default 100)", min=1),),
    ),
    Action(
        "stop_job",
        "stop a job",
        DESTROYS,
        None,
        _on(K, S, M),
        tui="stop_job",
        confirm=True,
        keys=(
            Key("jobs", "x", "Stop job", "Stop the highlighted job (asks to confirm)",
                "jobs.stop", "stop_job"),
        ),
        script="stop-job",
        positionals=(_JOB,),
    ),
    Action(
        "preempt",
        "preempt a host or all of them (local only)",
        ACTS,
        Capability.POD_EMULATOR,
        _on(K, P, S, M),
        tui="preempt",
        label="Preempt host (emulator)",
        hint="Kill the emulated host like a spot reclaim (asks to confirm)",
        per_host=True,
        confirm=True,
        keys=(
            Key("host", "p", "Preempt", "Emulator only: preempt this host now (asks to confirm)",
                "host.preempt", "preempt"),
        ),
        script="preempt",
        positionals=(Arg("host", "host_or_all", "HOST|all"),),
    ),
    Action(
        "recreate",
        "recreate a host: bare sandbox, new host key (local only)",
        ACTS,
        Capability.POD_EMULATOR,
        _on(K, P, S, M),
        tui="recreate",
        label="Recreate host (emulator)",
        hint="Bring the emulated host back, bare (asks to confirm)",
        per_host=True,
        confirm=True,
        keys=(
            Key("host", "c", "Recreate", "Emulator only: recreate this host (asks to confirm)",
                "host.recreate", "recreate"),
        ),
        script="recreate",
        positionals=(Arg("host", "host", "HOST"),),
    ),
    Action(
        "recover",
        "run the recovery loop now (or join the running one) and wait",
        ACTS,
        Capability.RECOVER,
        _on(K, P, S, M),
        tui="recover",
        label="Recover now",
        hint="Run the whole recovery loop (asks to confirm)",
        confirm=True,
        keys=(
            Key("overview", "r", "Recover", "Run the whole recovery loop now (asks to confirm)",
                "overview.recover", "app.recover"),
            Key("recovery", "r", "Recover now",
                "Run detect → recreate → bootstrap → Ray → tunnel → relaunch now (confirms)",
                "recovery.run", "app.recover"),
        ),
        script="recover",
        flags=(_timeout("1800"),),
    ),
    Action(
        "relaunch_sweep",
        "relaunch the sweep agents with the same sweep id; sets `last`",
        ACTS,
        Capability.RAY_JOBS,
        _on(P, S, M),
        tui="relaunch_sweep",
        label="Relaunch sweep",
        hint="Relaunch sweep agents with the same sweep id",
        script="relaunch-sweep",
        sets_job=True,
    ),
    Action(
        "auto_recovery",
        "switch the watchdog's automatic recovery on or off",
        ACTS,
        Capability.RECOVER,
        _on(K, P, S, M),
        tui="toggle_auto",
        label="Toggle auto-recovery",
        hint="Watchdog recovers on its own / only on r",
        keys=(
            Key("recovery", "a", "Toggle auto",
                "Let the watchdog recover on its own, or only when you press r",
                "recovery.auto", "app.toggle_auto"),
        ),
        script="auto-recovery",
        positionals=(Arg("enabled", "onoff", "on|off"),),
    ),
    Action(
        "wait_event",
        "wait for an event of KIND (e.g. preempted, recovered, stalled) seen since the "
        "script started and not matched by an earlier wait-event",
        READS,
        None,
        _on(S),
        script="wait-event",
        positionals=(Arg("kind", "kind", "KIND"),),
        flags=(Arg("--host", "host", "HOST"), _timeout("600")),
    ),
    Action(
        "status",
        "snapshot of pod, Ray, jobs and cadence (as `phantom status --json`)",
        READS,
        None,
        _on(S, M),
        script="status",
    ),
    Action(
        "ledger",
        "goodput, badput by cause, chip-hours, spot against on-demand and the checkpoint "
        "advice, from the journal (as `status --json`'s ledger); --since: the last S only",
        READS,
        None,
        _on(P, S, M),
        tui="show_ledger",
        label="Ledger: goodput and cost",
        hint="Where the pod's time and money went: goodput, badput by cause, spot vs on-demand",
        script="ledger",
        flags=(Arg("--since", "seconds", "S", f"look back S {_TIMEOUT_HELP}; default: all"),),
    ),
    Action(
        "teardown",
        "`ray stop -f` everywhere and close the tunnel (VMs stay)",
        DESTROYS,
        Capability.RAY,
        _on(P, S, M),
        tui="teardown",
        label="Teardown: ray stop everywhere, close tunnel",
        hint="Stops Ray on every host and closes the tunnel; VMs stay (asks to confirm)",
        confirm=True,
        script="teardown",
    ),
    Action(
        "sleep",
        "wait S seconds",
        READS,
        None,
        _on(S),
        script="sleep",
        positionals=(Arg("seconds", "seconds", "S"),),
    ),
    # -- the TUI's own -------------------------------------------------------------------------
    Action(
        "workload_logs",
        "Follow the selected workload's or pod's log",
        READS,
        Capability.WORKLOADS,
        _on(K),
        tui="workload_logs",
        label="Workload logs",
        keys=(
            Key("workloads", "l", "Logs",
                "Follow the highlighted pod's log, or a workload's (its coordinator's)",
                "workloads.logs", "logs"),
        ),
    ),
    Action(
        "refresh",
        "Poll every layer of the cluster now",
        READS,
        None,
        _on(K, P),
        tui="refresh_pod",
        label="Refresh now",
        keys=(
            Key("overview", "ctrl+r", "Refresh", "Poll TPU API, SSH and Ray now",
                "overview.refresh", "app.refresh_pod", show=False),
            Key("workloads", "ctrl+r", "Refresh", "Poll the cluster now",
                "workloads.refresh", "app.refresh_pod", show=False),
        ),
    ),
    Action(
        "submit_form",
        "Open the form for new work on this cluster",
        READS,  # the form changes nothing; what it sends is `submit` / `workload_create`
        None,
        _on(K, P),
        tui="submit_form",
        label="Submit",
        keys=(
            Key("app", "s", "Submit",
                "Open the job submission form (single, distributed or sweep); on GKE, "
                "the new-workload form (a JobSet)", "app.submit", "submit_form"),
        ),
    ),
    Action(
        "bring_up",
        "Bootstrap every host, start the Ray head, join the workers, open the tunnel",
        ACTS,
        Capability.VMS,
        _on(K, P),
        tui="bring_up",
        label="Bring up",
        keys=(
            Key("overview", "u", "Bring up",
                "Bootstrap every host, start the Ray head, join the workers, open the tunnel",
                "overview.bring_up", "app.bring_up"),
        ),
    ),
    Action(
        "open_dashboard",
        "Open the Ray dashboard in a browser (also shown as a notification)",
        READS,
        Capability.TUNNEL,
        _on(P),
        tui="open_dashboard",
        label="Open dashboard URL",
    ),
    # -- the agents' reads ---------------------------------------------------------------------
    Action(
        "events",
        "the journal's newest events (kind, host, actor, message, incident id), newest last",
        READS,
        None,
        _on(M),
        flags=(
            Arg("--limit", "int", "N", "how many (default 50)", min=1, max=2000),
            Arg("--kind", "kind", "KIND", "only this kind (preempted, recovered, stalled, ...)"),
        ),
    ),
    Action(
        "search_logs",
        "the lines of a job's (on GKE a workload's or pod's) log that contain TEXT",
        READS,
        None,
        _on(M),
        positionals=(
            Arg("job", "job", "ID|POD|WORKLOAD", "a Ray submission id; on GKE a workload or a pod"),
            Arg("text", "str", "TEXT", "what the lines contain (plain text, case-sensitive)"),
        ),
        flags=(Arg("--tail", "int", "N", "matching lines to keep, newest (default 100)", min=1),),
    ),
    Action(
        "incidents",
        "each preemption and what it caused, one row per incident, with its outcome",
        READS,
        None,
        _on(M),
        flags=(Arg("--limit", "int", "N", "how many (default 20)", min=1, max=500),),
    ),
)  # fmt: skip

BY_NAME: dict[str, Action] = {a.name: a for a in ACTIONS}
BY_TUI: dict[str, Action] = {a.tui: a for a in ACTIONS if a.tui}
BY_SCRIPT: dict[str, Action] = {a.script: a for a in ACTIONS if a.script}


def on(front: Front) -> list[Action]:
    """The rows a front end offers, in table order."""
    return [a for a in ACTIONS if front in a.fronts]


def keys_of(screen: str) -> Mapping[str, Key]:
    """The table's keys on ``screen``, by binding id."""
    return {k.id: k for a in ACTIONS for k in a.keys if k.screen == screen}


def can(tui_id: str, capabilities: Iterable[Capability]) -> bool:
    """Whether a cluster with ``capabilities`` offers the TUI intent ``tui_id`` (ids not in
    the table, quit, help, switching screens, are not the cluster's to refuse)."""
    action = BY_TUI.get(tui_id)
    return action is None or refusal_for(action, capabilities) is None


def offered(front: Front, capabilities: Iterable[Capability]) -> list[Action]:
    """The rows ``front`` offers on a cluster with ``capabilities``, in table order."""
    have = set(capabilities)
    return [a for a in on(front) if refusal_for(a, have) is None]


def intent_of(screen: str) -> dict[str, str]:
    """``screen``'s own binding actions -> the TUI intent each one is (its capability)."""
    return {k.action: a.tui for a in ACTIONS for k in a.keys if k.screen == screen and a.tui}
