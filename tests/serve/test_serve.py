"""`phantom serve`: the console in a browser through textual-serve.

Bad input first (no browser needed): a non-loopback bind without a token, a port in use;
each exit 2 with the fix named and nothing left listening. Then Debian's chromium, driven by
Playwright, opens the page on a pod emulator and receives the Overview's hosts over the
page's websocket (xterm.js draws them on a canvas, so the frames are where the text is);
with a token, the page without it is refused. Skipped with the reason where chromium or
playwright is absent (`.ci/run` installs both)."""

from __future__ import annotations

import asyncio
import os
import queue
import re
import shlex
import shutil
import socket
import subprocess
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from emulators.tpu_pod.client import PodInfo
from tests.support.fixtures_pod import free_port
from tests.support.fleet_pods import two_pods
from tests.support.waiting import wait_until
from tests.support.watcher import phantom_argv, watch_env, write_config

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
TOKEN = "serve-token-0123456789abcdef"


class Served:
    """A `phantom serve` process; ``url`` once it listens."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(argv, env=env, stderr=subprocess.PIPE, text=True)
        self.err: list[str] = []
        self._lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.err.append(line)
            self._lines.put(line)
        self._lines.put(None)

    def url(self, timeout_s: float = 60.0) -> str:
        while True:
            line = self._lines.get(timeout=timeout_s)
            assert line is not None, "".join(self.err)[-3000:]
            if "the console on " in line:
                return line.split("the console on ", 1)[1].strip()

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            return self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(30)


@pytest.fixture
def served() -> Iterator[list[Served]]:
    made: list[Served] = []
    yield made
    for s in made:
        s.stop()


def test_a_non_local_bind_needs_a_token(tmp_path: Path) -> None:
    env = watch_env(tmp_path)
    proc = subprocess.run(
        phantom_argv("serve", "--bind", "0.0.0.0:0"),
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "is not a loopback address" in proc.stderr and "PHANTOM_SERVE_TOKEN" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_port_in_use_is_exit_2(tmp_path: Path) -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        proc = subprocess.run(
            phantom_argv("serve", "--bind", f"127.0.0.1:{port}"),
            env=watch_env(tmp_path),
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert proc.returncode == 2
    assert "cannot listen there" in proc.stderr and "address already in use" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_with_a_token_the_page_needs_it(tmp_path: Path, served: list[Served]) -> None:
    env = watch_env(tmp_path, PHANTOM_SERVE_TOKEN=TOKEN)
    s = Served(phantom_argv("serve", "--bind", f"127.0.0.1:{free_port()}"), env)
    served.append(s)
    url = s.url()
    with pytest.raises(urllib.error.HTTPError) as exc:
        urllib.request.urlopen(url, timeout=10)
    assert exc.value.code == 401
    with urllib.request.urlopen(f"{url}?token={TOKEN}", timeout=10) as resp:
        assert resp.status == 200
        assert "phantom_serve_token=" in resp.headers.get("Set-Cookie", "")
    assert s.stop() == 0


def test_chromium_opens_the_console_and_sees_the_overview_hosts(
    pod: PodInfo, tmp_path: Path, served: list[Served]
) -> None:
    sync_api = pytest.importorskip(
        "playwright.sync_api", reason="playwright is not installed (pip install -e '.[dev]')"
    )
    if not Path(CHROMIUM).exists():
        pytest.skip("chromium is not installed (apt-get install -y chromium; .ci/run does)")
    config = write_config(pod, tmp_path)
    s = Served(
        phantom_argv("--config", str(config), "serve", "--bind", f"127.0.0.1:{free_port()}"),
        watch_env(tmp_path),
    )
    served.append(s)
    url = s.url()
    ips = [h.ip for h in pod.hosts]
    screen: list[str] = []

    def shows_hosts(payload: str | bytes) -> bool:
        screen.append(payload if isinstance(payload, str) else payload.decode("utf-8", "replace"))
        text = "".join(screen)
        return all(ip in text for ip in ips) and "READY" in text

    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            with page.expect_websocket(timeout=60_000) as opened:
                page.goto(url)
            ws = opened.value
            assert page.locator(".textual-terminal").count() == 1
            try:  # the console's frames until one shows every host READY
                ws.wait_for_event("framereceived", predicate=shows_hosts, timeout=180_000)
            except sync_api.TimeoutError:
                pytest.fail(f"hosts {ips} not on screen; got {''.join(screen)[-2000:]!r}")
        finally:
            browser.close()
    assert s.stop() == 0
    # Each tab's console ended with its session: none is left running on this config.
    wait_until(lambda: not _running_with(str(config)), 30, "the tab's console to exit")


def _running_with(needle: str) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if needle in cmdline and "console.cli" in cmdline:
            pids.append(int(entry.name))
    return pids


def test_each_tab_opens_the_same_cluster_of_a_fleet() -> None:
    from console.serve.main import tui_command

    argv = shlex.split(tui_command("fleet.toml", "pod-b"))
    assert argv[-4:] == ["--config", os.path.abspath("fleet.toml"), "--cluster", "pod-b"]
    assert "--cluster" not in shlex.split(tui_command("fleet.toml"))


ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07]*\x07|\x1b[()][0-9A-B]|\x1b[=>]")


def test_a_tab_over_a_fleet_shows_one_cluster_the_tuis_way_and_switches(
    tmp_path: Path, served: list[Served]
) -> None:
    """Without --cluster, a tab is the console over the fleet as the pane is: the Fleet
    screen first, one cluster shown (the first, marked and named on the top line, the
    other screens its own), and `C` moves the tab to the next cluster; a second tab is a
    console of its own, still on the first. Read from the page's websocket as the browser
    reads it (textual-serve's frames: the terminal's bytes)."""
    aiohttp = pytest.importorskip("aiohttp")
    with two_pods(tmp_path) as fleet:
        s = Served(
            phantom_argv(
                "--config", str(fleet.config), "serve", "--bind", f"127.0.0.1:{free_port()}"
            ),
            watch_env(tmp_path),
        )
        served.append(s)
        ws_url = s.url().replace("http://", "ws://") + "ws?width=160&height=40"

        async def until(ws: Any, shown: Callable[[str], bool], what: str) -> str:
            text = ""
            while not shown(text):
                msg = await ws.receive(timeout=120)
                assert msg.type == aiohttp.WSMsgType.BINARY, f"{what}: {msg.type}; {text[-2000:]!r}"
                text += ANSI.sub("", msg.data.decode("utf-8", "replace"))
            return text

        def top(name: str) -> Callable[[str], bool]:
            return lambda text: f"{name} · TPU VM pod + Ray" in text

        async def tabs() -> None:
            async with (
                aiohttp.ClientSession() as session,
                session.ws_connect(ws_url) as first,
            ):
                text = await until(
                    first,
                    lambda t: top("pod-a")(t) and "2 whole" in t and "▸ pod-a" in t,
                    "the Fleet screen, pod-a shown, both pods polled",
                )
                assert "CLUSTER" in text and "pod-b" in text and "pod-b ·" not in text
                await first.send_json(["stdin", "C"])
                await until(first, top("pod-b"), "C: pod-b shown")
                async with session.ws_connect(ws_url) as second:
                    await until(second, top("pod-a"), "a second tab of its own, on pod-a")

        asyncio.run(tabs())
        assert s.stop() == 0
        wait_until(lambda: not _running_with(str(fleet.config)), 30, "the tabs' consoles to exit")
