"""An Input for `NAME=value` env vars that never shows a secret value on screen."""

from __future__ import annotations

import re

from rich.text import Text
from textual.widgets import Input

from console.config.names import ENV_NAME_RE
from console.secrets import is_secret_name

_PAIR = re.compile(r"(\S+?)=(\S*)")


def parse_env_vars(text: str) -> tuple[dict[str, str], str]:
    """`A=1 B=$B` -> ({"A": "1", "B": "$B"}, problem); problem names the bad word."""
    env: dict[str, str] = {}
    for word in text.split():
        name, sep, value = word.partition("=")
        if not sep or not name:
            return env, f"{word!r}: write NAME=value (secrets as NAME=$NAME)"
        if not ENV_NAME_RE.match(name):
            return env, f"{name!r}: not a valid environment variable name"
        env[name] = value
    return env, ""


def mask_env_text(text: str) -> str:
    """Same length as ``text`` (the cursor stays put) with inline secret values dotted."""

    def mask(match: re.Match[str]) -> str:
        name, value = match.group(1), match.group(2)
        if is_secret_name(name) and value and not value.startswith("$"):
            return f"{name}={'•' * len(value)}"
        return match.group(0)

    return _PAIR.sub(mask, text)


class EnvVarsInput(Input):
    """Space-separated `NAME=value`; values of KEY/TOKEN/SECRET/PASSWORD names are dotted.

    A reference (`WANDB_API_KEY=$WANDB_API_KEY`) stays readable: it is not a secret.
    """

    @property
    def _value(self) -> Text:
        return Text(mask_env_text(self.value), no_wrap=True, overflow="ignore", end="")
