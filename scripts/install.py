"""Install packages into a virtualenv with uv, as pip is configured; pip where uv fails.

    VENV/bin/python scripts/install.py [--quiet] PACKAGE-OR-REQUIREMENT ...

`make setup` (and CI's clean clone) spends most of its time in pip: three minutes for the
project's own environment and a minute and a half for xpk's, mostly one download at a time.
uv resolves and fetches in parallel (about a minute and ten seconds for both, measured on a
clean clone of this 2-core machine). uv does not read pip's configuration, and the project
must install from the same places pip would (a machine's wheel directory, its constraints
such as a torch build on disk, its extra indexes), so this reads ``pip config list`` (files
and ``PIP_*`` variables alike) and hands the same settings to uv. ``unsafe-best-match``
makes uv pick across indexes the way pip does (the best version wherever it lies), not the
first index that has the name.

Anything that goes wrong on uv's side (uv not installable, a setting it does not take, a
resolution it refuses) falls back to ``pip install`` with the same arguments, saying so.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys

# pip's setting -> uv's flag; a setting pip holds as a space-separated list repeats it.
FLAGS = {
    "index-url": "--index-url",
    "extra-index-url": "--extra-index-url",
    "find-links": "--find-links",
    "constraint": "--constraint",
}


def pip_settings(python: str) -> dict[str, list[str]]:
    """``pip config list`` as {setting: values}; ``PIP_*`` variables win over files."""
    out = subprocess.run(
        [python, "-m", "pip", "config", "list"], capture_output=True, text=True, check=False
    ).stdout
    files: dict[str, list[str]] = {}
    env: dict[str, list[str]] = {}
    for line in out.splitlines():
        key, sep, raw = line.partition("=")
        if not sep:
            continue
        where, _, name = key.rpartition(".")
        try:
            values = shlex.split(raw)  # pip prints the value quoted
        except ValueError:
            continue
        words = [w for v in values for w in v.split()]
        (env if where == ":env:" else files)[name] = words
    return {**files, **env}


def uv_command(python: str, settings: dict[str, list[str]], args: list[str]) -> list[str]:
    cmd = [python, "-m", "uv", "pip", "install", "--python", python]
    cmd += ["--index-strategy", "unsafe-best-match"]
    # pip writes every module's bytecode at install; uv only when asked. Without it, a
    # shell with PYTHONDONTWRITEBYTECODE=1 (this machine's) compiles torch, ray and jax
    # again in every Python process a test starts.
    cmd += ["--compile-bytecode"]
    for name, flag in FLAGS.items():
        for value in settings.get(name, []):
            cmd += [flag, value]
    return cmd + args


def main(argv: list[str]) -> int:
    python = sys.executable
    quiet = "--quiet" in argv
    args = [a for a in argv if a != "--quiet"]
    if not args:
        print("usage: python scripts/install.py [--quiet] PACKAGE ...", file=sys.stderr)
        return 2
    settings = pip_settings(python)
    env = dict(os.environ)
    cert = settings.get("cert")
    if cert and "SSL_CERT_FILE" not in env:
        env["SSL_CERT_FILE"] = cert[0]
    timeout = settings.get("default-timeout") or settings.get("timeout")
    if timeout and "UV_HTTP_TIMEOUT" not in env:
        env["UV_HTTP_TIMEOUT"] = timeout[0]
    pip = [python, "-m", "pip", "install", *(["--quiet"] if quiet else []), *args]
    got_uv = subprocess.run(
        [python, "-m", "pip", "install", "--quiet", "uv"], check=False, env=env
    ).returncode
    if got_uv == 0:
        cmd = uv_command(python, settings, [*(["--quiet"] if quiet else []), *args])
        if subprocess.run(cmd, check=False, env=env).returncode == 0:
            return 0
        print("note: uv could not install this; installing with pip instead", file=sys.stderr)
    else:
        print("note: uv is not installable here; installing with pip", file=sys.stderr)
    return subprocess.run(pip, check=False, env=env).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
