"""The [gke] section's checks (``config.GkeConfig``), beside ``console.config``'s own.

``config`` runs every key through its domain check; a ``gke.*`` key comes here, and so does
the cross-check of a GKE config as a whole. Each problem names the key and the fix.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from console.config.validate import is_env_var_name

if TYPE_CHECKING:
    from console.config import GkeConfig

_DNS_LABEL_RE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_URI_RE = re.compile(r"^(gs://[a-z0-9][-a-z0-9_.]*[a-z0-9](/.*)?|file:///.*)$")
_HF_TOKEN_RE = re.compile(r"^hf_[A-Za-z0-9]{30,}$")


def gke_value_problems(key: str, value: Any) -> list[str]:
    """What is wrong with one ``gke.*`` value (its type already checked)."""
    if key == "gke.slices" and value > 64:
        return [f"{key} = {value!r}: at most 64 slices"]
    if key == "gke.namespace" and not _DNS_LABEL_RE.match(value):
        return [f"{key} = {value!r}: a namespace name (lower-case letters, digits and '-')"]
    if key in ("gke.base_output_directory", "gke.maxtext_ckpt_path") and value:
        if not _URI_RE.match(value):
            return [f"{key} = {value!r}: use gs://bucket/path or file:///abs/path"]
    elif key == "gke.kubeconfig" and value:
        if not Path(value).expanduser().is_file():
            return [
                f"{key} = {value!r}: no such file (write one with `gcloud container clusters "
                'get-credentials CLUSTER --location LOCATION`, or leave it "" for the emulator)'
            ]
    elif key == "gke.hf_token_env" and value and not _env_name(value):
        return [
            f"{key}: the NAME of an environment variable (e.g. HF_TOKEN), never the token "
            "itself (the value given is not shown: it may be the token)"
        ]
    return []


def _env_name(value: str) -> bool:
    return is_env_var_name(value) and not _HF_TOKEN_RE.match(value)


def gke_cross_problems(gke: GkeConfig) -> list[str]:
    """What a real cluster (a kubeconfig) needs besides: the names its links use, and where
    checkpoints and TensorBoard events go."""
    if not gke.kubeconfig:
        return []
    out = [
        f"gke.{key}: required with a kubeconfig (the Cloud Console links name the cluster's "
        "project, location and name)"
        for key in ("project", "location", "cluster")
        if not getattr(gke, key)
    ]
    if not gke.base_output_directory:
        out.append(
            "gke.base_output_directory: required with a kubeconfig (gs://bucket/path for "
            "checkpoints and TensorBoard events)"
        )
    return out
