"""The real `gcloud` and `xpk` against a GKE emulator, loopback only.

xpk is a test tool kept out of the project's virtualenv (its dependencies would pin others'):
`make setup` installs it in ``.tools/xpk`` (see the Makefile); tests that need it skip, naming
the command that installs it, when it is absent. Everything here points gcloud at the
emulator through ``CLOUDSDK_API_ENDPOINT_OVERRIDES_*`` with a throwaway CLOUDSDK_CONFIG, and
keeps xpk off the network (no telemetry, no kubectl download). See emulators/gke/README.md,
"xpk", for the steps that cannot run offline and what stands in for them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from emulators.gke import client as gke_client
from emulators.gke.gkeapi import PROJECT_NUMBER

ROOT = Path(__file__).resolve().parents[2]
XPK_VERSION = "1.16.0"
XPK_BIN = ROOT / ".tools" / "xpk" / "bin"

# xpk checks `crane --help` before any workload create (it builds images with crane unless
# --docker-image names one). Images are always given here: the stand-in answers --help only
# and fails loudly if xpk ever tried to build.
CRANE_STANDIN = """#!/bin/sh
[ "$1" = "--help" ] && { echo "crane stand-in: images come from --docker-image"; exit 0; }
echo "crane stand-in: 'crane $*' needs a registry; not available offline" >&2
exit 1
"""

# xpk builds a google-cloud-storage client after every create (to grant its service account
# bucket access for mounted storages); constructing one needs Application Default Credentials,
# though with no storages it never asks for a token. This is the file
# `gcloud auth application-default login` leaves, with values that can fetch nothing.
OFFLINE_ADC = (
    '{"type": "authorized_user", "client_id": "phantom-offline", '
    '"client_secret": "phantom-offline", "refresh_token": "phantom-offline"}\n'
)


def xpk_or_skip() -> Path:
    xpk = XPK_BIN / "xpk"
    if not xpk.is_file():
        pytest.skip(
            f"xpk {XPK_VERSION} is not installed in {XPK_BIN.parent} (run `make setup`, or "
            f"python3 -m venv .tools/xpk && .tools/xpk/bin/pip install xpk=={XPK_VERSION})"
        )
    return xpk


def gcloud_or_skip() -> str:
    found = shutil.which("gcloud")
    if not found:
        pytest.skip("gcloud (Google Cloud SDK) is not on PATH")
    return found


def gcloud_env(info: gke_client.GkeInfo, home: Path) -> dict[str, str]:
    """Environment for gcloud, kubectl and xpk against ``info``'s emulator: a fresh HOME,
    CLOUDSDK_CONFIG and KUBECONFIG under ``home`` (get-credentials writes the latter)."""
    home.mkdir(parents=True, exist_ok=True)
    cfg = home / "gcloud"
    cfg.mkdir(exist_ok=True)
    (cfg / "gce").write_text("False")  # gcloud's "am I on GCE?" cache: never probe
    (cfg / "application_default_credentials.json").write_text(OFFLINE_ADC)
    stubs = home / "bin"
    stubs.mkdir(exist_ok=True)
    crane = stubs / "crane"
    crane.write_text(CRANE_STANDIN)
    crane.chmod(0o755)
    api = f"{info.server}/"
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("CLOUDSDK_", "KUBECONFIG", "GOOGLE_"))
    }
    env.update(
        {
            "HOME": str(home),
            "PATH": f"{stubs}:{XPK_BIN}:{env.get('PATH', '')}",
            "KUBECONFIG": str(home / "kubeconfig"),
            "CLOUDSDK_CONFIG": str(cfg),
            "CLOUDSDK_API_ENDPOINT_OVERRIDES_CONTAINER": api,
            "CLOUDSDK_API_ENDPOINT_OVERRIDES_CLOUDRESOURCEMANAGER": api,
            "CLOUDSDK_API_ENDPOINT_OVERRIDES_MONITORING": api,
            "CLOUDSDK_AUTH_DISABLE_CREDENTIALS": "true",
            # get-credentials then writes GKE's client certificate, not the auth plugin
            "CLOUDSDK_CONTAINER_USE_CLIENT_CERTIFICATE": "true",
            "CLOUDSDK_CORE_PROJECT": info.project,
            "CLOUDSDK_CORE_DISABLE_PROMPTS": "1",
            "CLOUDSDK_CORE_DISABLE_USAGE_REPORTING": "true",
            "CLOUDSDK_COMPONENT_MANAGER_DISABLE_UPDATE_CHECK": "true",
            "CLOUDSDK_SURVEY_DISABLE_PROMPTS": "true",
            "CLOUDSDK_CORE_CHECK_GCE_METADATA": "false",
            "GOOGLE_CLOUD_PROJECT": info.project,
            "NO_GCE_CHECK": "True",
            # xpk's feature flags: no usage upload, no kubectl download from dl.k8s.io
            "TELEMETRY_ENABLED": "false",
            "DEPENDENCY_AUTO_DOWNLOAD": "false",
        }
    )
    return env


def run(
    argv: list[str], env: dict[str, str], timeout: float = 240
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


def xpk_args(info: gke_client.GkeInfo) -> list[str]:
    """The cluster flags every xpk command takes; ``--project-number`` because xpk turns a
    project id into a number with Resource Manager over gRPC and Application Default
    Credentials (no endpoint override, a real token): offline it must be given."""
    return [
        "--cluster",
        info.cluster,
        "--project",
        info.project,
        "--zone",
        info.location,
        "--project-number",
        PROJECT_NUMBER,
    ]
