"""A pod host as SSH, the TPU API and Ray see it (one value shared by all three)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class HostEndpoint:
    """One pod host as SSH sees it. ``name`` is the worker's name, ``index`` its worker id."""

    name: str
    ip: str
    port: int = 22
    index: int = 0

    @property
    def address(self) -> str:
        return f"{self.ip}:{self.port}"

    @property
    def label(self) -> str:
        return f"{self.address} ({self.name})"
