"""Phantom configuration: one TOML file, validated in full before anything runs.

Discovery: ``--config PATH`` wins; otherwise ``$XDG_CONFIG_HOME/phantom/config.toml``
(``~/.config/phantom/config.toml``). No file at all means the built-in local pod emulator
with 4 hosts. Every problem in a file is reported (key, bad value, what is allowed), not
just the first one, so a user fixes the file in one pass; the CLI exits 2 on any of them.

Secrets are never stored here: ``wandb.api_key_env`` names the environment variable that
holds the key, and the key itself is read from the environment only when a job needs it.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from console.config.alerts import AlertsConfig, parse_alerts
from console.config.prices import PricesConfig
from console.config.runtime_env import parse_runtime_env

if TYPE_CHECKING:
    from console.config.fleet import Fleet

PROVIDERS = ("local", "gcp", "gke")
MAX_CONFIG_BYTES = 1 << 20
KNOWN_HOSTS_POLICIES = ("tpu-api", "file", "accept-new")
WANDB_MODES = ("online", "offline", "disabled")


class ConfigError(Exception):
    """All problems found in one config source; ``problems`` has one line each."""

    def __init__(self, source: str, problems: list[str]) -> None:
        self.source = source
        self.problems = problems
        super().__init__(f"{source}: " + "; ".join(problems))

    def render(self) -> str:
        lines = [f"phantom: invalid config {self.source}:"]
        lines += [f"  - {p}" for p in self.problems]
        return "\n".join(lines)


@dataclass(frozen=True)
class ClusterConfig:
    """[cluster]: which pod the console drives."""

    provider: Literal["local", "gcp", "gke"] = "local"
    """"local" (an emulated spot pod on loopback), "gcp" (a real TPU VM pod) or "gke" (XPK /
    Pathways JobSets on a GKE cluster, see [gke])."""
    project: str = "phantom-local"
    """gcp: your project id."""
    zone: str = "local-a"
    """gcp: the pod's zone, e.g. "us-central2-b"."""
    node_name: str = "phantom-pod"
    """The TPU VM (pod slice) name."""
    accelerator_type: str = "v4-32"
    """The slice's accelerator type (used when the node is recreated)."""
    hosts: int = 4
    """local: the number of emulated hosts (127.0.0.10, .11, ...)."""
    api_endpoint: str = ""
    """gcp: TPU API endpoint override (empty: Google's). local: read from the emulator."""
    run_dir: str = ""
    """local: the emulator's state dir (empty: $XDG_STATE_HOME/phantom/pod)."""


@dataclass(frozen=True)
class SshConfig:
    """[ssh]: how the console reaches every worker."""

    user: str = ""
    """Login user (empty: the emulator's "phantom"; on gcp your $USER)."""
    key: str = ""
    """Private key (empty: the emulator's key; on gcp ~/.ssh/google_compute_engine)."""
    known_hosts_policy: Literal["tpu-api", "file", "accept-new"] = "tpu-api"
    """"tpu-api" (trust the host keys the TPU API publishes in guest attributes), "file"
    (only known_hosts) or "accept-new" (trust on first use)."""
    known_hosts: str = ""
    """The console's own known_hosts (empty: <state dir>/known_hosts; never ~/.ssh's)."""
    port: int = 22
    """SSH port of every worker."""
    connect_timeout_s: float = 10.0
    """Seconds to wait for a connection."""
    command_timeout_s: float = 600.0
    """Seconds a fanned-out command may run."""
    parallelism: int = 256
    """Concurrent SSH sessions in a fan-out (a bootstrap of a 256-host pod in one wave)."""
    retries: int = 3
    """Transient errors are retried with backoff this many times."""
    internal_ip: bool = False
    """gcp: connect to each worker's internal IP (the console runs inside the VPC). Default:
    its external IP (accessConfig.externalIp), as `gcloud compute tpus tpu-vm ssh` does."""
    proxy_command: str = ""
    """gcp: reach the workers through this command (IAP or a bastion), as OpenSSH's
    ProxyCommand: %h is the worker's internal IP, %p the port, %r the user, %n the worker's
    name, %% a percent sign; e.g. "ssh -W %h:%p bastion". Implies the internal IP."""


@dataclass(frozen=True)
class RayConfig:
    """[ray]: the Ray cluster the console forms on the pod."""

    gcs_port: int = 6379
    """The head's GCS port."""
    dashboard_port: int = 8265
    """Bound to 127.0.0.1 on the head, reached through the SSH tunnel."""
    client_port: int = 10001
    """Ray client server port on the head (ray://)."""
    local_dashboard_port: int = 0
    """Local end of the tunnel to the dashboard; 0 = auto (gcp: 8265, local: 18265)."""
    local_client_port: int = 0
    """Local end of the tunnel to the client port; 0 = auto (gcp: 10001, local: 20001)."""
    num_cpus: int = 0
    """Logical CPUs each host advertises to Ray; 0: the host's own count."""
    object_store_mb: int = 0
    """Object store size per host, in MiB (at least 75); 0: Ray's default for the host."""
    memory_mb: int = 0
    """Memory for tasks per host, in MiB; 0: the host's available memory."""
    resources: Mapping[str, float] = field(default_factory=lambda: {"TPU": 8.0})
    """Custom resources per host."""
    jax_platform: str = "cpu"
    """PHANTOM_JAX_PLATFORM of the jobs the console submits (their JAX_PLATFORMS): "cpu"
    keeps many SB3 agents per host off the TPU; "tpu" for JAX-heavy jobs; "" lets JAX pick."""


@dataclass(frozen=True)
class WandbConfig:
    """[wandb]: where runs log, and where the cadence screen reads them."""

    project: str = "phantom"
    """W&B project."""
    entity: str = ""
    """W&B entity (team or user; empty: your default)."""
    mode: Literal["online", "offline", "disabled"] = "offline"
    """"online", "offline" or "disabled"."""
    api_key_env: str = "WANDB_API_KEY"
    """The NAME of the environment variable holding your key, never the key itself."""
    dir: str = ""
    """Where offline runs live locally (cadence reads them); empty: the state dir on the
    emulator, ./wandb otherwise."""
    base_url: str = ""
    """Online: the W&B server (e.g. the emulator's http://127.0.0.1:PORT from `phantom
    wandb up`); empty: $WANDB_BASE_URL, else api.wandb.ai."""
    online_lag_s: float = 15.0
    """Online: how late history reaches the server (the SDK's file-stream interval, 15 s),
    added to the stall threshold."""


@dataclass(frozen=True)
class GkeConfig:
    """[gke]: the GKE cluster (cluster.provider = "gke") and the workloads submitted to it."""

    kubeconfig: str = ""
    """A kubeconfig, as `gcloud container clusters get-credentials` writes it. Empty: the
    local GKE emulator (started when none runs, like the pod emulator)."""
    context: str = ""
    """The kubeconfig context (empty: its current context)."""
    namespace: str = "default"
    """The namespace of the workloads (xpk uses "default")."""
    project: str = ""
    """Cloud Console links: the cluster's project (empty on the emulator: its own)."""
    location: str = ""
    """Cloud Console links: the cluster's region or zone, e.g. "us-central1"."""
    cluster: str = ""
    """Cloud Console links: the cluster's name."""
    run_dir: str = ""
    """Emulator only: its state dir (empty: $XDG_STATE_HOME/phantom/gke)."""
    image: str = "gcr.io/phantom-local/maxtext-rl:latest"
    """Workload default: the container image (xpk's form: gcr.io/$PROJECT_ID/$CLOUD_IMAGE_NAME)."""
    command: str = "bash run_gptoss_20b_rl.sh"
    """Workload default: the command every worker runs (the GRPO run script)."""
    tpu_type: str = "v5p-64"
    """Workload default: the TPU type of one slice (v5p-64: topology 2x4x4, 8 nodes); a GKE
    TPU node pool's: v4-N, v5p-N, v5litepod-N or v6e-N. The embedded emulator's node pools."""
    slices: int = 1
    """Workload default: the number of slices (and the emulator's slice count)."""
    max_restarts: int = 3
    """Workload default: restarts the JobSet makes on its own before it is Failed."""
    spot: bool = True
    """Workload default: run on spot capacity (nodes labelled cloud.google.com/gke-spot)."""
    base_output_directory: str = ""
    """Workload default: logs, checkpoints and TensorBoard events, gs://bucket/path or
    file:///path (empty: gs://phantom-bucket/maxtext-runs on the emulator; required on GKE)."""
    maxtext_ckpt_path: str = ""
    """Workload default: MAXTEXT_CKPT_PATH, the MaxText checkpoint to start from (checked to
    exist before submit; empty: none)."""
    hf_token_env: str = "HF_TOKEN"
    """The NAME of the environment variable holding your Hugging Face token, never the token:
    its value is sent to the cluster as a Secret at submit time (empty: no token)."""
    termination_grace_s: int = 30
    """Workload default: terminationGracePeriodSeconds (time to checkpoint on a preemption)."""
    pending_quota_s: float = 120.0
    """Pods Pending as unschedulable longer than this (seconds) are reported as a capacity or
    quota stall the console cannot fix."""
    metrics_lag_s: float = 30.0
    """How late TensorBoard events become visible (the writer's flush interval, seconds):
    added to the stall threshold so a batched writer is never called stalled."""


@dataclass(frozen=True)
class RecoveryConfig:
    """[recovery]: the watchdog."""

    auto: bool = True
    """The watchdog recovers on its own."""
    poll_interval_s: float = 5.0
    """Seconds between polls of the pod, the jobs and metric cadence."""
    stall_factor: float = 5.0
    """A run is stalled after k x its median metric interval."""
    cadence_deadline_s: float = 5.0
    """How long a one-shot snapshot (`phantom status`, the script's `status`) waits for the
    metric sources (run files, the W&B API); a source or run that has not answered by then is
    shown as stale, not waited for (`phantom status --cadence-deadline S` for one call)."""
    step_retries: int = 3
    """Each recovery step is retried this many times (with backoff) before it fails."""
    max_error_retries: int = 3
    """A job that failed with an error this many times in a row is no longer resubmitted by
    recovery (preemptions never count; a success starts the count again)."""
    ready_timeout_s: float = 600.0
    """Seconds a recreated VM may take to be READY."""
    watch_notices: bool = True
    """Hear each VM's preemption notice (a watcher on its metadata server, over SSH), so
    recovery starts while the VM still has its grace period."""
    notice_grace_s: float = 30.0
    """How long a noticed VM keeps running before it is stopped (GCE gives spot VMs about
    30 s); a recovery waits this long for it to stop before replacing it."""


@dataclass(frozen=True)
class CapacityConfig:
    """[capacity]: getting the slice back after a preemption (provider "gcp")."""

    zones: tuple[str, ...] = ()
    """Zones the pod may run in, in order of preference (empty: cluster.zone only); the
    pod starts in cluster.zone, which must be one of them."""
    acquire: Literal["node", "queued-resource"] = "node"
    """"node": delete the preempted node, then CreateNode; "queued-resource": the node
    belongs to a queued resource, which recovery resets (or re-creates in another zone)."""
    queued_resource: str = ""
    """acquire = "queued-resource": its id (empty: "<cluster.node_name>-qr")."""
    failover: Literal["eager-failover", "same-zone", "risk-aware"] = "eager-failover"
    """"eager-failover": try the other zones first, the preempted one last; "same-zone":
    zone_retries tries in the preempted zone before moving on; "risk-aware": as
    eager-failover, but calmest zone first by the journal's preemption rates (the upper
    bound of each zone's 95% interval), the order and its reason journaled."""
    zone_retries: int = 3
    """same-zone: tries in a zone before the next one."""
    backoff_s: float = 10.0
    """Wait before the next try after a stockout, doubling up to backoff_max_s."""
    backoff_max_s: float = 120.0
    """The longest wait between tries."""
    timeout_s: float = 3600.0
    """Give up (the recovery fails, naming every zone tried) after this long."""


@dataclass(frozen=True)
class Config:
    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    ssh: SshConfig = field(default_factory=SshConfig)
    ray: RayConfig = field(default_factory=RayConfig)
    wandb: WandbConfig = field(default_factory=WandbConfig)
    recovery: RecoveryConfig = field(default_factory=RecoveryConfig)
    capacity: CapacityConfig = field(default_factory=CapacityConfig)
    gke: GkeConfig = field(default_factory=GkeConfig)
    alerts: AlertsConfig = field(default_factory=AlertsConfig)
    prices: PricesConfig = field(default_factory=PricesConfig)
    bootstrap_command: str = ""
    """[bootstrap] command: run on every worker before Ray starts (installs, warm caches:
    "pre-heating"). Empty: check that python and ray import."""
    storage: str = ""
    """[storage] uri: checkpoints, as file:///path or gs://bucket/prefix (needs gcsfs).
    Empty: the emulator's bucket."""
    runtime_env: Mapping[str, Any] = field(default_factory=dict)
    """[runtime_env]: the Ray runtime env of submitted jobs. Secret values are never written
    here: "$NAME" is read from your environment at submit time."""
    keys: Mapping[str, str] = field(default_factory=dict)
    """[keys]: your keys for the console, over its own: a command (every key that runs it,
    e.g. recover = "R") or a key's id ("jobs.refresh" = "f5") = one key or several, comma
    separated. A command of the console's without a key gets one on every screen. A name
    that is neither, or a key that would do two things on one screen, is refused at start."""
    name: str = field(default="", compare=False)
    """The cluster's name in its fleet: a [[clusters]] entry's name, or for a [cluster]
    config its node's (GKE: its cluster's) name (``console.config.fleet``)."""
    state_dir: str = field(default="", compare=False)
    """Where this cluster's journal, leases, host keys and jobs live: empty for a [cluster]
    config ($XDG_STATE_HOME/phantom, as always); a [[clusters]] entry's own,
    $XDG_STATE_HOME/phantom/fleet/<name> (``console.config.fleet``)."""
    source: str = "<defaults>"

    def __post_init__(self) -> None:
        ray = self.ray
        offset = 10000 if self.cluster.provider == "local" else 0
        if ray.local_dashboard_port == 0 or ray.local_client_port == 0:
            resolved = replace(
                ray,
                local_dashboard_port=ray.local_dashboard_port or ray.dashboard_port + offset,
                local_client_port=ray.local_client_port or ray.client_port + offset,
            )
            object.__setattr__(self, "ray", resolved)

    @property
    def is_local(self) -> bool:
        return self.cluster.provider == "local"

    @property
    def is_gke(self) -> bool:
        return self.cluster.provider == "gke"

    @property
    def is_emulated(self) -> bool:
        """An emulator on this machine: the pod one, or GKE with no kubeconfig."""
        return self.is_local or (self.is_gke and not self.gke.kubeconfig)


_SECTIONS: dict[str, type] = {
    "cluster": ClusterConfig,
    "ssh": SshConfig,
    "ray": RayConfig,
    "wandb": WandbConfig,
    "recovery": RecoveryConfig,
    "capacity": CapacityConfig,
    "gke": GkeConfig,
    "prices": PricesConfig,
}
_TOP_LEVEL = {"bootstrap": "bootstrap_command", "storage": "storage", "runtime_env": "runtime_env"}


def default_config_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "phantom" / "config.toml"


def default_state_dir() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "phantom"


def cluster_state_dir(config: Config) -> Path:
    """Where ``config``'s cluster keeps its journal, leases and host keys: its own dir in a
    fleet, the state dir itself for a [cluster] config."""
    return Path(config.state_dir).expanduser() if config.state_dir else default_state_dir()


def load_config(
    path: str | os.PathLike[str] | None = None,
    *,
    discover: bool = True,
    cluster: str | None = None,
) -> Config:
    """Load and validate; the one cluster named ``cluster`` (None: the only one; a fleet of
    several raises ``fleet.ClusterChoiceError``, a ConfigError naming them).
    ``path=None`` with ``discover`` looks in the XDG location."""
    return load_fleet(path, discover=discover).select(cluster)


def load_fleet(path: str | os.PathLike[str] | None = None, *, discover: bool = True) -> Fleet:
    """Every cluster of the config (a ``fleet.Fleet``): ``[[clusters]]`` entries, or the one
    cluster of a ``[cluster]`` config (or of no config at all)."""
    from console.config.fleet import parse_fleet

    source = str(Path(path)) if path is not None else _discovered(discover)
    return parse_fleet(_read(path, discover), source=source)


def _discovered(discover: bool) -> str:
    candidate = default_config_path()
    return str(candidate) if discover and candidate.exists() else "<defaults>"


def _read(path: str | os.PathLike[str] | None, discover: bool) -> Mapping[str, Any]:
    """The TOML document at ``path`` (or the discovered one; none: empty)."""
    if path is None:
        if not discover:
            return {}
        candidate = default_config_path()
        if not candidate.exists():
            return {}
        path = candidate
    p = Path(path)
    if not p.exists():
        raise ConfigError(str(p), [f"file not found (create one with `phantom init {p}`)"])
    if p.is_dir():
        raise ConfigError(str(p), ["is a directory; --config takes the path of a TOML file"])
    try:
        size = p.stat().st_size
        if size > MAX_CONFIG_BYTES:
            raise ConfigError(
                str(p), [f"is {size:,} bytes; a config is a few KB of TOML (is this the file?)"]
            )
        text = p.read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(str(p), ["is not text (binary content); a config is TOML"]) from None
    except OSError as exc:
        raise ConfigError(str(p), [f"cannot be read ({exc.strerror or exc})"]) from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(str(p), [f"not valid TOML: {exc}"]) from None


def parse_config(data: Mapping[str, Any], *, source: str = "<memory>") -> Config:
    from console.config import checks  # it reads this module's sections: imported once built

    problems: list[str] = []
    sections: dict[str, Any] = {}
    for key, value in data.items():
        if key in _SECTIONS:
            if not isinstance(value, Mapping):
                problems.append(f"[{key}] must be a table, got {value!r}")
                continue
            sections[key] = _parse_section(key, _SECTIONS[key], value, problems)
        elif key == "bootstrap":
            if isinstance(value, Mapping):
                cmd = value.get("command", "")
                extra = set(value) - {"command"}
                if extra:
                    problems.append(f"bootstrap: unknown key(s) {sorted(extra)}; allowed: command")
            else:
                cmd = value
            if not isinstance(cmd, str):
                problems.append(f"bootstrap.command = {cmd!r}: must be a string shell command")
            else:
                sections["bootstrap_command"] = cmd
        elif key == "storage":
            uri = value.get("uri", "") if isinstance(value, Mapping) else value
            if not isinstance(uri, str):
                problems.append(f"storage.uri = {uri!r}: must be a string URI")
            elif uri and not re.match(r"^(file://|gs://|/|\./|~)", uri):
                problems.append(
                    f"storage.uri = {uri!r}: use file:///abs/path, gs://bucket/prefix or a path"
                )
            else:
                sections["storage"] = uri
        elif key == "alerts":
            if not isinstance(value, Mapping):
                problems.append(f"[alerts] must be a table, got {value!r}")
                continue
            sections["alerts"] = parse_alerts(value, problems, checks.check_value, checks.BAD)
        elif key == "runtime_env":
            env = parse_runtime_env(value, problems)
            if env is not None:
                sections["runtime_env"] = env
        elif key == "keys":
            sections["keys"] = parse_keys(value, problems)
        else:
            allowed = sorted([*_SECTIONS, *_TOP_LEVEL, "alerts", "keys"])
            problems.append(f"unknown section or key {key!r}; allowed: {', '.join(allowed)}")
    if not problems:
        checks.cross_check(sections, problems)
    if problems:
        raise ConfigError(source, problems)
    config = Config(**sections, source=source)
    problems = checks.tunnel_port_problems(config)
    if problems:
        raise ConfigError(source, problems)
    return config


def _parse_section(name: str, cls: type, table: Mapping[str, Any], problems: list[str]) -> Any:
    from console.config import checks

    defaults = cls()
    values: dict[str, Any] = {}
    known = {f.name: f for f in fields(cls)}
    for key, value in table.items():
        if key not in known:
            problems.append(f"{name}.{key}: unknown key; allowed: {', '.join(sorted(known))}")
            continue
        default = getattr(defaults, key)
        checked = checks.check_value(f"{name}.{key}", default, value, problems)
        if checked is not checks.BAD:
            values[key] = checked
    for key, value in values.items():
        checks.check_domain(f"{name}.{key}", value, problems)
    return replace(defaults, **values)


_KEYS_RE = re.compile(r"^[^\s,]+(\s*,\s*[^\s,]+)*$")


def parse_keys(table: Any, problems: list[str], prefix: str = "") -> dict[str, str]:
    """``[keys]``: name -> keys. A dotted name written bare (``jobs.refresh = "f5"``) is read
    back whole; which names exist is the console's to check (``screens.keys``)."""
    if not isinstance(table, Mapping):
        problems.append(f'[keys] must be a table of name = "key", got {table!r}')
        return {}
    out: dict[str, str] = {}
    for name, keys in table.items():
        full = f"{prefix}{name}"
        if isinstance(keys, Mapping):
            out.update(parse_keys(keys, problems, f"{full}."))
        elif not isinstance(keys, str) or not _KEYS_RE.match(keys.strip()):
            problems.append(
                f"keys.{full} = {keys!r}: give a key, or keys separated by commas "
                '("R", "ctrl+r,f5")'
            )
        else:
            out[full] = keys.strip()
    return out
