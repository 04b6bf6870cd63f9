"""Strict SSH host-key checking for pod hosts, fed by the TPU API and/or a known_hosts file.

Three policies (``config.ssh.known_hosts_policy``):

``tpu-api``
    Trust the keys the TPU API publishes in the node's guest attributes (namespace
    ``hostkeys``), as ``gcloud compute tpus tpu-vm ssh`` does: the API is an authenticated
    channel to the VM's own report of its key. The known_hosts file is kept as a record
    and used only for hosts the API publishes nothing for. When a recreated VM offers a
    new key that the API now publishes, the file entry is replaced and a ``HostKeyEvent``
    is emitted; a key the API does not publish is refused.
``file``
    Only the known_hosts file. A changed key is refused with both fingerprints and how to
    trust the new one; an unknown host is refused too.
``accept-new``
    Trust on first use (OpenSSH ``StrictHostKeyChecking=accept-new``): an unknown host's
    key is recorded, a changed one is refused.

The check runs inside the SSH key exchange (``HostKeyClient.validate_host_public_key``),
before any authentication, so a refused host never sees a signature from our key.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import logging
import os
import tempfile
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import asyncssh

from console.services.errors import BackendError

if TYPE_CHECKING:
    from console.services.backends.tpu_vm.endpoints import HostEndpoint

log = logging.getLogger(__name__)

POLICIES = ("tpu-api", "file", "accept-new")
KeySource = Callable[[], Awaitable[Mapping[str, str]]]


@dataclass(frozen=True)
class HostKeyEvent:
    """A host key was recorded or replaced in known_hosts (journal-worthy)."""

    host: str
    ip: str
    kind: str  # "recorded" (first use / trust) or "replaced" (recreated VM, API-confirmed)
    source: str  # "tpu-api", "accept-new" or "trust"
    old_fingerprint: str
    new_fingerprint: str

    @property
    def message(self) -> str:
        if self.kind == "replaced":
            return (
                f"host key for {self.host} ({self.ip}) replaced: {self.old_fingerprint} -> "
                f"{self.new_fingerprint} (published by the {self.source})"
            )
        return f"host key for {self.host} ({self.ip}) recorded: {self.new_fingerprint}"


class HostKeyError(BackendError):
    """A host key was refused. ``str()`` is one line naming host, IP, fingerprints and the fix."""

    def __init__(self, message: str, *, host: str, ip: str) -> None:
        super().__init__(message)
        self.host = host
        self.ip = ip


class HostKeyMismatch(HostKeyError):
    def __init__(
        self, message: str, *, host: str, ip: str, known: Sequence[str], offered: str
    ) -> None:
        super().__init__(message, host=host, ip=ip)
        self.known_fingerprints = tuple(known)
        self.offered_fingerprint = offered


class UnknownHostKey(HostKeyError):
    pass


def fingerprint(key: asyncssh.SSHKey) -> str:
    return key.get_fingerprint("sha256")


def parse_public_keys(text: str) -> list[asyncssh.SSHKey]:
    """OpenSSH public key lines (``type base64 [comment]``) -> keys; bad lines are skipped."""
    keys: list[asyncssh.SSHKey] = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        try:
            key = asyncssh.import_public_key(line)
        except (asyncssh.KeyImportError, ValueError):
            log.warning("ignoring unparseable public key line %r", line[:40])
            continue
        if key not in keys:
            keys.append(key)
    return keys


def host_pattern(ip: str, port: int) -> str:
    """The known_hosts host field OpenSSH writes for this address."""
    return ip if port == 22 else f"[{ip}]:{port}"


def _pattern_matches(field: str, pattern: str) -> bool:
    for entry in field.split(","):
        if entry.startswith("|1|"):
            try:
                _, _, salt_b64, hash_b64 = entry.split("|", 3)
                salt = base64.b64decode(salt_b64)
                digest = hmac.new(salt, pattern.encode(), hashlib.sha1).digest()
                if hmac.compare_digest(digest, base64.b64decode(hash_b64)):
                    return True
            except (ValueError, TypeError):
                continue
        elif entry == pattern:
            return True
    return False


_Parsed = tuple[dict[str, list[asyncssh.SSHKey]], list[tuple[str, list[asyncssh.SSHKey]]]]


class KnownHostsFile:
    """A known_hosts file read and rewritten entry by entry (exact host patterns only).

    Wildcards, markers (``@revoked``/``@cert-authority``) and other hosts' lines are kept
    verbatim; hashed entries (``|1|salt|hash``) are matched.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path).expanduser()
        # Parsed once per (inode, mtime_ns, size): a 32-host fan-out looks hosts up 64 times.
        self._cache: tuple[tuple[int, int, int], _Parsed] | None = None

    def _lines(self) -> list[str]:
        try:
            return self.path.read_text(encoding="utf-8").splitlines()
        except FileNotFoundError:
            return []

    def keys_for(self, ip: str, port: int) -> list[asyncssh.SSHKey]:
        pattern = host_pattern(ip, port)
        try:
            st = self.path.stat()
            stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
        except FileNotFoundError:
            return []
        if self._cache is None or self._cache[0] != stamp:
            self._cache = (stamp, self._parse())
        exact, hashed = self._cache[1]
        keys = list(exact.get(pattern, []))
        for field, entry_keys in hashed:
            if _pattern_matches(field, pattern):
                keys += [k for k in entry_keys if k not in keys]
        return keys

    def _parse(self) -> _Parsed:
        """Exact host patterns -> keys, plus hashed fields checked per lookup."""
        exact: dict[str, list[asyncssh.SSHKey]] = {}
        hashed: list[tuple[str, list[asyncssh.SSHKey]]] = []
        for line in self._lines():
            parts = line.split()
            if len(parts) < 3 or parts[0].startswith(("#", "@")):
                continue
            keys = parse_public_keys(" ".join(parts[1:3]))
            if not keys:
                continue
            for entry in parts[0].split(","):
                if entry.startswith("|1|"):
                    hashed.append((entry, keys))
                else:
                    bucket = exact.setdefault(entry, [])
                    bucket += [k for k in keys if k not in bucket]
        return exact, hashed

    def replace(self, ip: str, port: int, keys: Sequence[asyncssh.SSHKey]) -> None:
        """Drop this host's entries and append ``keys``; atomic rewrite (no torn file)."""
        pattern = host_pattern(ip, port)
        kept = []
        for line in self._lines():
            parts = line.split()
            is_ours = (
                len(parts) >= 3
                and not parts[0].startswith(("#", "@"))
                and _pattern_matches(parts[0], pattern)
            )
            if not is_ours:
                kept.append(line)
        for key in keys:
            kept.append(f"{pattern} {key.export_public_key('openssh').decode().strip()}")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".known_hosts.")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write("\n".join(kept) + ("\n" if kept else ""))
            os.replace(tmp, self.path)
            self._cache = None
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise


class HostKeyPolicy:
    """Decides which host keys to trust for each pod host; shared by every SSH connection.

    ``api_keys`` is the TPU provider's ``host_keys`` coroutine (``{ip: "type base64\\n..."}``);
    it is cached for ``api_ttl_s`` and refreshed whenever a key is refused, so a recreated
    host is recognised on the first connection after it publishes its new key.
    ``on_event`` receives every ``HostKeyEvent`` (the facade journals them).
    """

    def __init__(
        self,
        policy: str = "tpu-api",
        known_hosts: str | os.PathLike[str] | None = None,
        *,
        api_keys: KeySource | None = None,
        on_event: Callable[[HostKeyEvent], None] | None = None,
        api_ttl_s: float = 60.0,
    ) -> None:
        if policy not in POLICIES:
            raise ValueError(
                f"ssh.known_hosts_policy = {policy!r}: allowed values are {', '.join(POLICIES)}"
            )
        if policy == "tpu-api" and api_keys is None and known_hosts is None:
            raise ValueError(
                "known_hosts_policy 'tpu-api' needs a TPU provider or a known_hosts file"
            )
        if policy in ("file", "accept-new") and known_hosts is None:
            raise ValueError(f"known_hosts_policy {policy!r} needs a known_hosts file path")
        self.policy = policy
        self.file = KnownHostsFile(known_hosts) if known_hosts is not None else None
        self._api_keys_fn = api_keys
        self._on_event = on_event
        self._api_ttl_s = api_ttl_s
        self._api: dict[str, list[asyncssh.SSHKey]] = {}
        self._api_at: float | None = None
        self._api_error = ""
        self._lock = asyncio.Lock()
        self.events: list[HostKeyEvent] = []

    @property
    def uses_api(self) -> bool:
        return self.policy == "tpu-api" and self._api_keys_fn is not None

    async def refresh_api(self, *, force: bool = False) -> None:
        """Re-read the keys the TPU API publishes (one call for all hosts, however many ask)."""
        if self._api_keys_fn is None:
            return
        asked_at = time.monotonic()
        async with self._lock:
            fresh = self._api_at is not None and (
                self._api_at >= asked_at or time.monotonic() - self._api_at < self._api_ttl_s
            )
            if fresh and not force:
                return
            if force and self._api_at is not None and self._api_at >= asked_at:
                return  # someone refreshed while we waited for the lock
            try:
                published = await self._api_keys_fn()
            except Exception as exc:  # polling errors are reported, never crash a fan-out
                self._api_error = f"{type(exc).__name__}: {exc}".splitlines()[0]
                log.warning("could not read host keys from the TPU API: %s", self._api_error)
                self._api_at = time.monotonic()
                return
            self._api = {ip: parse_public_keys(text) for ip, text in published.items()}
            self._api_error = ""
            self._api_at = time.monotonic()

    async def published(self, ep: HostEndpoint) -> list[asyncssh.SSHKey]:
        """The keys the TPU API publishes for this host now (fresh read; [] without an API)."""
        if self._api_keys_fn is None:
            return []
        await self.refresh_api(force=True)
        return list(self._api.get(ep.ip, []))

    def trusted(self, ep: HostEndpoint) -> tuple[list[asyncssh.SSHKey], str]:
        """The keys to accept now and where they come from ("tpu-api", "file" or "")."""
        if self.uses_api and self._api.get(ep.ip):
            return list(self._api[ep.ip]), "tpu-api"
        if self.file is not None:
            keys = self.file.keys_for(ep.ip, ep.port)
            if keys:
                return keys, "file"
        return [], ""

    def accepts(self, ep: HostEndpoint, key: asyncssh.SSHKey) -> bool:
        """Synchronous verdict used inside the key exchange."""
        trusted, _ = self.trusted(ep)
        if not trusted:
            return self.policy == "accept-new"
        return key in trusted

    async def prepare(self, ep: HostEndpoint) -> None:
        """Before connecting: make sure API keys were read at least once (cheap when cached)."""
        if self.uses_api:
            await self.refresh_api()

    async def reconsider(self, ep: HostEndpoint, offered: asyncssh.SSHKey) -> bool:
        """After a refusal: re-read the API; True if the offered key is now trusted."""
        if not self.uses_api:
            return False
        await self.refresh_api(force=True)
        return offered in self._api.get(ep.ip, [])

    def confirm(self, ep: HostEndpoint, key: asyncssh.SSHKey) -> HostKeyEvent | None:
        """After a successful handshake: keep known_hosts in step with what was trusted."""
        if self.file is None:
            return None
        recorded = self.file.keys_for(ep.ip, ep.port)
        if key in recorded:
            return None
        if self.policy == "tpu-api":
            published = self._api.get(ep.ip, [])
            if key not in published:
                return None
            event = self._record(ep, published, recorded, "tpu-api")
        elif self.policy == "accept-new" and not recorded:
            event = self._record(ep, [key], recorded, "accept-new")
        else:
            return None
        return event

    def trust(self, ep: HostEndpoint, keys: Sequence[asyncssh.SSHKey]) -> HostKeyEvent:
        """Explicitly trust ``keys`` for a host (``phantom trust``): replaces its entries."""
        if self.file is None:
            raise ValueError("no known_hosts file configured (ssh.known_hosts)")
        return self._record(ep, keys, self.file.keys_for(ep.ip, ep.port), "trust")

    def _record(
        self,
        ep: HostEndpoint,
        keys: Sequence[asyncssh.SSHKey],
        old: Sequence[asyncssh.SSHKey],
        source: str,
    ) -> HostKeyEvent:
        assert self.file is not None
        self.file.replace(ep.ip, ep.port, keys)
        event = HostKeyEvent(
            host=ep.name,
            ip=ep.ip,
            kind="replaced" if old else "recorded",
            source="TPU API" if source == "tpu-api" else source,
            old_fingerprint=", ".join(fingerprint(k) for k in old),
            new_fingerprint=", ".join(fingerprint(k) for k in keys),
        )
        self.events.append(event)
        log.info("%s", event.message)
        if self._on_event is not None:
            try:
                self._on_event(event)
            except Exception:
                log.exception("host key event subscriber failed")
        return event

    def refusal(self, ep: HostEndpoint, offered: asyncssh.SSHKey | None) -> HostKeyError:
        """The one-line error for a refused key: both fingerprints and how to fix it."""
        trusted, source = self.trusted(ep)
        via = f", reached at {ep.connect_ip}" if ep.connect_ip != ep.ip else ""
        where = f"{ep.name} ({ep.ip}{via})"
        got = fingerprint(offered) if offered is not None else "(none)"
        if not trusted:
            if self.policy == "tpu-api":
                why = (
                    f"the TPU API publishes no host key for {ep.ip}"
                    + (f" ({self._api_error})" if self._api_error else "")
                    + " and known_hosts has none"
                )
            else:
                path = self.file.path if self.file else "known_hosts"
                why = f"no entry in {path}"
            return UnknownHostKey(
                f"unknown host key for {where}: offered {got}; {why}; "
                f"run `phantom trust {ep.name}` or use known_hosts_policy=tpu-api",
                host=ep.name,
                ip=ep.ip,
            )
        known = [fingerprint(k) for k in trusted]
        if source == "tpu-api":
            msg = (
                f"host key for {where} does not match the TPU API: published "
                f"{', '.join(known)}, offered {got}; refusing (possible man-in-the-middle)"
            )
        else:
            msg = (
                f"host key for {where} changed: known {', '.join(known)}, offered {got}; "
                f"if the VM was recreated run `phantom trust {ep.name}` "
                "or use known_hosts_policy=tpu-api"
            )
        return HostKeyMismatch(msg, host=ep.name, ip=ep.ip, known=known, offered=got)


class HostKeyClient(asyncssh.SSHClient):
    """Per-connection client: records the offered key and asks the policy."""

    def __init__(
        self,
        policy: HostKeyPolicy,
        ep: HostEndpoint,
        on_lost: Callable[[HostEndpoint], None] | None = None,
    ) -> None:
        self.policy = policy
        self.ep = ep
        self.offered: asyncssh.SSHKey | None = None
        self._on_lost = on_lost

    def connection_lost(self, exc: Exception | None) -> None:
        # The other end went away (a VM killed, a network blip): tell whoever watches,
        # so the console looks now instead of at its next poll. A close of our own is
        # clean (exc None) and says nothing.
        if exc is not None and self._on_lost is not None:
            self._on_lost(self.ep)

    def validate_host_public_key(
        self, host: str, addr: str, port: int, key: asyncssh.SSHKey
    ) -> bool:
        self.offered = key
        return self.policy.accepts(self.ep, key)
