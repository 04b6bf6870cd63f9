"""Cluster DNS for Python in the GKE emulator's containers.

The kubelet puts this directory on a container's PYTHONPATH, so Python imports this module
at start-up. Names listed in the emulator's hosts file (``$PHANTOM_GKE_HOSTS``: pod
``<hostname>.<subdomain>`` under a headless Service, as the cluster DNS would answer) are
resolved from it, read on every lookup; anything else goes to the system resolver.
Containers are plain local processes: a non-Python program does not see these names.
"""

from __future__ import annotations

import os
import socket
from typing import Any

_PATH = os.environ.get("PHANTOM_GKE_HOSTS", "")


def _lookup(name: Any) -> str | None:
    if not _PATH or not isinstance(name, str):
        return None
    try:
        with open(_PATH, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    wanted = name.rstrip(".").lower()
    for line in lines:
        parts = line.split()
        if len(parts) >= 2 and not parts[0].startswith("#") and wanted in parts[1:]:
            return parts[0]
    return None


_getaddrinfo = socket.getaddrinfo
_gethostbyname = socket.gethostbyname
_gethostbyname_ex = socket.gethostbyname_ex


def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
    return _getaddrinfo(_lookup(host) or host, *args, **kwargs)


def gethostbyname(host: str) -> str:
    return _lookup(host) or _gethostbyname(host)


def gethostbyname_ex(host: str) -> tuple[str, list[str], list[str]]:
    ip = _lookup(host)
    return (host, [], [ip]) if ip else _gethostbyname_ex(host)


socket.getaddrinfo = getaddrinfo
socket.gethostbyname = gethostbyname
socket.gethostbyname_ex = gethostbyname_ex
