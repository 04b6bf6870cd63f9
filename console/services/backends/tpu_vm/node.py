"""The TPU node as the Cloud TPU v2 API reports it: its state, each host's state and symptoms,
endpoints and guest-attribute host keys, read from the API's protobuf (no client here)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from google.cloud import tpu_v2

from console.services.backends.tpu_vm.endpoints import HostEndpoint
from console.services.model import HostState


@dataclass(frozen=True)
class Symptom:
    worker_id: str
    type: str
    details: str = ""
    at: float | None = None  # epoch seconds the API says it started (e.g. preemption time)


@dataclass(frozen=True)
class NodeInfo:
    """One poll of the node. ``host_states[i]`` is worker i's state (see ``host_states_of``)."""

    name: str
    state: str
    health: str = ""
    health_description: str = ""
    accelerator_type: str = ""
    endpoints: tuple[HostEndpoint, ...] = ()
    symptoms: tuple[Symptom, ...] = ()
    host_states: Mapping[int, str] = field(default_factory=dict)
    full_name: str = ""
    preemptible: bool = False

    @property
    def ready(self) -> bool:
        """The node and every host are READY (what ``wait_ready`` waits for)."""
        return (
            self.state == HostState.READY
            and bool(self.endpoints)
            and all(self.host_states.get(ep.index) == HostState.READY for ep in self.endpoints)
        )

    @property
    def zone(self) -> str:
        """The zone the API names in the node's full name ("" when it gave none)."""
        parts = self.full_name.split("/")
        return parts[3] if len(parts) > 3 and parts[2] == "locations" else ""

    def symptom_time(self, index: int) -> float | None:
        """When the API says worker ``index``'s newest symptom began (preemption time)."""
        times = [s.at for s in self.symptoms if s.worker_id == str(index) and s.at is not None]
        return max(times) if times else None

    def hosts_in(self, *states: str) -> list[int]:
        return sorted(i for i, s in self.host_states.items() if s in states)

    def summary(self) -> str:
        hosts = " ".join(
            f"{ep.name}={self.host_states.get(ep.index, '?')}" for ep in self.endpoints
        )
        return (
            f"{self.name} {self.state}"
            + (f" {self.health}" if self.health else "")
            + (f" [{hosts}]" if hosts else "")
        )


_STATE_NAMES = {s.value for s in HostState}


def _state_name(value: Any) -> str:
    name = getattr(value, "name", None) or str(value)
    return name


_SYMPTOM_WORDS = {
    "preempt": HostState.PREEMPTED,
    "terminat": HostState.PREEMPTED,
    "creat": HostState.CREATING,
    "recreat": HostState.CREATING,
    "repair": HostState.REPAIRING,
    "delet": HostState.DELETING,
}


def _symptom_state(details: str) -> str:
    words = re.findall(r"[a-z]+", details.lower())
    for word in words:
        for stem, state in _SYMPTOM_WORDS.items():
            if word.startswith(stem):
                return str(state)
    return ""


def host_states_of(
    state: str,
    endpoints: Sequence[HostEndpoint],
    symptoms: Sequence[Symptom],
    n_hosts: int,
    health_description: str = "",
) -> dict[int, str]:
    """Per-worker states from what the API offers (it has no per-worker state field).

    - a symptom with a worker id whose details say what happened ("worker 2 ... was
      preempted") puts that worker in that state (how a single preempted host shows);
    - node READY: the other workers are READY (UNKNOWN when they have no endpoint);
    - node not READY: workers named in ``health_description`` ("hosts not ready: w2")
      share the node's state, the rest are READY; when nothing names a worker (a real
      multi-host node is preempted or created as a whole) every worker shares it.
    """
    indices = sorted({ep.index for ep in endpoints} | set(range(n_hosts)))
    have_ep = {ep.index for ep in endpoints}
    node_state = state if state in _STATE_NAMES else str(HostState.UNKNOWN)
    per: dict[int, str] = {}
    for s in symptoms:
        wid = s.worker_id.strip()
        if wid.isdigit() and int(wid) in indices:
            found = _symptom_state(s.details)
            if found:
                per[int(wid)] = found
    named = set()
    if health_description:
        for ep in endpoints:
            if re.search(rf"(?<![\w-]){re.escape(ep.name)}(?![\w-])", health_description):
                named.add(ep.index)
    out: dict[int, str] = {}
    for i in indices:
        if i in per:
            out[i] = per[i]
        elif state == HostState.READY or (state != HostState.READY and (per or named)):
            if i in named and state != HostState.READY:
                out[i] = node_state
            else:
                out[i] = str(HostState.READY if i in have_ep else HostState.UNKNOWN)
        else:
            out[i] = node_state
    return out


def _epoch(ts: Any) -> float | None:
    if ts is None:
        return None
    try:
        value = float(ts.timestamp())
    except (AttributeError, ValueError, OverflowError):
        return None
    return value if value > 0 else None


def node_info_from_proto(
    node: tpu_v2.Node, *, ssh_port: int = 22, external: bool = False
) -> NodeInfo:
    """``external``: SSH goes to each worker's ``accessConfig.externalIp`` (its internal IP
    when it has none); Ray and host keys keep the internal IP either way."""
    short = node.name.rsplit("/", 1)[-1]
    # The raw protobuf, not proto-plus: its wrapper costs ~20 us a field, 17 ms a poll of
    # a 1,024-host node; the raw message reads the same fields in under 1 ms.
    raw_endpoints = type(node).pb(node).network_endpoints
    endpoints = tuple(
        HostEndpoint(
            name=f"{short}-w{i}",
            ip=ep.ip_address,
            port=ssh_port,
            index=i,
            ssh_ip=(ep.access_config.external_ip if external else "") or "",
        )
        for i, ep in enumerate(raw_endpoints)
        if ep.ip_address
    )
    symptoms = tuple(
        Symptom(
            worker_id=s.worker_id,
            type=_state_name(s.symptom_type),
            details=s.details,
            at=_epoch(s.create_time),
        )
        for s in node.symptoms
    )
    state = _state_name(node.state)
    health = _state_name(node.health)
    if health == "HEALTH_UNSPECIFIED":
        health = ""
    return NodeInfo(
        name=short,
        full_name=node.name,
        state=state,
        health=health,
        health_description=node.health_description,
        accelerator_type=node.accelerator_type,
        endpoints=endpoints,
        symptoms=symptoms,
        host_states=host_states_of(
            state, endpoints, symptoms, len(raw_endpoints), node.health_description
        ),
        preemptible=bool(node.scheduling_config.preemptible or node.scheduling_config.spot),
    )


def parse_guest_hostkeys(attrs: Sequence[tpu_v2.GuestAttributes]) -> list[str]:
    """One guest-attributes entry per worker -> that worker's OpenSSH key lines.

    Entries use namespace ``hostkeys``, key = key type, value = base64 blob (what the
    guest agent publishes and gcloud reads); a value that is already a full
    ``type base64`` line is accepted too.
    """
    out: list[str] = []
    for ga in attrs:
        lines = []
        for item in ga.query_value.items:
            if item.namespace and item.namespace != "hostkeys":
                continue
            value = item.value.strip()
            if not value:
                continue
            line = value if " " in value else f"{item.key} {value}"
            if line not in lines:
                lines.append(line)
        out.append("\n".join(lines))
    return out
