"""A `phantom watch` process for tests and benchmarks: its config on an emulated pod, its
JSON lines read as they come (a reader thread and a queue: a wait is on the next line, never
a sleep), SIGTERM, and the guarantee it is gone afterwards."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from benchmarks.pods import pod_toml
from emulators.tpu_pod.client import PodInfo

Line = dict[str, Any]


def phantom_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "console.cli", *args]


def watch_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WANDB_", "PHANTOM_", "XDG_"))}
    env.update(
        {
            "RAY_USAGE_STATS_ENABLED": "0",
            "WANDB_MODE": "offline",
            "WANDB_SILENT": "true",
            "WANDB_DIR": str(tmp_path / "wandb"),
            "PHANTOM_NO_CONFIG_DISCOVERY": "1",
            "NO_GCE_CHECK": "True",
            "XDG_STATE_HOME": str(tmp_path / "state"),
            "XDG_CONFIG_HOME": str(tmp_path / "config"),
            "PYTHONUNBUFFERED": "1",
            **extra,
        }
    )
    return env


def state_dir(tmp_path: Path) -> Path:
    """The state dir the children use (the product's default under XDG_STATE_HOME)."""
    return tmp_path / "state" / "phantom"


def write_config(pod: PodInfo, tmp_path: Path, poll_s: float = 0.5, extra: str = "") -> Path:
    """A TOML config driving ``pod`` (free Ray ports, small nodes) for the children."""
    path = tmp_path / "phantom.toml"
    path.write_text(pod_toml(pod, tmp_path, poll_s, extra))
    return path


class Watcher:
    """``phantom --config CONFIG watch ARGS`` with its stdout lines on a queue."""

    def __init__(self, config: Path, env: dict[str, str], args: Sequence[str] = ()) -> None:
        self.proc = subprocess.Popen(
            phantom_argv("--config", str(config), "watch", *args),
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: list[Line] = []
        self._queue: queue.Queue[Line | None] = queue.Queue()
        self._stderr: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._read_err, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            try:
                line = json.loads(raw)
            except ValueError:
                line = {"type": "text", "text": raw.rstrip("\n")}
            self._queue.put(line)
        self._queue.put(None)

    def _read_err(self) -> None:
        assert self.proc.stderr is not None
        for raw in self.proc.stderr:
            self._stderr.append(raw)

    @property
    def stderr(self) -> str:
        return "".join(self._stderr)[-4000:]

    def wait_for(self, check: Callable[[Line], bool], timeout_s: float, what: str) -> Line:
        """The first line (from now on, or already read) that ``check`` accepts."""
        for line in self.lines:
            if check(line):
                return line
        while True:
            try:
                got = self._queue.get(timeout=timeout_s)
            except queue.Empty:
                raise AssertionError(
                    f"no line {what} within {timeout_s}s; stderr:\n{self.stderr}"
                ) from None
            if got is None:
                self._queue.put(None)
                raise AssertionError(
                    f"watch exited ({self.proc.wait()}) before a line {what}; stderr:\n"
                    f"{self.stderr}"
                )
            self.lines.append(got)
            if check(got):
                return got

    def event(self, kind: str, timeout_s: float, **match: Any) -> Line:
        return self.wait_for(
            lambda x: (
                x.get("type") == "event"
                and x.get("kind") == kind
                and all(x.get(k) == v for k, v in match.items())
            ),
            timeout_s,
            f"of kind {kind} {match or ''}",
        )

    def terminate(self, timeout_s: float = 120.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout_s)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)
