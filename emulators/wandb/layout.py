"""Names, defaults and the run-directory layout of the W&B emulator (stdlib only)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from emulators.kit.layout import DaemonLayout
from emulators.kit.layout import default_run_dir as _kit_run_dir

# The accepted API key is read from this variable (of `up`'s environment) and handed to
# the daemon in its environment, never on its command line. Unset: `up` makes one and
# keeps it in ``api_key`` (mode 0600) in the run dir.
API_KEY_ENV = "PHANTOM_WANDB_API_KEY"
DAEMON_KEY_ENV = "_PHANTOM_WANDB_ACCEPTED_KEY"
USER = "phantom"  # the viewer: W&B's default entity is the user's own
SERVER_VERSION = "0.76.0"  # a W&B Server release new enough for every wandb 0.31 feature


def default_run_dir() -> Path:
    return _kit_run_dir("wandb")


@dataclass(frozen=True)
class RunLayout(DaemonLayout):
    """Where everything of one emulated W&B server lives (log and pid file from the kit).

    No control socket: the server's own HTTP ``/_phantom/status`` answers for it, and
    it is stopped by pid (SIGTERM saves its state first).
    """

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
