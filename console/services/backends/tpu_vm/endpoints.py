"""A pod host as SSH, the TPU API and Ray see it (one value shared by all three)."""

from __future__ import annotations

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
