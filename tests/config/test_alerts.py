"""[alerts]: receivers named by the variable that holds their URL, checked before anything runs."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from console.config import ConfigError, parse_config
from console.config.alerts import ALERT_KINDS, AlertsConfig, WebhookConfig
from tests.script.test_e2e import phantom_argv
from tests.support import REPO

SLACK = {"name": "ops", "url_env": "PHANTOM_TEST_SLACK_WEBHOOK", "format": "slack"}


def test_webhooks_parse_with_their_url_in_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PHANTOM_TEST_SLACK_WEBHOOK", "https://hooks.example/T0/B0/secret")
    cfg = parse_config({"alerts": {"webhooks": [SLACK], "per_minute": 5}})
    assert cfg.alerts == AlertsConfig(
        webhooks=(WebhookConfig("ops", "PHANTOM_TEST_SLACK_WEBHOOK", "slack"),), per_minute=5
    )
    assert cfg.alerts.kinds == ALERT_KINDS
    assert parse_config({}).alerts.webhooks == ()


def test_every_problem_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PHANTOM_TEST_SLACK_WEBHOOK", raising=False)
    monkeypatch.setenv("PHANTOM_TEST_NOT_A_URL", "hooks.example/x")
    bad = {
        "webhooks": [
            SLACK,
            {"name": "b", "url": "https://x/secret", "url_env": "PHANTOM_TEST_NOT_A_URL"},
            {"name": "c", "url_env": "https://hooks.example/x", "format": "xml"},
        ],
        "kinds": ["preemption", "lunch"],
        "per_minute": 0,
    }
    with pytest.raises(ConfigError) as err:
        parse_config({"alerts": bad})
    text = err.value.render()
    assert "alerts.webhooks[0] (ops).url_env = 'PHANTOM_TEST_SLACK_WEBHOOK'" in text
    assert "not set" in text and "export PHANTOM_TEST_SLACK_WEBHOOK=" in text
    assert "alerts.webhooks[1] (b).url: the URL carries the receiver's token" in text
    assert "(b).url_env = 'PHANTOM_TEST_NOT_A_URL': its value is not an http(s):// URL" in text
    assert "(c).format = 'xml'" in text and "(c).url_env: the NAME" in text
    assert "alerts.kinds: unknown ['lunch']" in text
    assert "alerts.per_minute = 0" in text
    assert "https://x/secret" not in text


def test_a_missing_url_variable_stops_a_script_with_exit_2(tmp_path: Path) -> None:
    (tmp_path / "c.toml").write_text(
        '[[alerts.webhooks]]\nname = "ops"\nurl_env = "PHANTOM_TEST_SLACK_WEBHOOK"\n'
    )
    (tmp_path / "s.phantom").write_text("status\n")
    home = tmp_path / "home"
    env = {k: v for k, v in os.environ.items() if k != "PHANTOM_TEST_SLACK_WEBHOOK"}
    env |= {"XDG_STATE_HOME": str(home / "state"), "XDG_CONFIG_HOME": str(home / "config")}
    proc = subprocess.run(
        phantom_argv("--config", str(tmp_path / "c.toml"), "--script", str(tmp_path / "s.phantom")),
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "Traceback" not in proc.stdout + proc.stderr
    assert "alerts.webhooks[0] (ops).url_env = 'PHANTOM_TEST_SLACK_WEBHOOK'" in proc.stderr
    assert not (home / "state" / "phantom" / "journal.sqlite").exists(), "something was run"
