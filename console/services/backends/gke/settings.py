"""The GKE backend's slice of the config, built once by the wiring: the backend reads this
(and its ``GkeAccess``), never the whole ``Config``."""

from __future__ import annotations

from dataclasses import dataclass

from console.services.settings import Polling


@dataclass(frozen=True)
class GkeSettings:
    provider: str
    """"gke" (what the backend's observations name)."""
    polling: Polling
    ready_timeout_s: float
    """How long a recovery waits for the slice's nodes to be back."""
    name: str = ""
    """The cluster's name in its fleet: what the backend's refusals call it."""
