"""First frame of `phantom`: exec -> the first screen painted, in a real terminal.

    .venv/bin/python -m benchmarks.first_frame [--repeat 3]

`phantom` runs as a user starts it (``python -m console``, the product's defaults: no
config file, the state and the emulator's run dir under a throwaway ``$HOME``), on a
pseudo-terminal of 160x48, and the bench reads what it draws. Two kinds of start, each
``--repeat`` times:

* ``fresh``: no emulator runs; the console starts it behind the first frame;
* ``warm``: the pod is already up (``phantom pod up`` before the clock starts).

Measured per start: ``first_frame_s`` (exec -> the overview's title and host table header
on the terminal), ``hosts_s`` (exec -> the header says every host is READY), and which of ray / jax /
torch the process had mapped when the first frame arrived (``/proc/PID/maps``: their
native libraries are loaded by their import). Each start ends with `q`, and the emulator
with `phantom pod down`. Last line: one JSON object (medians).
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import pty
import re
import select
import shutil
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import termios
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
ANSI = re.compile(rb"\x1b\[[0-9;?<>=]*[ -/]*[@-~]|\x1b[()][0-9A-Za-z]|\x1b[=>78]")
# The overview's first frame: its tabs and the hosts table's header.
FIRST = (b"Overview", b"HOST ")
HOSTS = re.compile(rb"hosts ([1-9][0-9]*)/\1 ready")  # the header, once every host is READY
HEAVY = {"ray": "_raylet", "jax": "jaxlib", "torch": "libtorch"}


def _env(home: Path) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("XDG_", "PHANTOM_")) and k not in ("HOME", "COLUMNS", "LINES")
    }
    env.update(
        HOME=str(home),
        TERM="xterm-256color",
        NO_GCE_CHECK="True",
        RAY_USAGE_STATS_ENABLED="0",
        PYTHONPATH=str(ROOT),
    )
    return env


def _heavy_loaded(pid: int) -> list[str]:
    try:
        maps = Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return []
    return sorted(name for name, lib in HEAVY.items() if lib in maps)


def _screen_text(buf: bytes) -> bytes:
    return ANSI.sub(b"", buf)


def one_start(home: Path, timeout_s: float = 120.0) -> dict[str, Any]:
    env = _env(home)
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 48, 160, 0, 0))
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "console"],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        env=env,
        cwd=str(home),
        start_new_session=True,
        close_fds=True,
    )
    os.close(slave)
    buf = b""
    first = hosts = None
    heavy: list[str] = []
    try:
        while time.perf_counter() - t0 < timeout_s and hosts is None:
            ready, _, _ = select.select([master], [], [], 0.05)
            if not ready:
                if proc.poll() is not None:
                    raise RuntimeError(f"phantom exited {proc.returncode}: {_tail(buf)}")
                continue
            try:
                chunk = os.read(master, 1 << 16)
            except OSError:
                break
            buf += chunk
            text = _screen_text(buf)
            now = time.perf_counter() - t0
            if first is None and all(m in text for m in FIRST):
                first = now
                heavy = _heavy_loaded(proc.pid)
            if first is not None and HOSTS.search(text):
                hosts = now
        if first is None:
            raise RuntimeError(f"no first frame within {timeout_s:.0f}s: {_tail(buf)}")
        os.write(master, b"q")
        deadline = time.monotonic() + 30
        while proc.poll() is None and time.monotonic() < deadline:
            with contextlib.suppress(OSError):
                if select.select([master], [], [], 0.1)[0]:
                    os.read(master, 1 << 16)
    finally:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(10)
        os.close(master)
    return {"first_frame_s": first, "hosts_s": hosts, "heavy": heavy}


def _tail(buf: bytes) -> str:
    return _screen_text(buf)[-600:].decode(errors="replace")


def _pod(home: Path, *args: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "console", "pod", *args],
        env=_env(home),
        cwd=str(home),
        capture_output=True,
        text=True,
        timeout=120,
    )
    if proc.returncode != 0 and args[0] != "down":
        raise RuntimeError(f"phantom pod {' '.join(args)}: {proc.stderr.strip()}")


def run(repeat: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kind in ("fresh", "warm"):
        samples = []
        for _ in range(repeat):
            home = Path(tempfile.mkdtemp(prefix="phantom-bench-first-frame-"))
            try:
                if kind == "warm":
                    _pod(home, "up")
                samples.append(one_start(home))
            finally:
                _pod(home, "down")
                shutil.rmtree(home, ignore_errors=True)
            print(f"{kind}: {samples[-1]}", file=sys.stderr, flush=True)
        firsts = [s["first_frame_s"] for s in samples]
        hosts = [s["hosts_s"] for s in samples if s["hosts_s"] is not None]
        out[kind] = {
            "first_frame_s": round(statistics.median(firsts), 3),
            "first_frame_samples_s": [round(x, 3) for x in firsts],
            "hosts_s": round(statistics.median(hosts), 3) if hosts else None,
            "heavy_before_first_frame": sorted({m for s in samples for m in s["heavy"]}),
        }
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bench_first_frame", description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3, help="starts of each kind (median)")
    args = ap.parse_args(argv)
    if args.repeat < 1:
        print("bench_first_frame: --repeat >= 1", file=sys.stderr)
        return 2
    print(json.dumps(run(args.repeat)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
