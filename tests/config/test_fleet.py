"""A fleet in the config: [[clusters]] entries, or today's [cluster] as a fleet of one."""

from __future__ import annotations

from pathlib import Path

import pytest

from console.config import ConfigError, load_config, load_fleet, parse_config
from console.config.fleet import ClusterChoiceError, parse_fleet
from tests.support import REPO

TWO = {
    "ray": {"num_cpus": 2},
    "clusters": [
        {"name": "pod-a", "cluster": {"zone": "local-a", "node_name": "pod-a"}},
        {"name": "pod-b", "cluster": {"zone": "local-b"}, "ray": {"object_store_mb": 100}},
    ],
}


def problems(data: dict) -> list[str]:
    with pytest.raises(ConfigError) as err:
        parse_fleet(data, source="f.toml")
    return err.value.problems


def test_a_cluster_config_is_a_fleet_of_one_named_from_its_node() -> None:
    data = {"cluster": {"node_name": "my-v4", "hosts": 2}}
    fleet = parse_fleet(data)
    assert fleet.names == ("my-v4",)
    only = fleet.select(None)
    assert only == fleet.select("my-v4")
    # the same cluster as before fleets, with its name; run dirs keep today's defaults
    assert only == parse_config(data)  # the name is a label: same settings, same cluster
    assert only.cluster.run_dir == "" and only.gke.run_dir == ""


def test_a_gke_config_is_named_from_its_cluster_or_provider() -> None:
    named = parse_fleet({"cluster": {"provider": "gke"}, "gke": {"cluster": "grpo-1"}})
    assert named.names == ("grpo-1",)
    assert parse_fleet({"cluster": {"provider": "gke"}}).names == ("gke",)


def test_no_config_at_all_is_the_default_pod() -> None:
    assert load_fleet(None, discover=False).names == ("phantom-pod",)
    assert load_config(None, discover=False).name == "phantom-pod"


def test_entries_share_top_level_sections_and_lay_their_own_over_them() -> None:
    fleet = parse_fleet(TWO)
    a, b = fleet.members
    assert (a.name, b.name) == ("pod-a", "pod-b")
    assert a.ray.num_cpus == b.ray.num_cpus == 2
    assert (a.ray.object_store_mb, b.ray.object_store_mb) == (0, 100)
    assert (a.cluster.zone, b.cluster.zone) == ("local-a", "local-b")


def test_emulated_members_get_run_dirs_of_their_own() -> None:
    data = {**TWO, "clusters": [*TWO["clusters"], {"name": "grpo", "cluster": {"provider": "gke"}}]}
    a, b, grpo = parse_fleet(data).members
    dirs = {a.cluster.run_dir, b.cluster.run_dir, grpo.gke.run_dir}
    assert len(dirs) == 3
    assert a.cluster.run_dir.endswith("fleet/pod-a/pod")
    assert grpo.gke.run_dir.endswith("fleet/grpo/gke")


def test_several_clusters_need_a_name_and_the_error_lists_them() -> None:
    fleet = parse_fleet(TWO, source="f.toml")
    with pytest.raises(ClusterChoiceError) as err:
        fleet.select(None)
    text = err.value.render()
    assert "2 clusters (pod-a, pod-b)" in text and "--cluster NAME" in text
    with pytest.raises(ClusterChoiceError) as err:
        fleet.select("pod-c")
    assert "'pod-c'" in err.value.render() and "pod-a, pod-b" in err.value.render()
    assert fleet.select("pod-b").cluster.zone == "local-b"


@pytest.mark.parametrize(
    ("entries", "says"),
    [
        ([{"name": "a"}, {"name": "a"}], "clusters[1] 'a': name already used by clusters[0]"),
        ([{"name": ""}], "clusters[0]: no name"),
        ([{}], "clusters[0]: no name"),
        ([{"name": 7}], "clusters[0]: no name"),
        ([{"name": "Pod_A"}], "clusters[0] 'Pod_A': name is not a safe identifier"),
        ([{"name": "a" * 41}], "is not a safe identifier"),
        ([{"name": "../x"}], "is not a safe identifier"),
        ([{"name": "a", "wandb": {}}], "'wandb' is the console's (top level only)"),
        ([{"name": "a", "nodes": 3}], "'nodes' is unknown in a [[clusters]] entry"),
        ([{"name": "a", "cluster": {"hosts": 0}}], "clusters[0] 'a': cluster.hosts"),
        (["a"], "clusters[0] must be a table"),
        ([], "clusters must be a list of tables"),
    ],
)
def test_bad_entries_are_named(entries: list, says: str) -> None:
    found = problems({"clusters": entries})
    assert any(says in p for p in found), found


def test_every_bad_entry_is_reported_at_once() -> None:
    found = problems({"clusters": [{"name": "A"}, {"name": "b", "cluster": {"hosts": -1}}]})
    assert len(found) == 2


def test_cluster_and_clusters_together_are_refused() -> None:
    found = problems({"cluster": {}, "clusters": [{"name": "a"}]})
    assert any("[cluster] and [[clusters]] together" in p for p in found)


def test_two_clusters_on_one_run_dir_are_refused(tmp_path: Path) -> None:
    same = str(tmp_path / "pod")
    entries = [
        {"name": "a", "cluster": {"run_dir": same}},
        {"name": "b", "cluster": {"run_dir": same + "/"}},
    ]
    found = problems({"clusters": entries})
    assert any("clusters[1] 'b': run dir" in p and "clusters[0] 'a'" in p for p in found)


def test_the_example_fleet_loads() -> None:
    fleet = load_fleet(REPO / "examples" / "fleet.toml")
    assert fleet.names == ("pod-a", "pod-b", "grpo")
    providers = [c.cluster.provider for c in fleet.members]
    assert providers == ["local", "local", "gke"]


def test_each_member_gets_its_own_state_dir_and_tunnel_ends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    data = {
        **TWO,
        "clusters": [
            *TWO["clusters"],
            {
                "name": "far",
                "cluster": {"provider": "gcp", "project": "p", "zone": "us-central2-b"},
            },
        ],
    }
    a, b, far = parse_fleet(data).members
    assert [m.state_dir for m in (a, b, far)] == [
        str(tmp_path / "phantom" / "fleet" / n) for n in ("pod-a", "pod-b", "far")
    ]
    # local pods share this machine's 127.0.0.1: the head's dashboard and both tunnel ends
    assert (a.ray.dashboard_port, b.ray.dashboard_port) == (8265, 8266)
    assert (a.ray.local_dashboard_port, b.ray.local_dashboard_port) == (18265, 18266)
    assert (a.ray.local_client_port, b.ray.local_client_port) == (20001, 20002)
    # a real pod's dashboard is on its own head; only the tunnel's local ends move
    assert far.ray.dashboard_port == 8265
    assert (far.ray.local_dashboard_port, far.ray.local_client_port) == (8267, 10003)


def test_ports_a_member_sets_are_kept() -> None:
    data = {
        "clusters": [
            {"name": "pod-a"},
            {"name": "pod-b", "ray": {"dashboard_port": 9000, "local_client_port": 7000}},
        ]
    }
    _, b = parse_fleet(data).members
    assert (b.ray.dashboard_port, b.ray.local_dashboard_port) == (9000, 19000)
    assert b.ray.local_client_port == 7000


def test_a_cluster_config_keeps_todays_state_dir_and_ports() -> None:
    (only,) = parse_fleet({"cluster": {"node_name": "my-v4"}}).members
    assert only.state_dir == ""
    assert (only.ray.dashboard_port, only.ray.local_dashboard_port) == (8265, 18265)
    assert only.ray.local_client_port == 20001


def test_a_port_whose_tunnel_end_would_pass_65535_is_refused_naming_the_key() -> None:
    # a local pod's tunnel ends are its ports + 10000: 56000 would listen on 66000
    with pytest.raises(ConfigError) as err:
        parse_config({"ray": {"dashboard_port": 56000}})
    [problem] = err.value.problems
    assert problem.startswith("ray.dashboard_port = 56000:") and "66000" in problem
    assert "ray.local_dashboard_port" in problem  # the fix
    # its own local end given, the port is fine; a GCP pod's tunnel end is the port itself
    parse_config({"ray": {"dashboard_port": 56000, "local_dashboard_port": 18265}})
    parse_config(
        {"cluster": {"provider": "gcp", "project": "p", "zone": "z"}, "ray": {"client_port": 65535}}
    )
    # in a fleet, the n-th local pod's ends move up by n: the last one passes the edge
    data = {
        "ray": {"client_port": 55534},
        "clusters": [{"name": f"pod-{i}", "cluster": {"zone": f"local-{i}"}} for i in range(3)],
    }
    assert problems(data) == [
        "clusters[2] 'pod-2': ray.client_port = 55534: its tunnel's local end would be port "
        "65536, past 65535 (a local pod's is the port + 10000, a fleet's n-th cluster's + n); "
        "choose a lower ray.client_port or set ray.local_client_port"
    ]
