"""What the services raise on purpose: one module below the backends and above nothing.

A front end catches ``ConsoleError`` for "say this to the user" and lets anything else be a
bug. ``BackendError`` is a cluster part failing (the TPU API, SSH, Ray, Kubernetes, the
capacity search): each backend's own errors derive from it, so recovery, the script and the
TUI read one hierarchy and never import a backend's parts to catch its errors.
"""

from __future__ import annotations


class ConsoleError(Exception):
    """Raised on purpose, with a message for the user."""


class BackendError(ConsoleError):
    """A part of the cluster did not do what was asked (its message says which and why)."""


class JobsUnavailable(BackendError):
    """The cluster's jobs cannot be asked now (Ray not running, no tunnel to the head): an
    expected state to show, not an error to report. The message says how to get there."""


class UnknownJob(ConsoleError, LookupError):
    """The cluster has no job with that id (never had, or lost it with its head)."""
