"""Who the console is on SSH: its client keys, its user, and the known_hosts file it keeps
apart from the user's own (read from ``[ssh]``, with the emulator's or gcloud's defaults)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import asyncssh

from console.config import SshConfig, default_state_dir


def load_keys(
    keys: Sequence[str | os.PathLike[str] | asyncssh.SSHKey],
) -> list[asyncssh.SSHKey]:
    loaded: list[asyncssh.SSHKey] = []
    for k in keys:
        if isinstance(k, asyncssh.SSHKey):
            loaded.append(k)
            continue
        path = os.path.expanduser(os.fspath(k))
        try:
            loaded.append(asyncssh.read_private_key(path))
        except FileNotFoundError:
            raise ValueError(f"ssh.key = {path!r}: file not found") from None
        except (asyncssh.KeyImportError, ValueError) as exc:
            raise ValueError(f"ssh.key = {path!r}: not a usable private key ({exc})") from None
    if not loaded:
        raise ValueError("ssh.key: no client key given")
    return loaded


def describe_keys(keys: Sequence[asyncssh.SSHKey]) -> str:
    fps = [k.get_fingerprint("sha256") for k in keys]
    return "key " + ", ".join(fps)


def ssh_identity(ssh: SshConfig, default: tuple[str, Path] | None = None) -> tuple[str, Path]:
    """(user, private key path) from ``[ssh]``, else ``default`` (the emulator's user and
    key), else $USER and gcloud's ``~/.ssh/google_compute_engine``."""
    if default is not None:
        user, key = default
    else:
        user = os.environ.get("USER", "") or "root"
        key = Path("~/.ssh/google_compute_engine").expanduser()
    if ssh.user:
        user = ssh.user
    if ssh.key:
        key = Path(ssh.key).expanduser()
    return user, key


def known_hosts_path(ssh: SshConfig, state_dir: Path | None = None) -> Path:
    """``ssh.known_hosts`` or ``<state dir>/known_hosts`` (never ~/.ssh/known_hosts: the
    console rewrites entries of recreated VMs and must not touch the user's own file)."""
    if ssh.known_hosts:
        return Path(ssh.known_hosts).expanduser()
    return (state_dir or default_state_dir()) / "known_hosts"


__all__ = ["describe_keys", "known_hosts_path", "load_keys", "ssh_identity"]
