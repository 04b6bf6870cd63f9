"""W&B emulator fixtures: one server per test module, and a clean wandb client environment.

Every wandb process a test starts gets its own HOME / WANDB_DIR / WANDB_CONFIG_DIR /
caches under tmp (so no ~/.netrc or ~/.config/wandb of the user is read or written),
WANDB_BASE_URL on 127.0.0.1, and HTTP(S)_PROXY pointing at a loopback trap: a request
for any host other than loopback goes to the trap, which refuses it and records the
host, and the tests assert the trap saw nothing.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from emulators.wandb import client

API_KEY = "x" * 40  # a fake key of the real length; the emulator is told to accept it
WRONG_KEY = "y" * 40
VENV_BIN = Path(sys.executable).parent


@dataclass
class ProxyTrap:
    """A loopback 'proxy' that refuses everything and remembers what was asked for."""

    port: int
    seen: list[str] = field(default_factory=list)
    _sock: socket.socket | None = None

    @classmethod
    def start(cls) -> ProxyTrap:
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)
        trap = cls(sock.getsockname()[1], [], sock)
        threading.Thread(target=trap._serve, daemon=True).start()
        return trap

    def _serve(self) -> None:
        assert self._sock is not None
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            with conn:
                conn.settimeout(2)
                try:
                    first = conn.recv(4096).split(b"\r\n", 1)[0].decode(errors="replace")
                except OSError:
                    first = "?"
                self.seen.append(first)
                conn.sendall(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()


@dataclass
class WandbEmu:
    info: client.WandbInfo
    trap: ProxyTrap

    @property
    def base_url(self) -> str:
        return self.info.base_url

    def env(self, home: Path, api_key: str = API_KEY, silent: bool = True) -> dict[str, str]:
        """A wandb client environment that can only reach this emulator."""
        base = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("WANDB_", "HTTP", "http", "NO_PROXY", "no_proxy"))
        }
        for sub in ("wandb", "config", "cache", "data", "artifacts"):
            (home / sub).mkdir(parents=True, exist_ok=True)
        proxy = f"http://127.0.0.1:{self.trap.port}"
        base.update(
            {
                "HOME": str(home),
                "XDG_CONFIG_HOME": str(home / "config"),
                "XDG_CACHE_HOME": str(home / "cache"),
                "WANDB_DIR": str(home / "wandb"),
                "WANDB_CONFIG_DIR": str(home / "config"),
                "WANDB_CACHE_DIR": str(home / "cache"),
                "WANDB_DATA_DIR": str(home / "data"),
                "WANDB_ARTIFACT_DIR": str(home / "artifacts"),
                "WANDB_BASE_URL": self.base_url,
                "WANDB_API_KEY": api_key,
                "WANDB_MODE": "online",
                "WANDB_ERROR_REPORTING": "false",
                "HTTP_PROXY": proxy,
                "HTTPS_PROXY": proxy,
                "http_proxy": proxy,
                "https_proxy": proxy,
                "NO_PROXY": "127.0.0.1,localhost",
                "no_proxy": "127.0.0.1,localhost",
                "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}",
            }
        )
        if silent:
            base["WANDB_SILENT"] = "true"
        else:
            base.pop("WANDB_SILENT", None)
        return base

    def graphql(self, query: str, variables: dict[str, Any] | None = None) -> dict[str, Any]:
        """Ask the emulator directly (what the SDK would send), with the right key."""
        token = base64.b64encode(f"api:{API_KEY}".encode()).decode()
        req = urllib.request.Request(
            f"{self.base_url}/graphql",
            data=json.dumps({"query": query, "variables": variables or {}}).encode(),
            headers={"Content-Type": "application/json", "Authorization": f"Basic {token}"},
        )
        direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with direct.open(req, timeout=10) as resp:
            data: dict[str, Any] = json.loads(resp.read())["data"]
            return data


def set_delay(base_url: str, key: str, seconds: float) -> None:
    """The emulator holds every later GraphQL and file-stream answer ``seconds``: a slow
    W&B server (its control request, with the API key like the API itself)."""
    token = base64.b64encode(f"api:{key}".encode()).decode()
    req = urllib.request.Request(
        f"{base_url}/_phantom/delay",
        data=json.dumps({"seconds": seconds}).encode(),
        headers={"Content-Type": "application/json", "Authorization": f"Basic {token}"},
    )
    direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with direct.open(req, timeout=10) as resp:
        assert json.loads(resp.read()) == {"delay_s": seconds}


def start_emulator(run_dir: Path) -> client.WandbInfo:
    try:
        return client.start(run_dir, environ={**os.environ, "PHANTOM_WANDB_API_KEY": API_KEY})
    except BaseException:
        client.stop(run_dir)
        raise


def stop_emulator(run_dir: Path, info: client.WandbInfo) -> None:
    client.stop(run_dir)
    assert not client.pid_alive(info.pid), f"the W&B emulator (pid {info.pid}) survived `down`"


@pytest.fixture(scope="module")
def wandb_emu(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WandbEmu]:
    """One W&B emulator shared by a module's tests; stopped also when a test fails."""
    run_dir = tmp_path_factory.mktemp("wandb-emu")
    info = start_emulator(run_dir)
    trap = ProxyTrap.start()
    try:
        yield WandbEmu(info, trap)
    finally:
        trap.close()
        stop_emulator(run_dir, info)


def run_client(
    argv: list[str], env: dict[str, str], cwd: Path, timeout: float = 120.0
) -> subprocess.CompletedProcess[str]:
    """Run a wandb client in its own process group; the group is killed if it overruns."""
    proc = subprocess.Popen(
        argv,
        env=env,
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_group(proc)
        out, err = proc.communicate()
        raise AssertionError(f"{argv} did not finish in {timeout}s:\n{out}\n{err}") from None
    finally:
        kill_group(proc)  # wandb-core or agent children left behind
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def kill_group(proc: subprocess.Popen[Any]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
