"""Server-side printing: ``Accept: application/json;as=Table;g=meta.k8s.io;v=v1``.

Pods, nodes, jobs, events and secrets follow kubernetes' pkg/printers (printPod's READY,
STATUS and RESTARTS rules are kubeprint's, shared with the console); JobSets use the CRD's
additionalPrinterColumns.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from emulators.gke.store import Obj, parse_time
from kubeprint.pod import print_pod

_NAME_DOC = (
    "Name must be unique within a namespace. Is required when creating resources, although "
    "some resources may allow a client to request the generation of an appropriate name "
    "automatically. Name is primarily intended for creation idempotence and configuration "
    "definition. Cannot be updated. More info: "
    "https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names"
)
_AGE_DOC = (
    "CreationTimestamp is a timestamp representing the server time when this object was "
    "created. It is not guaranteed to be set in happens-before order across separate "
    "operations. Clients may not set this value. It is represented in RFC3339 form and is in "
    "UTC.\n\nPopulated by the system. Read-only. Null for lists. More info: "
    "https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata"
)


def human_duration(seconds: float) -> str:
    """apimachinery's duration.HumanDuration."""
    s = int(seconds)
    if s < -1:
        return "<invalid>"
    if s < 0:
        return "0s"
    if s < 120:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        return f"{minutes}m" if s % 60 == 0 else f"{minutes}m{s % 60}s"
    if minutes < 180:
        return f"{minutes}m"
    hours = s // 3600
    if hours < 8:
        return f"{hours}h" if minutes % 60 == 0 else f"{hours}h{minutes % 60}m"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        return f"{hours // 24}d" if hours % 24 == 0 else f"{hours // 24}d{hours % 24}h"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    return f"{hours // 24 // 365}y"


def since(stamp: str | None) -> str:
    if not stamp:
        return "<unknown>"
    return human_duration((datetime.now(UTC) - parse_time(stamp)).total_seconds())


def col(
    name: str, description: str = "", type_: str = "string", priority: int = 0, fmt: str = ""
) -> Obj:
    return {
        "name": name,
        "type": type_,
        "format": fmt,
        "description": description,
        "priority": priority,
    }


NAME_COL = col("Name", _NAME_DOC, fmt="name")
AGE_COL = col("Age", _AGE_DOC)


def pod_cells(pod: Obj) -> list[Any]:
    """printPod: NAME READY STATUS RESTARTS AGE | IP NODE NOMINATED NODE READINESS GATES."""
    spec, st = pod["spec"], pod.get("status") or {}
    printed = print_pod(pod)
    restarts, last_restart = printed.restarts, printed.last_restart
    restarts_text = str(restarts)
    if restarts and last_restart:
        restarts_text = f"{restarts} ({since(last_restart)} ago)"
    return [
        pod["metadata"]["name"],
        f"{printed.ready}/{printed.total}",
        printed.status,
        restarts_text,
        since(pod["metadata"].get("creationTimestamp")),
        st.get("podIP") or "<none>",
        spec.get("nodeName") or "<none>",
        st.get("nominatedNodeName") or "<none>",
        "<none>",
    ]


POD_COLUMNS = [
    NAME_COL,
    col("Ready", "The aggregate readiness state of this pod for accepting traffic."),
    col("Status", "The aggregate status of the containers in this pod."),
    col(
        "Restarts",
        "The number of times the containers in this pod have been restarted and "
        "when the last container in this pod has restarted.",
    ),
    AGE_COL,
    col(
        "IP",
        "IP address allocated to the pod. Routable at least within the cluster. Empty "
        "if not yet allocated.",
        priority=1,
    ),
    col("Node", "NodeName is a request to schedule this pod onto a specific node.", priority=1),
    col(
        "Nominated Node",
        "nominatedNodeName is set when this pod preempts other pods on the node.",
        priority=1,
    ),
    col(
        "Readiness Gates",
        "If specified, all readiness gates will be evaluated for pod readiness.",
        priority=1,
    ),
]


def node_cells(node: Obj) -> list[Any]:
    st = node.get("status") or {}
    ready = "Unknown"
    for c in st.get("conditions") or []:
        if c.get("type") == "Ready":
            ready = "Ready" if c.get("status") == "True" else "NotReady"
    if node["spec"].get("unschedulable"):
        ready += ",SchedulingDisabled"
    addresses = {a["type"]: a["address"] for a in st.get("addresses") or []}
    info = st.get("nodeInfo") or {}
    return [
        node["metadata"]["name"],
        ready,
        "<none>",
        since(node["metadata"].get("creationTimestamp")),
        info.get("kubeletVersion", ""),
        addresses.get("InternalIP", "<none>"),
        addresses.get("ExternalIP", "<none>"),
        info.get("osImage", "<unknown>"),
        info.get("kernelVersion", "<unknown>"),
        info.get("containerRuntimeVersion", "<unknown>"),
    ]


NODE_COLUMNS = [
    NAME_COL,
    col("Status", "The status of the node"),
    col("Roles", "The roles of the node"),
    AGE_COL,
    col("Version", "Kubelet Version reported by the node."),
    col("Internal-IP", "List of addresses reachable to the node.", priority=1),
    col("External-IP", "List of addresses reachable to the node.", priority=1),
    col("OS-Image", "OS Image reported by the node from /etc/os-release.", priority=1),
    col("Kernel-Version", "Kernel Version reported by the node.", priority=1),
    col("Container-Runtime", "Container Runtime Version reported by the node.", priority=1),
]


def _job_status(job: Obj) -> str:
    for t in ("Failed", "Complete", "Suspended", "FailureTarget", "SuccessCriteriaMet"):
        for c in (job.get("status") or {}).get("conditions") or []:
            if c.get("type") == t and c.get("status") == "True":
                return {
                    "Failed": "Failed",
                    "Complete": "Complete",
                    "Suspended": "Suspended",
                    "FailureTarget": "FailureTarget",
                    "SuccessCriteriaMet": "SuccessCriteriaMet",
                }[t]
    if job["metadata"].get("deletionTimestamp"):
        return "Terminating"
    return "Running"


def job_cells(job: Obj) -> list[Any]:
    spec, st = job["spec"], job.get("status") or {}
    completions = spec.get("completions")
    succeeded = int(st.get("succeeded", 0))
    done = (
        f"{succeeded}/{completions}"
        if completions is not None
        else f"{succeeded}/1 of {spec.get('parallelism', 1)}"
    )
    start, end = st.get("startTime"), st.get("completionTime")
    if start and end:
        duration = human_duration((parse_time(end) - parse_time(start)).total_seconds())
    elif start:
        duration = since(start)
    else:
        duration = ""
    containers = spec["template"]["spec"].get("containers") or []
    return [
        job["metadata"]["name"],
        _job_status(job),
        done,
        duration,
        since(job["metadata"].get("creationTimestamp")),
        ",".join(c["name"] for c in containers),
        ",".join(c.get("image", "") for c in containers),
        ",".join(
            f"{k}={v}" for k, v in ((spec.get("selector") or {}).get("matchLabels") or {}).items()
        ),
    ]


JOB_COLUMNS = [
    NAME_COL,
    col("Status", "Status of the job."),
    col("Completions", "The completion status of the job"),
    col("Duration", "Time required to complete the job."),
    AGE_COL,
    col("Containers", "Names of each container in the template.", priority=1),
    col("Images", "Images referenced by each container in the template.", priority=1),
    col("Selector", "A label query over pods that should match the pod count.", priority=1),
]


def jobset_cells(js: Obj) -> list[Any]:
    st = js.get("status") or {}
    completed = None
    for c in st.get("conditions") or []:
        if c.get("type") == "Completed":
            completed = c.get("status")
    suspend = js["spec"].get("suspend")
    return [
        js["metadata"]["name"],
        st.get("terminalState"),
        str(st.get("restarts")) if st.get("restarts") is not None else None,
        completed,
        ("true" if suspend else "false") if suspend is not None else None,
        since(js["metadata"].get("creationTimestamp")),
    ]


JOBSET_COLUMNS = [
    NAME_COL,
    col("TerminalState", "Final state of JobSet"),
    col("Restarts", "Number of restarts"),
    col("Completed", ""),
    col("Suspended", "JobSet suspended"),
    col("Age", "Time this JobSet was created", type_="date"),
]


def event_cells(ev: Obj) -> list[Any]:
    inv = ev.get("involvedObject") or {}
    last = ev.get("lastTimestamp") or ev.get("eventTime")
    first = ev.get("firstTimestamp") or last
    src = ev.get("source") or {}
    return [
        since(last),
        ev.get("type", ""),
        ev.get("reason", ""),
        f"{str(inv.get('kind', '')).lower()}/{inv.get('name', '')}",
        ev.get("message", "").strip(),
        inv.get("fieldPath", ""),
        ", ".join(v for v in (src.get("component", ""), src.get("host", "")) if v),
        since(first),
        int(ev.get("count", 1)),
        ev["metadata"]["name"],
    ]


EVENT_COLUMNS = [
    col("Last Seen", "Time when last event occurred"),
    col("Type", "Type of this event (Normal, Warning), new types could be added in the future."),
    col("Reason", "Reason why this event was generated."),
    col("Object", "The object that this event is about."),
    col("Message", "A human-readable description of the status of this operation."),
    col("Subobject", "The subobject that this event is about.", priority=1),
    col("Source", "The component reporting this event.", priority=1),
    col("First Seen", "The time at which the event was first recorded.", priority=1),
    col("Count", "The number of times this event has occurred.", type_="integer", priority=1),
    col("Name", _NAME_DOC, priority=1, fmt="name"),
]


def secret_cells(s: Obj) -> list[Any]:
    return [
        s["metadata"]["name"],
        s.get("type", "Opaque"),
        len(s.get("data") or {}),
        since(s["metadata"].get("creationTimestamp")),
    ]


SECRET_COLUMNS = [
    NAME_COL,
    col("Type", "The type of the secret"),
    col("Data", "The number of data items", type_="integer"),
    AGE_COL,
]


def namespace_cells(ns: Obj) -> list[Any]:
    return [
        ns["metadata"]["name"],
        (ns.get("status") or {}).get("phase", "Active"),
        since(ns["metadata"].get("creationTimestamp")),
    ]


NAMESPACE_COLUMNS = [NAME_COL, col("Status", "The status of the namespace"), AGE_COL]


def configmap_cells(cm: Obj) -> list[Any]:
    data = len(cm.get("data") or {}) + len(cm.get("binaryData") or {})
    return [cm["metadata"]["name"], data, since(cm["metadata"].get("creationTimestamp"))]


CONFIGMAP_COLUMNS = [
    NAME_COL,
    col("Data", "Data contains the configuration data.", type_="integer"),
    AGE_COL,
]


def _ports(spec: Obj) -> str:
    out = []
    for p in spec.get("ports") or []:
        node = f":{p['nodePort']}" if p.get("nodePort") else ""
        out.append(f"{p.get('port')}{node}/{p.get('protocol', 'TCP')}")
    return ",".join(out) or "<none>"


def service_cells(svc: Obj) -> list[Any]:
    spec = svc.get("spec") or {}
    ingress = ((svc.get("status") or {}).get("loadBalancer") or {}).get("ingress") or []
    external = ",".join(i.get("ip") or i.get("hostname", "") for i in ingress)
    if spec.get("type") == "LoadBalancer" and not external:
        external = "<pending>"
    selector = ",".join(f"{k}={v}" for k, v in sorted((spec.get("selector") or {}).items()))
    return [
        svc["metadata"]["name"],
        spec.get("type", "ClusterIP"),
        spec.get("clusterIP", ""),
        external or ",".join(spec.get("externalIPs") or []) or "<none>",
        _ports(spec),
        since(svc["metadata"].get("creationTimestamp")),
        selector or "<none>",
    ]


SERVICE_COLUMNS = [
    NAME_COL,
    col("Type", "Type determines how the Service is exposed."),
    col("Cluster-IP", "The IP address of the service."),
    col("External-IP", "The list of external IPs of the service."),
    col("Port(s)", "The list of ports that are exposed by this service."),
    AGE_COL,
    col("Selector", "Route service traffic to pods matching this selector.", priority=1),
]


def serviceaccount_cells(sa: Obj) -> list[Any]:
    return [
        sa["metadata"]["name"],
        len(sa.get("secrets") or []),
        since(sa["metadata"].get("creationTimestamp")),
    ]


SERVICEACCOUNT_COLUMNS = [
    NAME_COL,
    col("Secrets", "Secrets of the service account.", type_="integer"),
    AGE_COL,
]


def workload_cells(wl: Obj) -> list[Any]:
    """Kueue's Workload CRD printer columns."""
    status = wl.get("status") or {}
    conds = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
    return [
        wl["metadata"]["name"],
        (wl.get("spec") or {}).get("queueName", ""),
        (status.get("admission") or {}).get("clusterQueue", ""),
        conds.get("Admitted", ""),
        conds.get("Finished", ""),
        since(wl["metadata"].get("creationTimestamp")),
    ]


WORKLOAD_COLUMNS = [
    NAME_COL,
    col("Queue", "Name of the queue this workload was submitted to"),
    col("Reserved in", "Name of the ClusterQueue where the workload is reserving quota"),
    col("Admitted", "Admission status"),
    col("Finished", "Workload finished"),
    AGE_COL,
]


def name_age_cells(obj: Obj) -> list[Any]:
    return [obj["metadata"]["name"], since(obj["metadata"].get("creationTimestamp"))]


def priorityclass_cells(pc: Obj) -> list[Any]:
    return [
        pc["metadata"]["name"],
        int(pc.get("value", 0)),
        bool(pc.get("globalDefault", False)),
        since(pc["metadata"].get("creationTimestamp")),
        pc.get("preemptionPolicy", "PreemptLowerPriority"),
    ]


PRIORITYCLASS_COLUMNS = [
    NAME_COL,
    col("Value", "The value of this priority class", "integer"),
    col("Global-Default", "Whether this is the default priority class", "boolean"),
    AGE_COL,
    col("PreemptionPolicy", "The preemption policy of this priority class"),
]


PRINTERS: dict[str, tuple[list[Obj], Callable[[Obj], list[Any]]]] = {
    "priorityclasses": (PRIORITYCLASS_COLUMNS, priorityclass_cells),
    "workloads": (WORKLOAD_COLUMNS, workload_cells),
    "pods": (POD_COLUMNS, pod_cells),
    "nodes": (NODE_COLUMNS, node_cells),
    "jobs": (JOB_COLUMNS, job_cells),
    "jobsets": (JOBSET_COLUMNS, jobset_cells),
    "events": (EVENT_COLUMNS, event_cells),
    "secrets": (SECRET_COLUMNS, secret_cells),
    "namespaces": (NAMESPACE_COLUMNS, namespace_cells),
    "configmaps": (CONFIGMAP_COLUMNS, configmap_cells),
    "services": (SERVICE_COLUMNS, service_cells),
    "serviceaccounts": (SERVICEACCOUNT_COLUMNS, serviceaccount_cells),
}


def to_table(resource: str, objs: list[Obj], rv: str, include: str, headers: bool = True) -> Obj:
    # A kind without its own printer gets the default one for custom resources.
    columns, cells = PRINTERS.get(resource, ([NAME_COL, AGE_COL], name_age_cells))
    rows = []
    for o in objs:
        row: Obj = {"cells": cells(o)}
        if include == "Object":
            row["object"] = o
        elif include != "None":
            row["object"] = {
                "kind": "PartialObjectMetadata",
                "apiVersion": "meta.k8s.io/v1",
                "metadata": o["metadata"],
            }
        rows.append(row)
    table: Obj = {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": rv},
        "rows": rows,
    }
    if headers:
        table["columnDefinitions"] = columns
    return table
