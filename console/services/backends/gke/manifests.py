"""``WorkloadSpec`` -> the objects xpk would create, the xpk command line, Cloud Console links.

Standard: the JobSet of `xpk workload create` (src/xpk/commands/workload.py): one Job per
slice (``slice-job``), ``parallelism = completions =`` the slice's VMs, restart on exit codes
42 and 127-255 (a preempted container exits 143) and fail the JobSet on any other
(``FailJobSet`` on ``PodFailurePolicy``), ``failurePolicy.maxRestarts``, exclusive placement
per node pool, the TPU node selectors and toleration, the command inside xpk's wrapper.
Pathways: the JobSet of `xpk workload create-pathways` (pathways_workload_create.yaml.j2):
a head on the CPU pool (proxy and resource manager as sidecars, the user's command inside
xpk's wrapper as ``jax-tpu``) and one worker Job per slice, queued like the standard one. Convert: a batch Job on the CPU pool running the
HF <-> MaxText conversion.

Secrets travel in one Secret per workload (``<name>-phantom-env``) and reach the container
by ``secretKeyRef``: the manifest, the preview and the journal only ever name them.
"""

from __future__ import annotations

import base64
import shlex
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from console.services.backends.gke.kube import JOBSET_API, Obj
from console.services.jobs.workload import CONVERT_COMMAND, WorkloadPreview, WorkloadSpec

PATHWAYS_SERVER = "us-docker.pkg.dev/cloud-tpu-v2-images/pathways/server:latest"
PATHWAYS_PROXY = "us-docker.pkg.dev/cloud-tpu-v2-images/pathways/proxy_server:latest"
CPU_POOL = "cpu-np"
CONTAINER = "jax-tpu"
RESTART_CODES = [42, *range(127, 256)]
TEMPLATE_LABEL = "phantom.console/template"
RUN_LABEL = "phantom.console/run-name"
WORKLOAD_LABEL = "xpk.google.com/workload"

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
# What the wrapper adds for a trainer that names the signal asking it for a checkpoint
# (``ASK_ENV``): the signal reaches the container's main process, the wrapper, whose default
# action for it is to die (exit 128+n, a restart code: the JobSet restarts, every pod
# replaced); so the wrapper passes it on to the trainer as it passes on SIGTERM.
ASK_FORWARD = """_ask() (kill -{signal} $! 2>/dev/null;);
trap _ask {signal};
"""


def wrapped(spec: WorkloadSpec) -> str:
    """The container's script: the command inside xpk's wrapper, which also passes on the
    signal that asks for a checkpoint where the spec names one."""
    script = XPK_WRAPPER.format(command=spec.command)
    if not spec.ask_signal:
        return script  # xpk's own, byte for byte
    term = "trap _sigterm SIGTERM;\n"
    return script.replace(term, term + ASK_FORWARD.format(signal=spec.ask_signal), 1)


@dataclass(frozen=True)
class ClusterRef:
    """Where workloads go, and what the Cloud Console links name."""

    project: str
    location: str
    cluster: str
    namespace: str = "default"


def secret_name(spec: WorkloadSpec) -> str:
    return f"{spec.name}-phantom-env"


def coordinator_slot(obj: Obj | None) -> tuple[str, int, int] | None:
    """(replicatedJob, job index, pod index) of a JobSet's coordinator pod: its
    ``spec.coordinator`` when it names one, else pod 0 of job 0 of its first replicatedJob
    (xpk's ``slice-job``, the Pathways head, or any other name); None for anything else."""
    if not obj or obj.get("kind") != "JobSet":
        return None
    spec = obj.get("spec") or {}
    coord = spec.get("coordinator") or {}
    if coord.get("replicatedJob"):
        return (
            str(coord["replicatedJob"]),
            int(coord.get("jobIndex") or 0),
            int(coord.get("podIndex") or 0),
        )
    rjobs = spec.get("replicatedJobs") or []
    if rjobs and isinstance(rjobs[0], dict) and rjobs[0].get("name"):
        return (str(rjobs[0]["name"]), 0, 0)
    return None


def coordinator_prefix(spec_name: str, template: str, obj: Obj | None = None) -> str:
    """The name prefix of the pod whose log is the workload's log (the JobSet's coordinator
    read from ``obj`` when given; else worker 0 of slice 0, the Pathways head, the
    conversion's pod, as the console's templates make them)."""
    slot = coordinator_slot(obj)
    if slot is not None:
        rjob, job, pod = slot
        return f"{spec_name}-{rjob}-{job}-{pod}-"
    if template == "pathways":
        return f"{spec_name}-pathways-head-0-0-"
    if template == "convert":
        return f"{spec_name}-"
    return f"{spec_name}-slice-job-0-0-"


def run_location(obj: Obj | None) -> tuple[str, str] | None:
    """(run name, output URI) of a JobSet this console did not make (xpk, kubectl): what its
    containers' env says, as the seed's run script reads it (``RUN_NAME``, else
    ``WORKLOAD_NAME``, else the JobSet's name; under ``BASE_OUTPUT_DIRECTORY``), coordinator
    first. None when no container names a literal ``BASE_OUTPUT_DIRECTORY``."""
    if not obj or obj.get("kind") != "JobSet":
        return None
    rjobs = [rj for rj in (obj.get("spec") or {}).get("replicatedJobs") or [] if rj]
    slot = coordinator_slot(obj)
    rjobs.sort(key=lambda rj: rj.get("name") != (slot[0] if slot else None))
    for rj in rjobs:
        pod = (((rj.get("template") or {}).get("spec") or {}).get("template") or {}).get("spec")
        for c in (pod or {}).get("containers") or []:
            env = {e.get("name"): e.get("value") for e in c.get("env") or [] if "value" in e}
            base = str(env.get("BASE_OUTPUT_DIRECTORY") or "").rstrip("/")
            if base:
                name = (obj.get("metadata") or {}).get("name", "")
                run = str(env.get("RUN_NAME") or env.get("WORKLOAD_NAME") or name)
                return run, f"{base}/{run}"
    return None


def _env(spec: WorkloadSpec) -> list[Obj]:
    env: list[Obj] = [
        {"name": "WORKLOAD_NAME", "value": spec.name},
        {"name": "BASE_OUTPUT_DIRECTORY", "value": spec.base_output_directory},
        {"name": "RUN_NAME", "value": spec.effective_run_name},
    ]
    if spec.maxtext_ckpt_path:
        env.append({"name": "MAXTEXT_CKPT_PATH", "value": spec.maxtext_ckpt_path})
    env += [{"name": k, "value": v} for k, v in sorted(spec.plain_env().items())]
    for var in sorted(spec.secret_refs()):
        env.append(
            {
                "name": var,
                "valueFrom": {"secretKeyRef": {"name": secret_name(spec), "key": var}},
            }
        )
    return env


def _labels(spec: WorkloadSpec) -> dict[str, str]:
    return {
        WORKLOAD_LABEL: spec.name,
        TEMPLATE_LABEL: spec.template,
        RUN_LABEL: spec.effective_run_name,
    }


def _tpu_selector(spec: WorkloadSpec) -> dict[str, str]:
    tpu = spec.tpu
    assert tpu is not None, "validated"
    sel = {
        "cloud.google.com/gke-tpu-accelerator": tpu.accelerator,
        "cloud.google.com/gke-tpu-topology": tpu.topology,
    }
    if spec.spot:
        sel["cloud.google.com/gke-spot"] = "true"
    return sel


def standard_jobset(spec: WorkloadSpec) -> Obj:
    tpu = spec.tpu
    assert tpu is not None, "validated"
    return {
        "apiVersion": JOBSET_API,
        "kind": "JobSet",
        "metadata": {
            "name": spec.name,
            "labels": {"kueue.x-k8s.io/queue-name": "multislice-queue", **_labels(spec)},
            "annotations": {
                "alpha.jobset.sigs.k8s.io/exclusive-topology": "cloud.google.com/gke-nodepool"
            },
        },
        "spec": {
            "ttlSecondsAfterFinished": 43200,
            "failurePolicy": {
                "rules": [{"action": "FailJobSet", "onJobFailureReasons": ["PodFailurePolicy"]}],
                "maxRestarts": spec.max_restarts,
            },
            "replicatedJobs": [
                {
                    "name": "slice-job",
                    "replicas": spec.slices,
                    "template": {
                        "spec": {
                            "parallelism": tpu.vms,
                            "completions": tpu.vms,
                            "backoffLimit": 0,
                            "podFailurePolicy": {
                                "rules": [
                                    {
                                        "action": "FailJob",
                                        "onPodConditions": [],
                                        "onExitCodes": {
                                            "containerName": CONTAINER,
                                            "operator": "NotIn",
                                            "values": RESTART_CODES,
                                        },
                                    }
                                ]
                            },
                            "template": {
                                "metadata": {"labels": _labels(spec)},
                                "spec": {
                                    "schedulerName": "default-scheduler",
                                    "restartPolicy": "Never",
                                    "nodeSelector": _tpu_selector(spec),
                                    "priorityClassName": "medium",
                                    "hostNetwork": True,
                                    "dnsPolicy": "ClusterFirstWithHostNet",
                                    "terminationGracePeriodSeconds": spec.termination_grace_s,
                                    "containers": [
                                        {
                                            "name": CONTAINER,
                                            "image": spec.image,
                                            "env": _env(spec),
                                            "securityContext": {"privileged": True},
                                            "command": [
                                                "bash",
                                                "-c",
                                                wrapped(spec),
                                            ],
                                            "resources": {
                                                "limits": {"google.com/tpu": tpu.chips_per_vm}
                                            },
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


def pathways_jobset(spec: WorkloadSpec) -> Obj:
    tpu = spec.tpu
    assert tpu is not None, "validated"
    head_ref: Obj = {
        "name": "PATHWAYS_HEAD",
        "valueFrom": {
            "fieldRef": {"fieldPath": "metadata.labels['jobset.sigs.k8s.io/coordinator']"}
        },
    }
    head_env = [
        head_ref,
        {"name": "JAX_PLATFORMS", "value": "proxy"},
        {"name": "XCLOUD_ENVIRONMENT", "value": "GCP"},
        {"name": "JAX_BACKEND_TARGET", "value": "grpc://$(PATHWAYS_HEAD):29000"},
        *_env(spec),
    ]
    return {
        "apiVersion": JOBSET_API,
        "kind": "JobSet",
        "metadata": {
            "name": spec.name,
            "labels": {"kueue.x-k8s.io/queue-name": "multislice-queue", **_labels(spec)},
        },
        "spec": {
            "coordinator": {"replicatedJob": "pathways-head"},
            "network": {"enableDNSHostnames": True, "publishNotReadyAddresses": True},
            "failurePolicy": {"restartStrategy": "Recreate", "maxRestarts": spec.max_restarts},
            "replicatedJobs": [
                {
                    "name": "pathways-head",
                    "replicas": 1,
                    "template": {
                        "metadata": {
                            "annotations": {
                                "alpha.jobset.sigs.k8s.io/exclusive-topology": (
                                    "kubernetes.io/hostname"
                                )
                            }
                        },
                        "spec": {
                            "backoffLimit": 0,
                            "completionMode": "Indexed",
                            "completions": 1,
                            "parallelism": 1,
                            "template": {
                                "metadata": {"labels": _labels(spec)},
                                "spec": {
                                    "hostNetwork": True,
                                    "dnsPolicy": "ClusterFirstWithHostNet",
                                    "nodeSelector": {"cloud.google.com/gke-nodepool": CPU_POOL},
                                    "terminationGracePeriodSeconds": spec.termination_grace_s,
                                    "initContainers": [
                                        {
                                            "name": "pathways-proxy",
                                            "image": PATHWAYS_PROXY,
                                            "args": [
                                                "--server_port=29000",
                                                "--resource_manager_address=$(PATHWAYS_HEAD):29001",
                                            ],
                                            "env": [head_ref],
                                            "restartPolicy": "Always",
                                        },
                                        {
                                            "name": "pathways-rm",
                                            "image": PATHWAYS_SERVER,
                                            "args": [
                                                "--server_port=29001",
                                                "--node_type=resource_manager",
                                                f"--instance_count={spec.slices}",
                                                f"--instance_type={tpu.pathways}:{tpu.topology}",
                                            ],
                                            "restartPolicy": "Always",
                                        },
                                    ],
                                    "containers": [
                                        {
                                            "name": CONTAINER,
                                            "image": spec.image,
                                            "env": head_env,
                                            "command": [
                                                "bash",
                                                "-c",
                                                wrapped(spec),
                                            ],
                                        }
                                    ],
                                    "restartPolicy": "Never",
                                },
                            },
                        },
                    },
                },
                {
                    "name": "worker",
                    "replicas": spec.slices,
                    "template": {
                        "spec": {
                            "backoffLimit": 4 * tpu.vms,  # xpk: 32 for a v5p-64 slice
                            "completionMode": "Indexed",
                            "completions": tpu.vms,
                            "parallelism": tpu.vms,
                            "template": {
                                "metadata": {"labels": _labels(spec)},
                                "spec": {
                                    "hostNetwork": True,
                                    "dnsPolicy": "ClusterFirstWithHostNet",
                                    "terminationGracePeriodSeconds": spec.termination_grace_s,
                                    "nodeSelector": _tpu_selector(spec),
                                    "containers": [
                                        {
                                            "name": "pathways-worker",
                                            "image": PATHWAYS_SERVER,
                                            "args": [
                                                "--server_port=29005",
                                                "--resource_manager_address=$(PATHWAYS_HEAD):29001",
                                            ],
                                            "env": [head_ref],
                                            "resources": {
                                                "limits": {"google.com/tpu": str(tpu.chips_per_vm)}
                                            },
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


def convert_command(spec: WorkloadSpec) -> str:
    """The conversion's command line (MaxText-style key=value overrides)."""
    parts = [
        spec.command or CONVERT_COMMAND,
        f"direction={spec.convert_direction}",
        f"base_output_directory={shlex.quote(spec.base_output_directory)}",
    ]
    if spec.convert_src:
        parts.append(f"src={shlex.quote(spec.convert_src)}")
    if spec.hf_token_env:
        parts.append("hf_token_env=HF_TOKEN")  # the container's variable, never the value
    return " ".join(parts)


def convert_job(spec: WorkloadSpec) -> Obj:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": spec.name, "labels": _labels(spec)},
        "spec": {
            "backoffLimit": 1,
            "ttlSecondsAfterFinished": 43200,
            "template": {
                "metadata": {"labels": _labels(spec)},
                "spec": {
                    "restartPolicy": "Never",
                    "nodeSelector": {"cloud.google.com/gke-nodepool": CPU_POOL},
                    "terminationGracePeriodSeconds": spec.termination_grace_s,
                    "containers": [
                        {
                            "name": "convert",
                            "image": spec.image,
                            "env": _env(spec),
                            "command": ["bash", "-c", convert_command(spec)],
                        }
                    ],
                },
            },
        },
    }


def manifest(spec: WorkloadSpec) -> Obj:
    if spec.template == "pathways":
        return pathways_jobset(spec)
    if spec.template == "convert":
        return convert_job(spec)
    return standard_jobset(spec)


def secret(spec: WorkloadSpec, values: Mapping[str, str], namespace: str = "default") -> Obj:
    """The workload's Secret: container variable -> value (built only to be sent)."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": secret_name(spec),
            "namespace": namespace,
            "labels": {WORKLOAD_LABEL: spec.name},
        },
        "type": "Opaque",
        "data": {k: base64.b64encode(v.encode()).decode() for k, v in values.items()},
    }


def xpk_command(spec: WorkloadSpec, ref: ClusterRef) -> str:
    """The equivalent xpk command line (the Job of a conversion: kubectl apply)."""
    q = shlex.quote
    if spec.template == "convert":
        return f"kubectl apply -n {q(ref.namespace)} -f {q(spec.name)}.yaml"
    verb = "create-pathways" if spec.template == "pathways" else "create"
    parts = [
        f"xpk workload {verb}",
        f"--cluster {q(ref.cluster)}",
        f"--project {q(ref.project)}",
        f"--zone {q(ref.location)}",
        f"--workload {q(spec.name)}",
        f"--docker-image {q(spec.image)}",
        f"--tpu-type {q(spec.tpu_type)}",
        f"--num-slices {spec.slices}",
        f"--max-restarts {spec.max_restarts}",
        f"--termination-grace-period-seconds {spec.termination_grace_s}",
    ]
    if spec.spot and spec.template == "standard":
        parts.append("--spot")
    # Every variable the console's own manifest sets (_env), so the line run for real makes
    # the same container env: xpk adds none of its own.
    env = {
        "WORKLOAD_NAME": spec.name,
        "BASE_OUTPUT_DIRECTORY": spec.base_output_directory,
        "RUN_NAME": spec.effective_run_name,
        **({"MAXTEXT_CKPT_PATH": spec.maxtext_ckpt_path} if spec.maxtext_ckpt_path else {}),
        **spec.plain_env(),
    }
    parts += [f"--env {q(f'{k}={v}')}" for k, v in env.items()]
    # A reference stays a reference: the shell that runs xpk expands it, we never do.
    parts += [f'--env "{var}=${name}"' for var, name in sorted(spec.secret_refs().items())]
    parts.append(f"--command {q(spec.command)}")
    return " \\\n  ".join(parts)


def workload_url(name: str, template: str, ref: ClusterRef) -> str:
    kind = "job" if template == "convert" else "service"
    return (
        f"https://console.cloud.google.com/kubernetes/{kind}/{ref.location}/{ref.cluster}/"
        f"{ref.namespace}/{name}/details?project={ref.project}"
    )


def logs_url(name: str, template: str, ref: ClusterRef, obj: Obj | None = None) -> str:
    """xpk's Cloud Logging query for the coordinator pod's container logs (past day);
    ``obj``, the workload's JobSet, names its coordinator whatever its replicated jobs."""
    log_filter = "\n".join(
        (
            'resource.type="k8s_container"',
            f'resource.labels.project_id="{ref.project}"',
            f'resource.labels.location="{ref.location}"',
            f'resource.labels.cluster_name="{ref.cluster}"',
            f'resource.labels.namespace_name="{ref.namespace}"',
            f'resource.labels.pod_name:"{coordinator_prefix(name, template, obj)}"',
            "severity>=DEFAULT",
        )
    )
    encoded = urllib.parse.quote(log_filter, safe="")
    return (
        "https://console.cloud.google.com/logs/query;"
        f"query={encoded};storageScope=project;duration=P1D?project={ref.project}"
    )


def preview(spec: WorkloadSpec, ref: ClusterRef) -> WorkloadPreview:
    obj = manifest(spec)
    keys = tuple(sorted(spec.secret_refs()))
    return WorkloadPreview(
        name=spec.name,
        kind=str(obj["kind"]),
        manifest=obj,
        manifest_yaml=yaml.safe_dump(obj, sort_keys=False, width=100),
        command_line=xpk_command(spec, ref),
        console_url=workload_url(spec.name, spec.template, ref),
        logs_url=logs_url(spec.name, spec.template, ref, obj),
        secret_name=secret_name(spec) if keys else "",
        secret_keys=keys,
        output_uri=spec.output_uri,
    )


def labels_of(obj: Obj) -> dict[str, Any]:
    return dict((obj.get("metadata") or {}).get("labels") or {})
