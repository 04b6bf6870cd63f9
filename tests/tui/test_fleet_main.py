"""`phantom` on a config of several clusters: the console over all of them, each cluster's
services built behind the first frame (nothing is built or started by making the app)."""

from __future__ import annotations

import pytest

from console import cli, exit_codes
from console.config.fleet import parse_fleet
from console.services.pending import PendingServices
from console.tui.main import make_fleet_app
from tests.support.fake_fleet import FLEET_DOC


def test_a_fleet_app_has_each_clusters_services_by_name_unbuilt() -> None:
    app = make_fleet_app(parse_fleet(FLEET_DOC, source="fleet.toml"))
    assert list(app.fleet) == ["pod-a", "pod-b", "grpo"]
    for name, member in app.fleet.items():
        assert isinstance(member, PendingServices) and member.real is None
        assert member.settings.cluster.name == name
    assert app.services is app.fleet["pod-a"] and app.home_mode() == "fleet"
    worlds = [m.settings.cluster.world for m in app.fleet.values()]
    assert worlds == ["TPU VM pod + Ray", "TPU VM pod + Ray", "GKE + JobSets"]


def test_metrics_with_a_fleet_is_refused_naming_the_fix(
    tmp_path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "fleet.toml"
    config.write_text(
        "".join(
            f'[[clusters]]\nname = "{n}"\n[clusters.cluster]\nprovider = "local"\n'
            f'zone = "local-{z}"\nnode_name = "{n}"\nrun_dir = "{tmp_path / n}"\n'
            for n, z in (("pod-a", "a"), ("pod-b", "b"))
        )
    )
    code = cli.main(["--config", str(config), "--metrics", "127.0.0.1:0"])
    assert code == exit_codes.USAGE
    err = capsys.readouterr().err
    assert "--metrics" in err and "pass --cluster NAME" in err and "Traceback" not in err
