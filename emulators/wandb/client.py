"""Thin client of the W&B emulator daemon (stdlib only): start, status, stop.

``start`` spawns ``python -m emulators.wandb serve`` detached for a run dir, hands it the
accepted API key in its environment and waits until it answers; ``status`` reads its
``/_phantom/status``; ``stop`` sends SIGTERM (SIGKILL after a timeout) to that daemon only.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import sys
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from emulators.kit import control
from emulators.kit.layout import absolute, read_pid
from emulators.wandb import layout as L


class WandbEmuError(Exception):
    """An emulator operation failed; ``exit_code`` is what the CLI returns."""

    exit_code = 1


class WandbEmuUsageError(WandbEmuError):
    exit_code = 2


@dataclass(frozen=True)
class WandbInfo:
    run_dir: Path
    pid: int
    port: int
    base_url: str  # WANDB_BASE_URL for the SDK and CLI
    key_env: str  # the variable the accepted key was read from ("" if generated)
    key_file: Path | None  # where a generated key is kept (mode 0600)
    runs: int = 0
    sweeps: int = 0

    def client_env(self, api_key: str) -> dict[str, str]:
        """What a wandb process needs to talk to this emulator (and nothing else)."""
        return {"WANDB_BASE_URL": self.base_url, "WANDB_API_KEY": api_key}


# The server is on loopback: never send its status request through an HTTP(S)_PROXY.
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _layout(run_dir: Path | str | None) -> L.RunLayout:
    return L.RunLayout(absolute(run_dir or L.default_run_dir()))


def _read_info(layout: L.RunLayout) -> dict[str, Any] | None:
    try:
        data: dict[str, Any] = json.loads(layout.info_file.read_text())
    except (OSError, ValueError):
        return None
    return data


def _get_status(base_url: str, timeout: float = 2.0) -> dict[str, Any] | None:
    try:
        with _DIRECT.open(f"{base_url}/_phantom/status", timeout=timeout) as resp:
            data: dict[str, Any] = json.loads(resp.read())
            return data
    except (OSError, ValueError):
        return None


def _key_source(layout: L.RunLayout) -> tuple[str, str, Path | None]:
    """(key env name, origin, key file): never returns where a key was printed."""
    meta = layout.run_dir / "key_source"
    try:
        name = meta.read_text().strip()
    except OSError:
        name = ""
    return name, "", (layout.key_file if not name else None)


def status(run_dir: Path | str | None = None) -> WandbInfo | None:
    """The running emulator, or None if none runs for ``run_dir``."""
    layout = _layout(run_dir)
    info = _read_info(layout)
    if info is None or not control.pid_alive(int(info["pid"])):
        return None
    live = _get_status(str(info["base_url"]))
    if live is None:
        return None
    key_env, _, key_file = _key_source(layout)
    return WandbInfo(
        run_dir=layout.run_dir,
        pid=int(live["pid"]),
        port=int(live["port"]),
        base_url=str(live["base_url"]),
        key_env=key_env,
        key_file=key_file,
        runs=int(live.get("runs", 0)),
        sweeps=int(live.get("sweeps", 0)),
    )


def status_json(run_dir: Path | str | None = None) -> dict[str, Any] | None:
    info = status(run_dir)
    if info is None:
        return None
    live = _get_status(info.base_url) or {}
    live["api_key_env"] = info.key_env or None
    live["api_key_file"] = str(info.key_file) if info.key_file else None
    return live


def _accepted_key(layout: L.RunLayout, key_env: str, environ: Mapping[str, str]) -> str:
    key = environ.get(key_env, "")
    meta = layout.run_dir / "key_source"
    if key:
        meta.write_text(key_env + "\n")
        return key
    meta.write_text("")
    try:
        existing = layout.key_file.read_text().strip()
    except OSError:
        existing = ""
    if existing:
        return existing
    key = secrets.token_hex(20)  # 40 characters, the length of a W&B API key
    fd = os.open(layout.key_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(key + "\n")
    return key


def start(
    run_dir: Path | str | None = None,
    port: int = 0,
    key_env: str = L.API_KEY_ENV,
    timeout: float = 30.0,
    environ: Mapping[str, str] | None = None,
    progress: Callable[[str], None] | None = None,
    extra_args: list[str] | None = None,
) -> WandbInfo:
    """Spawn the server detached and wait until it answers.

    The accepted API key is read from ``key_env`` in ``environ`` (default: this process's
    environment); when unset, a key is generated once into ``run_dir/api_key``.
    ``extra_args`` are server flags (``--crash-after S``, ``--agent-timeout S``).
    """
    if not 0 <= port <= 65535:
        raise WandbEmuUsageError(f"--port must be 0..65535, got {port}")
    env_in = dict(os.environ if environ is None else environ)
    layout = _layout(run_dir)
    running = status(layout.run_dir)
    if running is not None:
        raise WandbEmuError(
            f"the W&B emulator is already running for {layout.run_dir} "
            f"(pid {running.pid}, {running.base_url}); use `status` or `down`"
        )
    layout.run_dir.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(OSError):
        layout.info_file.unlink()
    key = _accepted_key(layout, key_env, env_in)
    argv = [
        sys.executable,
        "-m",
        "emulators.wandb",
        "serve",
        "--run-dir",
        str(layout.run_dir),
        "--port",
        str(port),
        *(extra_args or []),
    ]
    env = {k: v for k, v in env_in.items() if k != key_env}
    env[L.DAEMON_KEY_ENV] = key
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(Path(__file__).resolve().parents[2]), env_in.get("PYTHONPATH")) if p
    )
    proc = control.spawn(argv, layout, env)

    def exited(returncode: int) -> WandbEmuError:
        code = WandbEmuUsageError if returncode == 2 else WandbEmuError
        error = control.daemon_error(layout, show=3, silent="the daemon exited without a message")
        return code(f"the W&B emulator failed to start: {error}")

    def timed_out() -> WandbEmuError:
        stop(layout.run_dir)
        return WandbEmuError(
            f"the W&B emulator did not answer within {timeout:.0f}s; see {layout.log_file}"
        )

    info = control.wait_up(proc, lambda: status(layout.run_dir), timeout, exited, timed_out)
    if progress is not None:
        progress(f"W&B emulator ready at {info.base_url}")
    return info


def stop(run_dir: Path | str | None = None, timeout: float = 15.0) -> bool:
    """Stop the daemon of ``run_dir`` (its state is saved first). True if one was running."""
    layout = _layout(run_dir)
    info = _read_info(layout)
    pid = read_pid(layout.pid_file)
    if pid is None:
        pid = int(info["pid"]) if info else 0
    if not pid or not control.pid_alive(pid):
        return False
    if not control.is_our_daemon(pid, "emulators.wandb", layout.run_dir):
        return False
    control.terminate(pid, timeout)
    return True


def pid_alive(pid: int) -> bool:
    return control.pid_alive(pid)
