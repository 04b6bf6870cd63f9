"""Where a workload's files are, seen from the console: checkpoints and TensorBoard events.

``gs://BUCKET/PATH`` is read through fsspec (gcsfs, with your Google credentials) on GKE; on
the emulator every bucket is a directory of its run dir (``gcs_root/BUCKET/PATH``), as its
containers see it. ``file:///PATH`` is a local path.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlparse

from console.services.errors import BackendError


class StorageError(BackendError):
    """A location that cannot be checked (names it, why and the fix)."""


def local_path(uri: str, gcs_root: Path | None) -> Path | None:
    """The local path of ``uri`` when it has one (file://, or gs:// on the emulator)."""
    if uri.startswith("file://"):
        return Path(urlparse(uri).path)
    if uri.startswith("gs://") and gcs_root is not None:
        return gcs_root / uri[len("gs://") :]
    if "://" not in uri and uri:
        return Path(uri)
    return None


def readable_uri(uri: str, gcs_root: Path | None) -> str:
    """What a reader opens: a local path where there is one, else the URI itself."""
    path = local_path(uri, gcs_root)
    return str(path) if path is not None else uri


def exists(uri: str, gcs_root: Path | None) -> bool:
    """Whether ``uri`` exists (blocking: call it in a thread). Raises ``StorageError`` when
    it cannot be checked at all."""
    path = local_path(uri, gcs_root)
    if path is not None:
        return path.exists()
    if not uri.startswith("gs://"):
        raise StorageError(f"{uri}: use gs://bucket/path or file:///path")
    try:
        import fsspec

        fs = fsspec.filesystem("gs")
    except (ImportError, ValueError) as exc:
        raise StorageError(
            f"cannot check {uri}: gs:// needs gcsfs (pip install 'phantom-console[gcs]'): {exc}"
        ) from None
    try:
        return bool(fs.exists(uri))
    except Exception as exc:  # credentials, network: say what failed
        raise StorageError(f"cannot check {uri}: {type(exc).__name__}: {exc}") from None
