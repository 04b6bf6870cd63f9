"""One scrubber for every output: journal, events, status, script lines and the TUI's logs.

A secret never reaches a screen, a log, the journal or stdout. Three rules, the same for
every front end:

1. the *value* of every environment variable whose name looks secret (``WANDB_API_KEY``,
   ``HF_TOKEN``, ``*_SECRET``, ``*PASSWORD*`` ...), plus the variables named explicitly (the
   configured W&B key variable), is replaced wherever it appears in text;
2. ``key=value`` / ``token: value`` / ``Authorization: Bearer ...`` pairs in free text have
   their value masked when it looks like a secret (quoted, or 6+ characters with a digit, or
   20+ characters), so a sentence such as "WANDB_API_KEY: do not inline it" stays readable;
3. a mapping entry whose key looks secret has its value masked, unless it is a ``$NAME``
   reference (a name, not a secret) or empty.

Host and public key fingerprints are not secrets (a changed host key is an event to show),
so ``host_key`` / ``public_key`` do not count as secret names.

Values are read from the environment lazily and refreshed at most once a second: a key
exported after the console started is still masked, and a 10k lines/s log pays for a few
substring checks per line, not for a scan of the environment.
"""

from __future__ import annotations

import math
import os
import re
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import asdict
from typing import Any

MASK = "••••••"
# Shorter values would garble unrelated text when replaced (a 2-char "key" matches anywhere).
MIN_SECRET_LEN = 6
_REFRESH_S = 1.0

_SECRET_WORDS = {"TOKEN", "SECRET", "PASSWORD", "PASSWD", "PASSPHRASE", "APIKEY", "CREDENTIAL"}
_SECRET_WORDS |= {w + "S" for w in _SECRET_WORDS}
_NOT_SECRET_BEFORE_KEY = {"HOST", "PUBLIC", "PUB", "SORT", "PRIMARY", "PARTITION"}
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_INLINE = re.compile(
    r"(?i)\b((?:[A-Z0-9_]*_)?(?:api[_-]?key|token|secret|password|passwd|auth)\s*[=:]\s*)"
    r"(\"[^\"]*\"|'[^']*'|[^\s,;&\"'}]+)"
)
_BEARER = re.compile(r"(?i)\b(bearer\s+)[A-Za-z0-9._~+/=-]{8,}")
# Hugging Face user access tokens have a recognisable shape even when no variable holds them.
_HF_TOKEN = re.compile(r"\bhf_[A-Za-z0-9]{30,}\b")


def _mask_inline(m: re.Match[str]) -> str:
    value = m.group(2)
    quoted = value[:1] in "\"'" and len(value) > 2
    secretish = len(value) >= 20 or (
        len(value) >= MIN_SECRET_LEN and any(c.isdigit() for c in value)
    )
    return m.group(1) + MASK if quoted or secretish else m.group(0)


def is_secret_name(name: str) -> bool:
    """Whether a variable or data key names a secret: ``WANDB_API_KEY``, ``HF_TOKEN``,
    ``token``, ``dbPassword``, ``private_key``... but not ``host_key`` or ``public_key``."""
    parts = [p for p in re.split(r"[^A-Za-z0-9]+", _CAMEL.sub("_", name).upper()) if p]
    for i, part in enumerate(parts):
        if part in _SECRET_WORDS:
            return True
        if part == "KEY" and (i == 0 or parts[i - 1] not in _NOT_SECRET_BEFORE_KEY):
            return True
        if part == "API" and i + 1 < len(parts) and parts[i + 1] == "KEY":
            return True
    return False


def mask_env(env: Mapping[str, str]) -> dict[str, str]:
    """A copy of ``env`` safe to show: secret-looking values masked, ``$NAME`` kept."""
    return {
        k: (MASK if is_secret_name(k) and v and not str(v).startswith("$") else v)
        for k, v in env.items()
    }


class Scrubber:
    """Masks secrets in text and in JSON-able data (see the module docstring).

    ``names``: extra variable names whose values are secret whatever they are called (the
    configured W&B key variable, an HF token variable). ``environ``: the environment to read
    (tests pass a dict); by default ``os.environ``, re-read at most once a second.
    """

    def __init__(self, names: Iterable[str] = (), environ: Mapping[str, str] | None = None) -> None:
        self._names = frozenset({"WANDB_API_KEY", "HF_TOKEN", *names})
        self._environ = environ
        self._lock = threading.Lock()
        self._values: tuple[str, ...] = ()
        self._read_at = -math.inf

    def values(self) -> tuple[str, ...]:
        """The secret values to mask now, longest first (a secret containing another is
        masked whole)."""
        now = time.monotonic()
        if now - self._read_at < _REFRESH_S:
            return self._values
        env = os.environ if self._environ is None else self._environ
        found = {
            v
            for k, v in env.items()
            if (k in self._names or is_secret_name(k)) and len(v) >= MIN_SECRET_LEN
        }
        with self._lock:
            self._values = tuple(sorted(found, key=len, reverse=True))
            self._read_at = now
        return self._values

    def text(self, value: str) -> str:
        for secret in self.values():
            if secret in value:
                value = value.replace(secret, MASK)
        if "=" in value or ":" in value:
            value = _INLINE.sub(_mask_inline, value)
        value = _BEARER.sub(lambda m: m.group(1) + MASK, value)
        if "hf_" in value:
            value = _HF_TOKEN.sub(MASK, value)
        return value

    def data(self, value: Any) -> Any:
        """A JSON-able copy of ``value`` (dataclasses, mappings, sequences) with secrets
        masked; non-finite floats become None (JSON has no inf/nan)."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, Mapping):
            out: dict[str, Any] = {}
            for k, v in value.items():
                key = str(k)
                secret = is_secret_name(key) and v not in (None, "")
                if secret and not (isinstance(v, str) and (v.startswith("$") or v == MASK)):
                    out[key] = MASK
                else:
                    out[key] = self.data(v)
            return out
        if isinstance(value, list | tuple | set | frozenset):
            return [self.data(v) for v in value]
        if hasattr(value, "__dataclass_fields__") and not isinstance(value, type):
            return self.data(asdict(value))
        if isinstance(value, float) and not math.isfinite(value):
            return None
        if value is None or isinstance(value, bool | int | float):
            return value
        return self.text(str(value))

    __call__ = data
