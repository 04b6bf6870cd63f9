"""``ADDR:PORT`` as ``--metrics`` and ``phantom serve --bind`` take it, and whether it is local.

Loopback (127.0.0.0/8, ::1, localhost) is the default everywhere; anything else is a choice
the user makes out loud (``serve`` asks for a token, ``watch --metrics`` says so on stderr).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass


@dataclass(frozen=True)
class Listen:
    host: str
    port: int

    @property
    def loopback(self) -> bool:
        return is_loopback(self.host)

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def parse_listen(text: str, default_host: str = "127.0.0.1") -> Listen:
    """``PORT``, ``ADDR:PORT`` or ``[V6]:PORT``; ValueError saying what to write."""
    raw = text.strip()
    host, sep, port_text = raw.rpartition(":")
    if not sep:
        host, port_text = default_host, raw
    host = host.strip("[]") or default_host
    try:
        port = int(port_text)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise ValueError(f"{text!r}: expected ADDR:PORT or PORT, e.g. 127.0.0.1:9464")
    if host != "localhost":
        try:
            ipaddress.ip_address(host)
        except ValueError:
            raise ValueError(
                f"{text!r}: {host!r} is not an IP address (write 127.0.0.1, ::1 or localhost)"
            ) from None
    return Listen(host, port)


def bind_problem(listen: Listen) -> str:
    """Why nothing can listen on ``listen`` now (in use, not an address of this machine), or
    "": a check before a front end starts whose server binds later."""
    import socket

    family = socket.AF_INET6 if ":" in listen.host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((listen.host, listen.port))
        except OSError as exc:
            return exc.strerror or str(exc)
    return ""
