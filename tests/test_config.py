"""Config: defaults, the example file, and one clear message per problem."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from console.config import Config, ConfigError, load_config, parse_config
from console.config.example import example_config, missing_docs


def test_no_file_means_local_emulator_with_4_hosts(tmp_path: Path) -> None:
    cfg = load_config(None, discover=False)
    assert cfg == Config()
    assert cfg.is_local and cfg.cluster.hosts == 4


def test_example_config_parses_to_the_defaults_it_documents() -> None:
    text = example_config()
    cfg = parse_config(tomllib.loads(text))
    defaults = Config()
    assert (cfg.cluster, cfg.ssh, cfg.ray, cfg.wandb, cfg.recovery) == (
        defaults.cluster,
        defaults.ssh,
        defaults.ray,
        defaults.wandb,
        defaults.recovery,
    )
    assert cfg.runtime_env["env_vars"]["WANDB_API_KEY"] == "$WANDB_API_KEY"
    # each setting's own doc is its comment
    assert "# The NAME of the environment variable holding your key" in text
    assert "# local: the number of emulated hosts" in text


def test_every_setting_documents_itself() -> None:
    assert missing_docs() == []


def test_every_problem_is_reported_with_key_value_and_allowed() -> None:
    with pytest.raises(ConfigError) as err:
        parse_config(
            {
                "cluster": {"provider": "aws", "hosts": 0},
                "ssh": {"port": 70000, "known_hosts_policy": "yolo"},
                "wandb": {"mode": "cloud", "api_key_env": "abc-123-secret"},
                "recovery": {"stall_factor": 0.5, "auto": "yes"},
                "ray": {"resources": {"TPU": "eight"}},
                "colour": "blue",
            }
        )
    problems = err.value.problems
    text = "\n".join(problems)
    assert len(problems) == 10, text
    assert "cluster.provider = 'aws': allowed values are local, gcp" in text
    assert "cluster.hosts = 0: must be greater than 0" in text
    assert "ssh.port = 70000" in text
    assert "ssh.known_hosts_policy = 'yolo'" in text
    assert "wandb.mode = 'cloud'" in text
    assert "wandb.api_key_env" in text and "never the key itself" in text
    assert "recovery.stall_factor = 0.5" in text
    assert "recovery.auto = 'yes': must be true or false" in text
    assert "ray.resources" in text
    assert "unknown section or key 'colour'" in text


def test_inline_secret_in_runtime_env_is_refused() -> None:
    with pytest.raises(ConfigError) as err:
        parse_config({"runtime_env": {"env_vars": {"WANDB_API_KEY": "0123456789abcdef"}}})
    assert "runtime_env.env_vars.WANDB_API_KEY" in err.value.problems[0]
    assert "0123456789abcdef" not in str(err.value)


def test_gcp_requires_project_and_zone() -> None:
    with pytest.raises(ConfigError) as err:
        parse_config({"cluster": {"provider": "gcp"}})
    assert any(p.startswith("cluster.project") for p in err.value.problems)
    assert any(p.startswith("cluster.zone") for p in err.value.problems)


def test_capacity_names_each_bad_setting_and_the_fix() -> None:
    gcp = {"provider": "gcp", "project": "p", "zone": "us-central2-b"}
    with pytest.raises(ConfigError) as err:
        parse_config(
            {
                "cluster": gcp,
                "capacity": {
                    "zones": ["us-east5-a", "Bad Zone"],
                    "failover": "random",
                    "acquire": "spot",
                    "zone_retries": 0,
                },
            }
        )
    problems = err.value.problems
    assert "capacity.zones: ['Bad Zone'] are not zone names (e.g. us-central2-b)" in problems
    assert any(p.startswith("capacity.failover = 'random': allowed values") for p in problems)
    assert any(p.startswith("capacity.acquire = 'spot': allowed values") for p in problems)
    assert "capacity.zone_retries = 0: must be greater than 0" in problems
    with pytest.raises(ConfigError, match=r"must include cluster.zone \('us-central2-b'\)"):
        parse_config({"cluster": gcp, "capacity": {"zones": ["us-east5-a"]}})
    with pytest.raises(ConfigError, match="need provider = 'gcp'"):
        parse_config({"capacity": {"zones": ["local-a", "local-b"]}})
    with pytest.raises(ConfigError, match="must be a list of names"):
        parse_config({"cluster": gcp, "capacity": {"zones": "us-central2-b"}})
    ok = parse_config({"cluster": gcp, "capacity": {"zones": ["us-central2-b", "us-east5-a"]}})
    assert ok.capacity.zones == ("us-central2-b", "us-east5-a")
    assert ok.capacity.failover == "eager-failover"


def _phantom(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "console", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=60,
    )


def test_cli_invalid_config_exits_2_naming_each_key(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('[cluster]\nprovider = "aws"\n[ssh]\nparallelism = -3\n')
    proc = _phantom("--config", str(bad), "status", "--json")
    assert proc.returncode == 2
    assert "cluster.provider = 'aws'" in proc.stderr
    assert "ssh.parallelism = -3" in proc.stderr
    assert proc.stdout == ""


def test_cli_broken_toml_and_missing_file_exit_2(tmp_path: Path) -> None:
    broken = tmp_path / "broken.toml"
    broken.write_text("[cluster\n")
    proc = _phantom("--config", str(broken), "status")
    assert proc.returncode == 2 and "not valid TOML" in proc.stderr
    proc = _phantom("--config", str(tmp_path / "nope.toml"), "status")
    assert proc.returncode == 2 and "phantom init" in proc.stderr


def test_init_writes_a_config_that_loads(tmp_path: Path) -> None:
    target = tmp_path / "cfg" / "config.toml"
    proc = _phantom("init", str(target))
    assert proc.returncode == 0, proc.stderr
    assert load_config(target).cluster.hosts == 4
    again = _phantom("init", str(target))
    assert again.returncode == 2 and "--force" in again.stderr


def test_unknown_flag_exits_2() -> None:
    proc = _phantom("--no-such-flag")
    assert proc.returncode == 2 and "unrecognized arguments" in proc.stderr


def test_script_help_prints_the_language_reference() -> None:
    proc = _phantom("--script-help")
    assert proc.returncode == 0, proc.stderr
    for action in ("pod up", "wait-ready", "submit single|distributed|sweep", "recover"):
        assert action in proc.stdout


def test_tunnel_ports_default_per_provider() -> None:
    local = Config()
    # The emulated head shares this machine's 127.0.0.1 with the dashboard: no clash.
    assert (local.ray.local_dashboard_port, local.ray.local_client_port) == (18265, 20001)
    gcp = parse_config({"cluster": {"provider": "gcp", "project": "p", "zone": "us-central2-b"}})
    assert (gcp.ray.local_dashboard_port, gcp.ray.local_client_port) == (8265, 10001)
    explicit = parse_config({"ray": {"local_dashboard_port": 9000}})
    assert explicit.ray.local_dashboard_port == 9000
