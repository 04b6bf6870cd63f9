"""Helpers for the emulator tests: the real TPU client over gRPC, the real gcloud over REST.

gcloud runs with the emulator's ``PodInfo.gcloud_env`` (endpoint override, credentials
disabled, a throwaway config dir); ``run_gcloud(..., trace=True)`` also records every
``connect()`` with strace so a test can prove nothing left loopback.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import re
import shutil
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.auth.credentials import AnonymousCredentials
from google.cloud import tpu_v2
from google.cloud.tpu_v2.services.tpu.transports import TpuGrpcAsyncIOTransport

from emulators.tpu_pod.client import PodInfo

GCLOUD = shutil.which("gcloud")
needs_gcloud = pytest.mark.skipif(
    GCLOUD is None, reason="the gcloud CLI is not on PATH (install google-cloud-sdk)"
)


def tpu_client(info: PodInfo) -> tuple[tpu_v2.TpuAsyncClient, grpc.aio.Channel]:
    channel = grpc.aio.insecure_channel(info.tpu_api)
    transport = TpuGrpcAsyncIOTransport(channel=channel, credentials=AnonymousCredentials())
    return tpu_v2.TpuAsyncClient(transport=transport), channel


@contextlib.asynccontextmanager
async def tpu(info: PodInfo) -> Any:
    api, channel = tpu_client(info)
    async with channel:
        yield api


def run_gcloud(
    info: PodInfo,
    config_dir: Path,
    *args: str,
    trace: Path | None = None,
    check: bool = True,
) -> subprocess.CompletedProcess[str]:
    """``gcloud ARGS --format=json`` against ``info``'s REST front end."""
    assert GCLOUD is not None
    argv = [GCLOUD, *args]
    if trace is not None:
        argv = ["strace", "-f", "-qq", "-e", "trace=connect", "-o", str(trace), *argv]
    env = {**os.environ, **info.gcloud_env(config_dir)}
    result = subprocess.run(argv, capture_output=True, text=True, timeout=180, env=env)
    if check and result.returncode != 0:
        raise AssertionError(f"gcloud {' '.join(args)} failed:\n{result.stderr[-3000:]}")
    return result


def gcloud_json(info: PodInfo, config_dir: Path, *args: str) -> Any:
    return json.loads(run_gcloud(info, config_dir, *args, "--format=json").stdout)


def inet_connects(trace: Path) -> list[str]:
    """Every IPv4/IPv6 address a traced process tried to connect to."""
    text = trace.read_text()
    return re.findall(r'inet_addr\("([^"]+)"\)', text) + re.findall(
        r'inet_pton\(AF_INET6, "([^"]+)"', text
    )


def assert_loopback_only(addresses: list[str]) -> None:
    off = [a for a in addresses if not ipaddress.ip_address(a).is_loopback]
    assert not off, f"traffic left loopback: {off}"


def metadata_get(
    host: str, path: str, header: bool = True, timeout: float = 10.0, **query: str
) -> tuple[int, str, dict[str, str]]:
    """GET http://HOST/computeMetadata/v1/PATH; (status, body, headers)."""
    qs = "&".join(f"{k}={v}" for k, v in query.items())
    url = f"http://{host}/computeMetadata/v1/{path}" + (f"?{qs}" if qs else "")
    req = urllib.request.Request(url, headers={"Metadata-Flavor": "Google"} if header else {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.read().decode(), dict(resp.headers)
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(), dict(exc.headers)


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@contextlib.contextmanager
def running_pod(run_dir: Path, **kwargs: Any) -> Iterator[PodInfo]:
    """A pod with ``start_test_pod`` options; stopped (and checked) afterwards."""
    from tests.support.fixtures_pod import start_test_pod, stop_test_pod

    info = start_test_pod(run_dir, **kwargs)
    try:
        yield info
    finally:
        stop_test_pod(run_dir)
