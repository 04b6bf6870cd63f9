"""A pod host as SSH, the TPU API and Ray see it (one value shared by all three), how a
host reference (name, IP, index) resolves to one, and how a proxy command reaches it."""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class HostEndpoint:
    """One pod host. ``name`` is the worker's name, ``index`` its worker id.

    ``ip`` is the worker's internal IP: its identity for Ray (``--node-ip-address``, live
    nodes per IP) and for host keys (guest attributes and the console's known_hosts name
    the worker by it). ``ssh_ip`` is where SSH connects when that differs (the external IP
    of a worker reached from outside its VPC); empty: the internal IP.
    """

    name: str
    ip: str
    port: int = 22
    index: int = 0
    ssh_ip: str = ""

    @property
    def connect_ip(self) -> str:
        """The address SSH connects to (a proxy command is given it as ``%h``)."""
        return self.ssh_ip or self.ip

    @property
    def address(self) -> str:
        return f"{self.connect_ip}:{self.port}"

    @property
    def label(self) -> str:
        return f"{self.address} ({self.name})"


def resolve_hosts(
    endpoints: Sequence[HostEndpoint],
    hosts: Iterable[str | int] | None,
    lookup: HostLookup | None = None,
) -> list[HostEndpoint]:
    """Host references (name, IP or index; ``None``/"all" = every host) -> endpoints.
    ``lookup``: one built before for these very ``endpoints`` (a caller that resolves often).

    Raises ValueError naming the unknown reference and the accepted forms.
    """
    if hosts is None:
        return list(endpoints)
    refs = [hosts] if isinstance(hosts, str) else list(hosts)
    if any(str(r).strip().lower() == "all" for r in refs):
        return list(endpoints)
    if lookup is None or lookup.endpoints is not endpoints:
        lookup = HostLookup(endpoints)
    out: list[HostEndpoint] = []
    seen: set[int] = set()
    for ref in refs:
        pos = lookup.find(ref)
        if pos is None:
            names = ", ".join(e.name for e in endpoints[:4]) + (
                ", ..." if len(endpoints) > 4 else ""
            )
            raise ValueError(
                f"unknown host {ref!r}: use a name ({names}), an IP, an index "
                f"0..{len(endpoints) - 1}, or 'all'"
            )
        if pos not in seen:
            seen.add(pos)
            out.append(endpoints[pos])
    return out


class HostLookup:
    """References -> position of the first endpoint they name, built once per host list
    (a fan-out to 256 hosts by index resolves 256 references: no scan per reference; a
    1,024-host pod's poll resolves a few: no rebuild for each)."""

    def __init__(self, endpoints: Sequence[HostEndpoint]) -> None:
        self.endpoints = endpoints
        self.by_text: dict[str, int] = {}
        self.by_index: dict[int, int] = {}
        for pos, ep in enumerate(endpoints):
            for key in (ep.name, ep.ip, ep.connect_ip, ep.address):
                self.by_text.setdefault(key, pos)
            self.by_index.setdefault(ep.index, pos)

    def find(self, ref: str | int) -> int | None:
        text = str(ref).strip()
        hits = [self.by_text.get(text)]
        if text.isdigit():
            hits.append(self.by_index.get(int(text)))
        found = [pos for pos in hits if pos is not None]
        if found:
            return min(found)  # the first endpoint that matches, as a scan would find
        # a short worker suffix ("w2") is how people talk about hosts
        matches = [p for p, ep in enumerate(self.endpoints) if ep.name.endswith(f"-{text}")]
        return matches[0] if len(matches) == 1 else None


_PROXY_TOKEN = re.compile(r"%([hprn%])")


def proxy_argv(command: str, ep: HostEndpoint, user: str) -> list[str]:
    """``ssh.proxy_command`` as argv for ``ep``: split as a shell would, then OpenSSH's
    tokens expanded in each argument (%h address, %p port, %r user, %n worker name)."""
    values = {"h": ep.connect_ip, "p": str(ep.port), "r": user, "n": ep.name, "%": "%"}
    return [_PROXY_TOKEN.sub(lambda m: values[m.group(1)], arg) for arg in shlex.split(command)]
