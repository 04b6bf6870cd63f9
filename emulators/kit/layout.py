"""The part of a run directory every emulator daemon has (stdlib only)."""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path


def default_run_dir(name: str) -> Path:
    """``$XDG_STATE_HOME/phantom/<name>`` (``~/.local/state`` when unset)."""
    state_home = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state_home) / "phantom" / name


def absolute(run_dir: Path | str) -> Path:
    return Path(run_dir).expanduser().absolute()


@dataclass(frozen=True)
class DaemonLayout:
    """A detached daemon's run dir: its log and its pid file."""

    run_dir: Path

    @property
    def log_file(self) -> Path:
        return self.run_dir / "daemon.log"

    @property
    def pid_file(self) -> Path:
        return self.run_dir / "daemon.pid"


@dataclass(frozen=True)
class ControlledLayout(DaemonLayout):
    """A daemon with a control socket whose child processes carry the run's marker."""

    # The abstract socket's name prefix, one per emulator ("phantom-pod", "phantom-gke").
    CONTROL_PREFIX = "phantom"

    @property
    def run_id_file(self) -> Path:
        """The run id every child's marker starts with: a later daemon sweeps them."""
        return self.run_dir / "run_id"

    @property
    def cgroup_file(self) -> Path:
        """Holds the run's cgroup directory while the daemon uses one."""
        return self.run_dir / "cgroup"

    @property
    def control_address(self) -> str:
        """Abstract unix socket name of the control channel.

        Abstract (leading NUL) so deep pytest tmp dirs never hit the 108-byte
        sun_path limit; derived from the resolved run dir so exactly one daemon
        can own a run dir.
        """
        digest = hashlib.sha256(str(self.run_dir.resolve()).encode()).hexdigest()[:24]
        return f"\0{self.CONTROL_PREFIX}-{digest}"


def read_text(path: Path) -> str:
    """The file's stripped text, "" when it is missing or unreadable."""
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def read_pid(path: Path) -> int | None:
    text = read_text(path)
    return int(text) if text.isdigit() else None


def read_path(path: Path) -> Path | None:
    """A path kept in a file (the run's cgroup), None when empty or missing."""
    text = read_text(path)
    return Path(text) if text else None
