"""The [alerts] section: webhooks told of preemptions, recoveries, stalls, capacity and jobs.

    [alerts]
    per_minute = 20

    [[alerts.webhooks]]
    name = "ops"
    format = "slack"                    # {"text": ...}; "json": the generic body
    url_env = "PHANTOM_SLACK_WEBHOOK"   # the NAME of the variable holding the URL

A webhook URL usually carries its token (Slack's does), so the file names the environment
variable that holds it, never the URL; the variable must be set when the config is loaded
(a missing one is a config error naming it, exit 2, before anything runs). The settings carry
attribute docstrings: ``phantom init``'s example is generated from them (``config.example``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields, replace
from enum import StrEnum
from typing import Any, Literal

from console.config.names import ENV_NAME_RE


class AlertKind(StrEnum):
    """What can be sent (``console.services.alerts.rules`` maps journal events to them)."""

    PREEMPTION = "preemption"
    RECOVERED = "recovered"
    RECOVERY_FAILED = "recovery_failed"
    STALL = "stall"
    NO_CAPACITY = "no_capacity"
    NOTICE_NOT_HONOURED = "notice_not_honoured"
    JOB_FAILED = "job_failed"
    JOB_FINISHED = "job_finished"


ALERT_KINDS: tuple[str, ...] = tuple(AlertKind)
FORMATS = ("json", "slack")


@dataclass(frozen=True)
class WebhookConfig:
    """One receiver ([[alerts.webhooks]])."""

    name: str
    """What the journal calls it (never its URL)."""
    url_env: str
    """The NAME of the environment variable holding the URL, never the URL itself."""
    format: Literal["json", "slack"] = "json"
    """"json" (the generic body: kind, message, incident, MTTR, ...) or "slack" ({"text": ...})."""


@dataclass(frozen=True)
class AlertsConfig:
    """[alerts]: webhooks told of preemptions, recoveries, stalls, capacity and jobs."""

    webhooks: tuple[WebhookConfig, ...] = ()
    """Receivers, each a [[alerts.webhooks]] table: name, url_env (the NAME of the variable
    holding its URL) and format ("json" or "slack"). None: no alerts."""
    kinds: tuple[str, ...] = ALERT_KINDS
    """What to send: preemption, recovered, recovery_failed, stall, no_capacity,
    notice_not_honoured, job_failed, job_finished."""
    per_minute: int = 20
    """At most this many alerts a minute to each receiver; more are dropped (journaled)."""
    retries: int = 3
    """A delivery that fails (no answer, 429, 5xx) is tried again this many times."""
    backoff_s: float = 2.0
    """Wait before the first retry, doubling each time."""
    timeout_s: float = 10.0
    """Seconds one delivery may take."""
    queue: int = 100
    """Alerts waiting per receiver; beyond this the oldest is dropped (journaled, counted)."""


def parse_alerts(
    table: Mapping[str, Any],
    problems: list[str],
    check: Callable[[str, Any, Any, list[str]], Any],
    bad: object,
    environ: Mapping[str, str] | None = None,
) -> AlertsConfig:
    """[alerts] as read from TOML; every problem appended to ``problems`` (``check`` is the
    config's type check of one value; it returns ``bad`` for a wrong type)."""
    env = os.environ if environ is None else environ
    defaults = AlertsConfig()
    known = {f.name for f in fields(AlertsConfig)}
    values: dict[str, Any] = {}
    for key, value in table.items():
        if key not in known:
            problems.append(f"alerts.{key}: unknown key; allowed: {', '.join(sorted(known))}")
        elif key == "webhooks":
            values[key] = _webhooks(value, problems, env)
        else:
            checked = check(f"alerts.{key}", getattr(defaults, key), value, problems)
            if checked is not bad:
                values[key] = checked
    bad_kinds = [k for k in values.get("kinds", ()) if k not in ALERT_KINDS]
    if bad_kinds:
        problems.append(f"alerts.kinds: unknown {bad_kinds!r}; allowed: {', '.join(ALERT_KINDS)}")
    for key in ("per_minute", "queue", "timeout_s"):
        if key in values and values[key] <= 0:
            problems.append(f"alerts.{key} = {values[key]!r}: must be greater than 0")
    for key in ("retries", "backoff_s"):
        if key in values and values[key] < 0:
            problems.append(f"alerts.{key} = {values[key]!r}: must be 0 or more")
    return replace(defaults, **values)


def _webhooks(value: Any, problems: list[str], env: Mapping[str, str]) -> tuple[WebhookConfig, ...]:
    if not isinstance(value, list) or not all(isinstance(v, Mapping) for v in value):
        problems.append(
            "alerts.webhooks: a list of tables, each written as [[alerts.webhooks]] with "
            'name = "...", url_env = "NAME_OF_THE_URL_VARIABLE", format = "json" or "slack"'
        )
        return ()
    out: list[WebhookConfig] = []
    names: set[str] = set()
    allowed = {f.name for f in fields(WebhookConfig)}
    for i, row in enumerate(value):
        where = f"alerts.webhooks[{i}]"
        before = len(problems)
        name, url_env, fmt = row.get("name"), row.get("url_env"), row.get("format", "json")
        if not isinstance(name, str) or not name:
            problems.append(f'{where}.name: required, e.g. name = "ops"')
        elif name in names:
            problems.append(f"{where}.name = {name!r}: used twice; each receiver has its own")
        else:
            names.add(name)
            where = f"alerts.webhooks[{i}] ({name})"
        if "url" in row:
            problems.append(
                f"{where}.url: the URL carries the receiver's token and never goes in the file; "
                "export it and name the variable with url_env"
            )
        for key in sorted(set(row) - allowed - {"url"}):
            problems.append(f"{where}.{key}: unknown key; allowed: {', '.join(sorted(allowed))}")
        if fmt not in FORMATS:
            problems.append(f"{where}.format = {fmt!r}: allowed values are {', '.join(FORMATS)}")
        if not isinstance(url_env, str) or not ENV_NAME_RE.match(url_env):
            problems.append(
                f"{where}.url_env: the NAME of the environment variable holding the URL, "
                'e.g. url_env = "PHANTOM_SLACK_WEBHOOK"'
            )
        else:
            url = env.get(url_env, "")
            if not url:
                problems.append(
                    f"{where}.url_env = {url_env!r}: that environment variable is not set; "
                    f"export {url_env}=<the webhook URL> (or remove the receiver)"
                )
            elif not url.startswith(("http://", "https://")):
                problems.append(
                    f"{where}.url_env = {url_env!r}: its value is not an http(s):// URL"
                )
        if len(problems) == before:
            out.append(WebhookConfig(name=str(name), url_env=str(url_env), format=fmt))
    return tuple(out)


def webhook_urls(alerts: AlertsConfig, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Each receiver's URL, read from its variable now (the config checked it was set)."""
    env = os.environ if environ is None else environ
    return {w.name: env.get(w.url_env, "") for w in alerts.webhooks}
