"""The GKE chaos drill's watchdog: the real `phantom watch` as a separate process (as in a
container), its JSON lines read as they come, SIGKILLed and started again as systemd would,
and its /metrics scraped before each death (a restarted watcher starts its counters again).

    w = Watcher(config_path, env); w.start(); w.wait_line(pred, 60, "what"); w.kill(); w.stop()
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# Series read from each watcher's /metrics (sums over its lifetime).
SERIES = ("phantom_preemptions_total", "phantom_recovery_seconds_count")


@dataclass
class Life:
    """One watcher process: its pid, when it started and ended, its metrics at the end."""

    pid: int
    started_at: float
    metrics_url: str = ""
    ended_at: float | None = None
    killed: bool = False
    exit_code: int | None = None
    counters: dict[str, float] = field(default_factory=dict)


class Watcher:
    def __init__(self, config: Path, env: dict[str, str]) -> None:
        self.config = config
        self.env = env
        self.lines: list[tuple[float, dict[str, Any]]] = []  # (arrival, line), every life
        self.lives: list[Life] = []
        self._lock = threading.Lock()
        self.proc: subprocess.Popen[str] | None = None
        self._eof = threading.Event()  # the current life's stdout ended

    # -- a life ---------------------------------------------------------------------------------
    def start(self, timeout_s: float = 180.0) -> Life:
        argv = [sys.executable, "-m", "console.cli", "--config", str(self.config), "watch"]
        self.proc = subprocess.Popen(
            [*argv, "--metrics", "127.0.0.1:0"],
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        life = Life(self.proc.pid, time.time())
        self.lives.append(life)
        mark = len(self.lines)
        self._eof = threading.Event()
        threading.Thread(target=self._read, args=(self.proc,), daemon=True).start()
        started = self.wait_line(
            lambda x: x.get("type") == "watch" and x.get("state") == "started",
            timeout_s,
            "the watcher's started line",
            since=mark,
        )
        life.metrics_url = str(started.get("metrics") or "")
        return life

    def _read(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        eof = self._eof
        with proc.stdout:  # closed at the life's end (each life has its own pipe)
            for raw in proc.stdout:
                try:
                    line = json.loads(raw)
                except json.JSONDecodeError:
                    continue
                with self._lock:
                    self.lines.append((time.time(), line))
        eof.set()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def scrape(self) -> dict[str, float]:
        life = self.lives[-1]
        if not life.metrics_url:
            return {}
        with urllib.request.urlopen(life.metrics_url, timeout=10) as resp:
            text = resp.read().decode()
        out = dict.fromkeys(SERIES, 0.0)
        for ln in text.splitlines():
            for name in SERIES:
                if ln.startswith(name + "{") or ln.startswith(name + " "):
                    out[name] += float(ln.rsplit(" ", 1)[1])
        return out

    def kill(self) -> None:
        """SIGKILL, its counters read the instant before (what Prometheus last scraped)."""
        assert self.proc is not None
        life = self.lives[-1]
        life.counters = self.scrape()
        self.proc.send_signal(signal.SIGKILL)
        life.exit_code = self.proc.wait(30)
        life.ended_at, life.killed = time.time(), True

    def stop(self) -> int | None:
        """SIGTERM (the watcher flushes its journal and exits 0)."""
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        life = self.lives[-1]
        life.counters = self.scrape()
        self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(120)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait(30)
        life.exit_code, life.ended_at = code, time.time()
        return code

    # -- its lines ------------------------------------------------------------------------------
    def snapshot(self, since: int = 0) -> list[dict[str, Any]]:
        with self._lock:
            return [ln for _, ln in self.lines[since:]]

    def rows(self) -> list[dict[str, Any]]:
        """The journal rows every life printed."""
        return [ln for ln in self.snapshot() if ln.get("type") == "event"]

    def wait_line(
        self,
        check: Callable[[dict[str, Any]], bool],
        timeout_s: float,
        what: str,
        since: int = 0,
    ) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        seen = since
        while True:
            lines = self.snapshot()
            for ln in lines[seen:]:
                if check(ln):
                    return ln
            seen = len(lines)
            if self._eof.is_set() and seen == len(self.snapshot()):  # it will say no more
                assert self.proc is not None
                raise RuntimeError(f"watch exited ({self.proc.returncode}) before {what}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"no {what} within {timeout_s:.0f}s")
            time.sleep(0.1)

    def open_incidents(self) -> list[str]:
        """Incidents a printed row belongs to whose summary (an ``incident`` row with its
        outcome) no life has printed yet."""
        opened: dict[str, None] = {}
        closed: set[str] = set()
        for ln in self.rows():
            iid = ln.get("incident") or ""
            if not iid:
                continue
            opened[iid] = None
            if ln.get("kind") == "incident" and (ln.get("data") or {}).get("outcome"):
                closed.add(iid)
        return [i for i in opened if i not in closed]


__all__ = ["SERIES", "Life", "Watcher"]
