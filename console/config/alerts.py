"""The [alerts] section: apprise URLs told of preemptions, recoveries, stalls, capacity, jobs.

    [alerts]
    per_minute = 20

    [[alerts.notify]]
    name = "ops"
    url = "slack://${PHANTOM_SLACK_TOKENS}/#ops"       # any apprise URL (100+ services)

An apprise URL usually carries its token, so the file holds ``${NAME}`` where the secret goes
and the environment holds the secret: each ``${NAME}`` is read when the config is loaded (an
unset one is a config error naming it), and a URL whose token is written out in the file is
refused. apprise itself judges each URL (one it rejects is a config error: exit 2, before
anything runs). The old ``[[alerts.webhooks]]`` tables get an error that shows the lines to
write instead. The settings carry attribute docstrings: ``phantom init``'s example is
generated from them (``config.example``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields, replace
from enum import StrEnum
from typing import Any

from console.config.names import ENV_NAME_RE
from console.config.validate import is_env_var_name, looks_secret


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
    # A GKE pod's own failure, by the cause its status gives (its workload retries it).
    POD_CRASHED = "pod_crashed"
    POD_OOM_KILLED = "pod_oom_killed"
    POD_EVICTED = "pod_evicted"


ALERT_KINDS: tuple[str, ...] = tuple(AlertKind)
# ``${NAME}`` in a URL: the secret part, read from the environment variable NAME.
SECRET_REF = re.compile(r"\$\{([^}]*)\}")
APPRISE_DOCS = "https://github.com/caronc/apprise/wiki"


@dataclass(frozen=True)
class NotifyConfig:
    """One receiver ([[alerts.notify]])."""

    name: str
    """What the journal calls it (never its URL)."""
    url: str
    """An apprise URL with ``${NAME}`` where its secret goes (read from the environment)."""

    @property
    def secret_envs(self) -> tuple[str, ...]:
        return tuple(SECRET_REF.findall(self.url))

    def resolved(self, environ: Mapping[str, str] | None = None) -> str:
        """The URL with its secrets filled in from the environment (never shown, never
        journaled)."""
        env = os.environ if environ is None else environ
        return SECRET_REF.sub(lambda m: env.get(m.group(1), ""), self.url)


@dataclass(frozen=True)
class AlertsConfig:
    """[alerts]: apprise URLs told of preemptions, recoveries, stalls, capacity and jobs."""

    notify: tuple[NotifyConfig, ...] = ()
    """Receivers, each a [[alerts.notify]] table: name and url, an apprise URL with
    ${NAME} where its token goes (the variable NAME holds it). None: no alerts."""
    kinds: tuple[str, ...] = ALERT_KINDS
    """What to send: preemption, recovered, recovery_failed, stall, no_capacity,
    notice_not_honoured, job_failed, job_finished, pod_crashed, pod_oom_killed, pod_evicted."""
    per_minute: int = 20
    """At most this many alerts a minute to each receiver; more are dropped (journaled)."""
    retries: int = 3
    """A delivery that fails is tried again this many times."""
    backoff_s: float = 2.0
    """Wait before the first retry, doubling each time."""
    timeout_s: float = 10.0
    """Seconds one delivery may take."""
    queue: int = 100
    """Alerts waiting per receiver; beyond this the oldest is dropped (journaled, counted)."""

    @property
    def secret_envs(self) -> tuple[str, ...]:
        """Every variable a receiver's URL reads: their values are masked wherever shown."""
        return tuple(dict.fromkeys(n for r in self.notify for n in r.secret_envs))


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
        if key == "webhooks":
            problems.append(_migration(value))
        elif key not in known:
            problems.append(f"alerts.{key}: unknown key; allowed: {', '.join(sorted(known))}")
        elif key == "notify":
            values[key] = _notify(value, problems, env)
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


def _migration(value: Any) -> str:
    """What replaces an old [[alerts.webhooks]] table, written out. Each ``url_env`` named
    the variable holding the webhook URL: the hint shows that name, never a value that is
    not one (a URL written there is the secret itself)."""
    rows = value if isinstance(value, list) else []
    blocks, notes = [], []
    for i, row in enumerate(rows):
        row = row if isinstance(row, Mapping) else {}
        raw_name = row.get("name")
        name = raw_name if is_env_var_name(raw_name) or _plain(raw_name) else f"hook{i}"
        given = row.get("url_env")
        env = given if is_env_var_name(given) else "PHANTOM_ALERT_URL"
        if given is not None and not is_env_var_name(given):
            notes.append(
                f"  alerts.webhooks[{i}].url_env: the value given is not the name of an "
                "environment variable (not shown: it looks like the webhook URL itself, a "
                f"secret); export {env}=<the URL> and write its name"
            )
        blocks.append(
            f'    [[alerts.notify]]\n    name = "{name}"\n    url = "${{{env}}}"'
            f"  # was url_env = {env}"
        )
    new = (
        "\n\n".join(blocks)
        or '    [[alerts.notify]]\n    name = "ops"\n    url = "${PHANTOM_ALERT_URL}"'
    )
    return (
        "alerts.webhooks: the webhook sender was replaced by apprise; write instead "
        "(each url_env becomes the ${NAME} in url):\n"
        f"{new}\n"
        + "".join(n + "\n" for n in notes)
        + "  and make the variable hold an apprise URL: a Slack or Discord webhook URL works as "
        "it is; a generic JSON receiver's http(s)://HOST/PATH becomes json(s)://HOST/PATH "
        f"({APPRISE_DOCS})"
    )


def _plain(value: object) -> bool:
    """A receiver's name a message may repeat (short words, never token-shaped)."""
    return (
        isinstance(value, str)
        and 0 < len(value) <= 40
        and not looks_secret(value)
        and all(c.isalnum() or c in " _-." for c in value)
    )


def _notify(value: Any, problems: list[str], env: Mapping[str, str]) -> tuple[NotifyConfig, ...]:
    if not isinstance(value, list) or not all(isinstance(v, Mapping) for v in value):
        problems.append(
            "alerts.notify: a list of tables, each written as [[alerts.notify]] with "
            'name = "..." and url = "slack://${PHANTOM_SLACK_TOKENS}/#ops" (an apprise URL)'
        )
        return ()
    out: list[NotifyConfig] = []
    names: set[str] = set()
    allowed = {f.name for f in fields(NotifyConfig)}
    for i, row in enumerate(value):
        where = f"alerts.notify[{i}]"
        before = len(problems)
        name, url = row.get("name"), row.get("url")
        if not isinstance(name, str) or not name:
            problems.append(f'{where}.name: required, e.g. name = "ops"')
        elif name in names:
            problems.append(f"{where}.name = {name!r}: used twice; each receiver has its own")
        else:
            names.add(name)
            where = f"alerts.notify[{i}] ({name})"
        for key in sorted(set(row) - allowed):
            problems.append(f"{where}.{key}: unknown key; allowed: {', '.join(sorted(allowed))}")
        if not isinstance(url, str) or not url.strip():
            problems.append(
                f'{where}.url: required, an apprise URL such as "json://127.0.0.1:8080/hook" '
                f'or "slack://${{PHANTOM_SLACK_TOKENS}}/#ops" ({APPRISE_DOCS})'
            )
        else:
            _check_url(where, url, problems, env)
        if len(problems) == before:
            out.append(NotifyConfig(name=str(name), url=str(url)))
    return tuple(out)


def _check_url(where: str, url: str, problems: list[str], env: Mapping[str, str]) -> None:
    refs = SECRET_REF.findall(url)
    for ref in refs:
        if not ENV_NAME_RE.match(ref):
            # Not repeated: what sits between ${ and } is often the secret itself.
            problems.append(
                f"{where}.url: a ${{...}} holds something that is not an environment "
                "variable's name (not shown: it may be the secret); write ${NAME} where the "
                "secret goes, e.g. ${PHANTOM_SLACK_TOKENS}"
            )
            return
        if not env.get(ref):
            problems.append(
                f"{where}.url: ${{{ref}}} is not set; export {ref}=<the secret> (or remove "
                "the receiver)"
            )
    if len(refs) != url.count("$"):
        problems.append(f"{where}.url: write each secret as ${{NAME}} (a bare $ is not read)")
    if any(p.startswith(where) for p in problems):
        return
    import apprise  # only a config with receivers pays for it

    plugin = apprise.Apprise.instantiate(SECRET_REF.sub(lambda m: env[m.group(1)], url))
    shown = _scheme(url)
    if plugin is None:
        problems.append(
            f"{where}.url: apprise does not accept this {shown} URL; check it against "
            f"{APPRISE_DOCS}"
        )
        return
    if not refs:
        # apprise knows which parts of its URL are secret: it masks them when asked.
        literal = apprise.Apprise.instantiate(url)
        if literal is not None and literal.url(privacy=True) != literal.url(privacy=False):
            problems.append(
                f"{where}.url: this {shown} URL carries its token in the file; put the token "
                "in an environment variable and write ${NAME} in its place"
            )


def _scheme(url: str) -> str:
    scheme, sep, _ = url.partition("://")
    return f"{scheme}://" if sep and scheme.isidentifier() else "apprise"


def notify_urls(alerts: AlertsConfig, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Each receiver's URL with its secrets filled in now (the config checked they were set)."""
    return {r.name: r.resolved(environ) for r in alerts.notify}
