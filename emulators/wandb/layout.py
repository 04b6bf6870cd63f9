"""Names, defaults and the run-directory layout of the W&B emulator (stdlib only)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

# The accepted API key is read from this variable (of `up`'s environment) and handed to
# the daemon in its environment, never on its command line. Unset: `up` makes one and
# keeps it in ``api_key`` (mode 0600) in the run dir.
API_KEY_ENV = "PHANTOM_WANDB_API_KEY"
DAEMON_KEY_ENV = "_PHANTOM_WANDB_ACCEPTED_KEY"
USER = "phantom"  # the viewer: W&B's default entity is the user's own
SERVER_VERSION = "0.76.0"  # a W&B Server release new enough for every wandb 0.31 feature


def default_run_dir() -> Path:
    state_home = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state_home) / "phantom" / "wandb"


@dataclass(frozen=True)
class RunLayout:
    """Where everything of one emulated W&B server lives."""

    run_dir: Path

    @property
    def log_file(self) -> Path:
        return self.run_dir / "daemon.log"

    @property
    def pid_file(self) -> Path:
        return self.run_dir / "daemon.pid"

    @property
    def info_file(self) -> Path:
        """Written by the daemon once it listens: pid, port, base URL."""
        return self.run_dir / "server.json"

    @property
    def state_file(self) -> Path:
        """Projects, runs, history, sweeps: survives a restart of the emulator."""
        return self.run_dir / "state.json"

    @property
    def key_file(self) -> Path:
        return self.run_dir / "api_key"

    @property
    def files_dir(self) -> Path:
        """Uploaded run files, as the object store behind CreateRunFiles' upload URLs."""
        return self.run_dir / "files"
