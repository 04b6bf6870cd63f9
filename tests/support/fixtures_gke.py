"""GKE emulator fixtures and manifests shared by the tests/test_gke_emulator_*.py files.

Import the fixtures into a test module (``from tests.support.fixtures_gke import gke_module``). Every
cluster runs in its own tmp run dir on a free port, is stopped also when the test fails,
and the teardown fails if any container process survived ``down``.
"""

from __future__ import annotations

import copy
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from emulators.gke import client

os.environ.setdefault("NO_GCE_CHECK", "True")

# Fast controller timings: the defaults are the real ones (10 s back-offs, 60 s bookmarks).
FAST = [
    "--job-backoff",
    "0.01",
    "--crash-backoff",
    "0.2",
    "--bookmark-interval",
    "0.5",
    "--schedule-retry",
    "0.5",
    "--shutdown-grace",
    "30",
]

KUBECTL_DIR = Path("/usr/lib/google-cloud-sdk/bin")


def kubectl(version: str) -> str:
    """Path of ``kubectl.<version>`` (or skip the test, naming what is missing)."""
    path = KUBECTL_DIR / f"kubectl.{version}"
    if path.is_file() and os.access(path, os.X_OK):
        return str(path)
    found = shutil.which(f"kubectl.{version}")
    if found:
        return found
    pytest.skip(
        f"kubectl {version} is not installed ({path} missing; the google-cloud-sdk "
        f"image ships kubectl.1.27..kubectl.1.33)"
    )
    raise AssertionError("unreachable")


def start_cluster(run_dir: Path, extra: list[str] | None = None, **kwargs: Any) -> client.GkeInfo:
    try:
        return client.start(run_dir, extra_args=[*FAST, *(extra or [])], timeout=60, **kwargs)
    except BaseException:
        client.stop(run_dir)
        raise


def stop_cluster(run_dir: Path) -> None:
    client.stop(run_dir)
    left = client.leftover_pids(run_dir)
    assert not left, f"container processes survived `down`: {left}"


@pytest.fixture(scope="module")
def gke_module(tmp_path_factory: pytest.TempPathFactory) -> Iterator[client.GkeInfo]:
    """One emulated cluster (1 slice + cpu-np) shared by a module's tests."""
    run_dir = tmp_path_factory.mktemp("gke")
    info = start_cluster(run_dir, recreate_delay=1.0)
    try:
        yield info
    finally:
        stop_cluster(run_dir)


@pytest.fixture
def gke(tmp_path_factory: pytest.TempPathFactory) -> Iterator[client.GkeInfo]:
    """A fresh cluster for a test that preempts or stalls it."""
    run_dir = tmp_path_factory.mktemp("gke")
    info = start_cluster(run_dir, recreate_delay=1.0)
    try:
        yield info
    finally:
        stop_cluster(run_dir)


# --- manifests (what xpk's templates produce; see emulators/gke/README.md) --------

XPK_WRAPPER = """echo XPK Start: $(date);
_sigterm() (kill -SIGTERM $! 2>/dev/null;);
trap _sigterm SIGTERM;
({command}) & PID=$!;
while kill -0 $PID 2>/dev/null;
    do sleep 5;
done;
wait $PID;
EXIT_CODE=$?;
echo XPK End: $(date);
echo EXIT_CODE=$EXIT_CODE;
exit $EXIT_CODE
"""

RESTART_CODES = [42, *range(127, 256)]


def xpk_jobset(
    name: str,
    command: str,
    env: dict[str, str] | None = None,
    slices: int = 1,
    max_restarts: int = 3,
    grace: int = 30,
    wrapper: bool = True,
    image: str = "gcr.io/phantom-local/maxtext-rl:latest",
    secret_env: dict[str, tuple[str, str]] | None = None,
) -> dict[str, Any]:
    """The JobSet `xpk workload create` applies (src/xpk/commands/workload.py)."""
    container_env: list[dict[str, Any]] = [{"name": k, "value": v} for k, v in (env or {}).items()]
    for var, (secret, key) in (secret_env or {}).items():
        container_env.append(
            {"name": var, "valueFrom": {"secretKeyRef": {"name": secret, "key": key}}}
        )
    script = XPK_WRAPPER.format(command=command) if wrapper else command
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {
            "name": name,
            "labels": {
                "kueue.x-k8s.io/queue-name": "multislice-queue",
                "xpk.google.com/workload": name,
            },
            "annotations": {
                "alpha.jobset.sigs.k8s.io/exclusive-topology": "cloud.google.com/gke-nodepool"
            },
        },
        "spec": {
            "ttlSecondsAfterFinished": 43200,
            "failurePolicy": {
                "rules": [{"action": "FailJobSet", "onJobFailureReasons": ["PodFailurePolicy"]}],
                "maxRestarts": max_restarts,
            },
            "replicatedJobs": [
                {
                    "name": "slice-job",
                    "replicas": slices,
                    "template": {
                        "spec": {
                            "parallelism": 8,
                            "completions": 8,
                            "backoffLimit": 0,
                            "podFailurePolicy": {
                                "rules": [
                                    {
                                        "action": "FailJob",
                                        "onPodConditions": [],
                                        "onExitCodes": {
                                            "containerName": "jax-tpu",
                                            "operator": "NotIn",
                                            "values": RESTART_CODES,
                                        },
                                    }
                                ]
                            },
                            "template": {
                                "metadata": {"labels": {"xpk.google.com/workload": name}},
                                "spec": {
                                    "schedulerName": "default-scheduler",
                                    "restartPolicy": "Never",
                                    "nodeSelector": {
                                        "cloud.google.com/gke-tpu-accelerator": "tpu-v5p-slice",
                                        "cloud.google.com/gke-tpu-topology": "2x4x4",
                                    },
                                    "priorityClassName": "medium",
                                    "hostNetwork": True,
                                    "dnsPolicy": "ClusterFirstWithHostNet",
                                    "terminationGracePeriodSeconds": grace,
                                    "containers": [
                                        {
                                            "name": "jax-tpu",
                                            "image": image,
                                            "env": container_env,
                                            "securityContext": {"privileged": True},
                                            "command": ["bash", "-c", script],
                                            "resources": {"limits": {"google.com/tpu": 4}},
                                        }
                                    ],
                                    "tolerations": [
                                        {"operator": "Exists", "key": "google.com/tpu"}
                                    ],
                                },
                            },
                        }
                    },
                }
            ],
        },
    }


def pathways_jobset(
    name: str, command: str, env: dict[str, str] | None = None, slices: int = 1
) -> dict[str, Any]:
    """The JobSet `xpk workload create-pathways` applies (pathways_workload_create.yaml.j2)."""
    server = "us-docker.pkg.dev/cloud-tpu-v2-images/pathways/server:latest"
    proxy = "us-docker.pkg.dev/cloud-tpu-v2-images/pathways/proxy_server:latest"
    head_env = [
        {
            "name": "PATHWAYS_HEAD",
            "valueFrom": {
                "fieldRef": {"fieldPath": "metadata.labels['jobset.sigs.k8s.io/coordinator']"}
            },
        },
        {"name": "JAX_PLATFORMS", "value": "proxy"},
        {"name": "JAX_BACKEND_TARGET", "value": "grpc://$(PATHWAYS_HEAD):29000"},
        *[{"name": k, "value": v} for k, v in (env or {}).items()],
    ]
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": name, "labels": {"xpk.google.com/workload": name}},
        "spec": {
            "coordinator": {"replicatedJob": "pathways-head"},
            "network": {"enableDNSHostnames": True, "publishNotReadyAddresses": True},
            "failurePolicy": {"restartStrategy": "Recreate"},
            "replicatedJobs": [
                {
                    "name": "pathways-head",
                    "replicas": 1,
                    "template": {
                        "metadata": {
                            "annotations": {
                                "alpha.jobset.sigs.k8s.io/exclusive-topology": "kubernetes.io/hostname"
                            }
                        },
                        "spec": {
                            "backoffLimit": 0,
                            "completionMode": "Indexed",
                            "completions": 1,
                            "parallelism": 1,
                            "template": {
                                "spec": {
                                    "hostNetwork": True,
                                    "dnsPolicy": "ClusterFirstWithHostNet",
                                    "nodeSelector": {"cloud.google.com/gke-nodepool": "cpu-np"},
                                    "initContainers": [
                                        {
                                            "name": "pathways-proxy",
                                            "image": proxy,
                                            "args": [
                                                "--server_port=29000",
                                                "--resource_manager_address=$(PATHWAYS_HEAD):29001",
                                            ],
                                            "env": [head_env[0]],
                                            "restartPolicy": "Always",
                                        },
                                        {
                                            "name": "pathways-rm",
                                            "image": server,
                                            "args": [
                                                "--server_port=29001",
                                                "--node_type=resource_manager",
                                                f"--instance_count={slices}",
                                                "--instance_type=tpuv5:2x4x4",
                                            ],
                                            "restartPolicy": "Always",
                                        },
                                    ],
                                    "containers": [
                                        {
                                            "name": "jax-tpu",
                                            "image": "gcr.io/p/maxtext:1",
                                            "env": head_env,
                                            "command": ["bash", "-c", command],
                                        }
                                    ],
                                    "restartPolicy": "Never",
                                }
                            },
                        },
                    },
                },
                {
                    "name": "worker",
                    "replicas": slices,
                    "template": {
                        "spec": {
                            "backoffLimit": 32,
                            "completionMode": "Indexed",
                            "completions": 8,
                            "parallelism": 8,
                            "template": {
                                "metadata": {"labels": {"xpk.google.com/workload": name}},
                                "spec": {
                                    "hostNetwork": True,
                                    "dnsPolicy": "ClusterFirstWithHostNet",
                                    "terminationGracePeriodSeconds": 30,
                                    "nodeSelector": {
                                        "cloud.google.com/gke-tpu-accelerator": "tpu-v5p-slice",
                                        "cloud.google.com/gke-tpu-topology": "2x4x4",
                                    },
                                    "containers": [
                                        {
                                            "name": "pathways-worker",
                                            "image": server,
                                            "args": [
                                                "--server_port=29005",
                                                "--resource_manager_address=$(PATHWAYS_HEAD):29001",
                                            ],
                                            "env": [
                                                {
                                                    "name": "PATHWAYS_HEAD",
                                                    "valueFrom": {
                                                        "fieldRef": {
                                                            "fieldPath": "metadata.labels['jobset.sigs.k8s.io/coordinator']"
                                                        }
                                                    },
                                                }
                                            ],
                                            "resources": {"limits": {"google.com/tpu": "4"}},
                                        }
                                    ],
                                    "restartPolicy": "OnFailure",
                                    "tolerations": [
                                        {"operator": "Exists", "key": "google.com/tpu"}
                                    ],
                                },
                            },
                        }
                    },
                },
            ],
            "startupPolicy": {"startupPolicyOrder": "InOrder"},
            "successPolicy": {"operator": "All", "targetReplicatedJobs": ["pathways-head"]},
            "suspend": False,
        },
    }


def with_changes(manifest: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """A copy of ``manifest`` with the dotted ``path`` (``a.b[0].c``) set to ``value``."""
    out = copy.deepcopy(manifest)
    cur: Any = out
    parts = path.replace("]", "").replace("[", ".").split(".")
    for part in parts[:-1]:
        cur = cur[int(part)] if part.isdigit() else cur[part]
    last = parts[-1]
    if last.isdigit():
        cur[int(last)] = value
    else:
        cur[last] = value
    return out
