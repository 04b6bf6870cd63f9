"""[alerts]: apprise URLs with their secret in the environment, each judged by apprise; the
old [[alerts.webhooks]] tables get the lines to write instead. Every problem is named (exit 2
before anything runs)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from console.config import ConfigError, parse_config
from console.config.alerts import ALERT_KINDS, AlertsConfig, NotifyConfig, notify_urls
from tests.script.test_e2e import phantom_argv
from tests.support import REPO

SLACK = {"name": "ops", "url": "slack://${PHANTOM_TEST_SLACK_TOKENS}/#ops"}
TOKENS = "T1JJ3T3L2/A1BRTD4JD/TIiajkdnlazkcOXrIdevi7FQ"


def test_apprise_urls_parse_with_their_secret_in_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PHANTOM_TEST_SLACK_TOKENS", TOKENS)
    cfg = parse_config({"alerts": {"notify": [SLACK], "per_minute": 5}})
    assert cfg.alerts == AlertsConfig(notify=(NotifyConfig("ops", SLACK["url"]),), per_minute=5)
    assert cfg.alerts.secret_envs == ("PHANTOM_TEST_SLACK_TOKENS",)
    assert notify_urls(cfg.alerts) == {"ops": f"slack://{TOKENS}/#ops"}
    assert parse_config({}).alerts.notify == ()
    assert parse_config({}).alerts.kinds == ALERT_KINDS


def test_every_problem_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PHANTOM_TEST_SLACK_TOKENS", raising=False)
    alerts = {
        "notify": [
            SLACK,
            {"name": "b", "url": f"slack://{TOKENS}/#ops"},
            {"name": "c", "url": "nosuchservice://x/y"},
            {"name": "c", "url": "json://${not a name}"},
            {"name": "e", "url": "json://127.0.0.1/hook", "format": "slack"},
        ],
        "per_minute": 0,
    }
    with pytest.raises(ConfigError) as exc:
        parse_config({"alerts": alerts})
    text = exc.value.render()
    assert "alerts.notify[0] (ops).url: ${PHANTOM_TEST_SLACK_TOKENS} is not set" in text
    assert "alerts.notify[1] (b).url: this slack:// URL carries its token in the file" in text
    assert "alerts.notify[2] (c).url: apprise does not accept this nosuchservice:// URL" in text
    assert "alerts.notify[3].name = 'c': used twice" in text
    # What sits in ${...} may be the secret itself: named, never repeated (issue 45).
    assert "url: a ${...} holds something that is not an environment variable" in text
    assert "not a name" not in text
    assert "alerts.notify[4] (e).format: unknown key" in text
    assert "alerts.per_minute = 0" in text
    assert TOKENS not in text


def test_an_old_webhook_table_shows_the_lines_to_write() -> None:
    old = {"webhooks": [{"name": "ops", "url_env": "PHANTOM_SLACK_WEBHOOK", "format": "slack"}]}
    with pytest.raises(ConfigError) as exc:
        parse_config({"alerts": old})
    text = exc.value.render()
    assert "the webhook sender was replaced by apprise; write instead" in text
    assert "each url_env becomes the ${NAME} in url" in text
    assert '[[alerts.notify]]\n    name = "ops"\n    url = "${PHANTOM_SLACK_WEBHOOK}"' in text


@pytest.mark.parametrize(
    ("table", "expected"),
    [
        (
            '[[alerts.notify]]\nname = "ops"\nurl = "json://${PHANTOM_TEST_ALERT_HOST}/x"\n',
            "alerts.notify[0] (ops).url: ${PHANTOM_TEST_ALERT_HOST} is not set",
        ),
        (
            '[[alerts.notify]]\nname = "ops"\nurl = "nosuchservice://127.0.0.1/x"\n',
            "apprise does not accept this nosuchservice:// URL",
        ),
        (
            '[[alerts.webhooks]]\nname = "ops"\nurl_env = "PHANTOM_TEST_SLACK_WEBHOOK"\n',
            'url = "${PHANTOM_TEST_SLACK_WEBHOOK}"',
        ),
    ],
)
def test_a_bad_receiver_stops_a_script_with_exit_2(
    tmp_path: Path, table: str, expected: str
) -> None:
    (tmp_path / "c.toml").write_text(table)
    (tmp_path / "s.phantom").write_text("status\n")
    home = tmp_path / "home"
    env = {k: v for k, v in os.environ.items() if k != "PHANTOM_TEST_ALERT_HOST"}
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
    assert expected in proc.stderr
    assert not (home / "state" / "phantom" / "journal.sqlite").exists(), "something was run"
