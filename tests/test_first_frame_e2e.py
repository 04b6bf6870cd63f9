"""`phantom` on a fresh machine, as a user starts it: a real terminal, the product's defaults.

No config, no emulator running, a throwaway $HOME: the console paints its first frame
before the pod exists (nothing of ray, jax or torch loaded by then), starts the emulator
behind it and shows the hosts come up until every one is READY; `q` leaves the pod running,
as the farewell says, and `phantom pod down` stops it.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from benchmarks.first_frame import _pod, _screen_text, one_start
from emulators.tpu_pod.client import pod_status


def test_fresh_start_paints_first_then_shows_the_pod_come_up(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    run_dir = home / ".local" / "state" / "phantom" / "pod"  # the product's default
    try:
        result = one_start(home, timeout_s=120.0)
        assert result["first_frame_s"] is not None
        assert result["heavy"] == [], f"loaded before the first frame: {result['heavy']}"
        assert result["hosts_s"] is not None, "the hosts never showed READY"
        assert result["hosts_s"] > result["first_frame_s"]
        info = pod_status(run_dir)
        assert info is not None and info.state == "READY", "the console did not start the pod"
        assert len(info.hosts) == 4
    finally:
        _pod(home, "down")
        shutil.rmtree(home, ignore_errors=True)
    assert pod_status(run_dir) is None


def test_screen_text_strips_terminal_controls() -> None:
    raw = b"\x1b[?1049h\x1b[1;1H\x1b[38;2;1;2;3mOverview\x1b[0m \x1b(B HOST \x1b="
    assert _screen_text(raw) == b"Overview  HOST "
