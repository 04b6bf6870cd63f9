"""A fleet of fake services: three clusters of one ``[[clusters]]`` config, each its own
``FakeServices`` (its own bus, data and calls), for the Fleet screen and switching cluster.

pod-a: a GCP TPU VM pod (v4-32, us-central2-b) mid-recovery, w2 preempted, the fixtures'
journal (one recovery so far); pod-b: the healthy local pod (v5litepod-16, zone local-b), no
journal rows; grpo: the GKE emulator's v5p-64 slice in us-east5, one preemption not recovered
yet (an open incident).
"""

from __future__ import annotations

from console.config.fleet import Fleet, parse_fleet
from console.services.model import Event, EventKind
from tests.support.fake_data import T0
from tests.support.fake_services import FakeServices

FLEET_DOC = {
    "clusters": [
        {
            "name": "pod-a",
            "cluster": {
                "provider": "gcp",
                "project": "lab",
                "zone": "us-central2-b",
                "accelerator_type": "v4-32",
                "node_name": "pod-a",
            },
        },
        {
            "name": "pod-b",
            "cluster": {
                "provider": "local",
                "zone": "local-b",
                "accelerator_type": "v5litepod-16",
                "node_name": "pod-b",
                "run_dir": "/nonexistent/phantom-test/pod-b",
            },
        },
        {
            "name": "grpo",
            "cluster": {"provider": "gke"},
            "gke": {
                "tpu_type": "v5p-64",
                "location": "us-east5",
                "run_dir": "/nonexistent/phantom-test/grpo",
            },
        },
    ]
}
SCENARIOS = {"pod-a": "preempted", "pod-b": "healthy", "grpo": "gke_preempted"}


def fleet_config() -> Fleet:
    return parse_fleet(FLEET_DOC, source="fleet.toml")


def gke_preemption(at: float = T0 - 90) -> Event:
    """A slice preempted 1m30s before ``T0``, its incident open (no recovery row yet)."""
    return Event(
        at=at,
        kind=EventKind.PREEMPTED,
        message="slice np-0 preempted",
        host="phantom-gke-np-0",
        data={"incident": "inc-grpo-1"},
        id=9001,
    )


def fake_fleet() -> dict[str, FakeServices]:
    """Each cluster of ``FLEET_DOC`` on its own fake, in the file's order."""
    out: dict[str, FakeServices] = {}
    for config in fleet_config().members:
        fake = FakeServices(SCENARIOS[config.name], config=config)
        out[config.name] = fake
    out["pod-b"].events_list = []
    out["grpo"].events_list = [gke_preemption()]
    return out
