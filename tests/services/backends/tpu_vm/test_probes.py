"""Which hosts a poll probes: everything at first, then trouble plus a bounded round-robin."""

from __future__ import annotations

import math

import pytest

from console.services.backends.tpu_vm.probes import ProbePlanner
from console.services.model import HostResult

HOSTS = [f"h{i}" for i in range(20)]
READY = dict.fromkeys(HOSTS, "READY")
ONE_NODE_EACH = dict.fromkeys(HOSTS, 1)


def _ok(names: list[str], bad: set[str] | None = None) -> dict[str, HostResult]:
    bad = bad or set()
    return {n: HostResult(host=n, ok=n not in bad) for n in names}


def _poll(
    planner: ProbePlanner,
    states: dict[str, str] = READY,
    ray: dict[str, int] | None = ONE_NODE_EACH,
    bad: set[str] | None = None,
) -> list[str]:
    usable = [h for h in HOSTS if states[h] == "READY"]
    chosen = planner.choose(usable, states, ray)
    planner.record(states, _ok(chosen, bad))
    return chosen


def test_first_poll_probes_every_host_then_only_the_batch() -> None:
    planner = ProbePlanner(batch=4)
    assert _poll(planner) == HOSTS
    assert all(planner.last(h) is True for h in HOSTS)
    assert len(_poll(planner)) == 4


def test_round_robin_visits_every_healthy_host_within_ceil_hosts_over_batch_polls() -> None:
    planner = ProbePlanner(batch=6)
    _poll(planner)
    seen: set[str] = set()
    for _ in range(math.ceil(len(HOSTS) / 6)):
        seen.update(_poll(planner))
    assert seen == set(HOSTS)


def test_a_failed_probe_is_repeated_every_poll_until_it_passes() -> None:
    planner = ProbePlanner(batch=2)
    _poll(planner)
    # h7 comes up bad in its round-robin turn (or here: force it through a dropped connection)
    planner.suspect("h7")
    assert "h7" in _poll(planner, bad={"h7"})
    assert planner.last("h7") is False
    for _ in range(3):
        assert "h7" in _poll(planner, bad={"h7"})
    assert "h7" in _poll(planner)
    assert planner.last("h7") is True
    assert len(_poll(planner)) == 2


def test_a_dropped_connection_is_probed_once_at_the_next_poll() -> None:
    planner = ProbePlanner(batch=0)
    _poll(planner)
    assert _poll(planner) == []
    planner.suspect("h3")
    assert _poll(planner) == ["h3"]
    assert _poll(planner) == []


def test_api_and_ray_disagreeing_is_probed() -> None:
    planner = ProbePlanner(batch=0)
    _poll(planner)
    ray = {**ONE_NODE_EACH, "h4": 0, "h9": 2}
    assert sorted(_poll(planner, ray=ray)) == ["h4", "h9"]
    # the GCS not answering says nothing about any one host
    assert _poll(planner, ray=None) == []


def test_a_state_change_forgets_the_last_result_and_probes_again() -> None:
    planner = ProbePlanner(batch=0)
    _poll(planner)
    lost = {**READY, "h5": "PREEMPTED"}
    assert _poll(planner, states=lost) == []
    assert planner.last("h5") is None
    assert _poll(planner, states=READY) == ["h5"]
    assert planner.last("h5") is True


def test_hosts_that_left_the_pod_are_forgotten() -> None:
    planner = ProbePlanner()
    _poll(planner)
    planner.record({"h0": "READY"}, {})
    assert planner.last("h0") is True and planner.last("h1") is None


def test_negative_batch_is_refused() -> None:
    with pytest.raises(ValueError, match="probe batch"):
        ProbePlanner(batch=-1)
