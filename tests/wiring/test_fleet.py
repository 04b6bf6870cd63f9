"""The fleet's services: one set per cluster, by name, in the fleet's order (built against
real pod emulators in tests/watch/test_watch_fleet.py); what is refused before anything is
built."""

from __future__ import annotations

from pathlib import Path

import pytest

from console.config.fleet import ClusterChoiceError, parse_fleet
from console.wiring.fleet import ClusterBuildError, fleet_services, members

FLEET = {
    "clusters": [
        {"name": "pod-a", "cluster": {"zone": "local-a"}},
        {"name": "pod-b", "cluster": {"zone": "local-b"}},
    ]
}


def test_members_are_chosen_by_name_in_the_fleets_order() -> None:
    fleet = parse_fleet(FLEET)
    assert [m.name for m in members(fleet)] == ["pod-a", "pod-b"]
    assert [m.name for m in members(fleet, ["pod-b", "pod-a"])] == ["pod-a", "pod-b"]
    assert [m.name for m in members(fleet, ["pod-b"])] == ["pod-b"]


@pytest.mark.parametrize(
    ("names", "says"),
    [
        (["pod-c"], "--cluster 'pod-c': no such cluster"),
        (["pod-a", "pod-a"], "cluster 'pod-a' is named twice"),
    ],
)
def test_an_unknown_or_repeated_name_is_refused(names: list[str], says: str) -> None:
    with pytest.raises(ClusterChoiceError) as err:
        members(parse_fleet(FLEET, source="f.toml"), names)
    assert says in err.value.render()


def test_a_cluster_that_cannot_be_built_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    fleet = parse_fleet(FLEET)
    with pytest.raises(ClusterBuildError) as err:
        fleet_services(fleet)  # no pod runs: the first cluster says so, nothing is started
    assert err.value.name == "pod-a"
    assert "no pod emulator is running" in str(err.value)
    assert "phantom pod up" in str(err.value)
