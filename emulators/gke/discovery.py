"""The API surface the emulator serves: its resources, /version and legacy discovery."""

from __future__ import annotations

from dataclasses import dataclass

from emulators.gke import layout as L
from emulators.gke.store import Obj


@dataclass(frozen=True)
class Resource:
    name: str
    singular: str
    kind: str
    group: str
    version: str
    namespaced: bool
    verbs: tuple[str, ...]
    short: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()

    @property
    def group_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def qualified(self) -> str:
        """``jobsets.jobset.x-k8s.io`` / ``pods`` as error messages name a resource."""
        return f"{self.name}.{self.group}" if self.group else self.name


READ = ("get", "list", "watch")
WRITE = ("create", "delete", "update", "patch")
RESOURCES = (
    Resource("pods", "pod", "Pod", "", "v1", True, (*READ, *WRITE), ("po",), ("all",)),
    # patch/update: `kubectl cordon`, `uncordon` and `drain` (spec.unschedulable)
    Resource("nodes", "node", "Node", "", "v1", False, (*READ, "patch", "update"), ("no",)),
    Resource("events", "event", "Event", "", "v1", True, READ, ("ev",)),
    Resource("namespaces", "namespace", "Namespace", "", "v1", False, (*READ, "create"), ("ns",)),
    Resource(
        "secrets",
        "secret",
        "Secret",
        "",
        "v1",
        True,
        (*READ, "create", "delete", "update", "patch"),
    ),
    Resource("configmaps", "configmap", "ConfigMap", "", "v1", True, (*READ, *WRITE), ("cm",)),
    Resource("services", "service", "Service", "", "v1", True, (*READ, *WRITE), ("svc",), ("all",)),
    Resource(
        "serviceaccounts",
        "serviceaccount",
        "ServiceAccount",
        "",
        "v1",
        True,
        (*READ, *WRITE),
        ("sa",),
    ),
    Resource("jobs", "job", "Job", "batch", "v1", True, (*READ, *WRITE), (), ("all",)),
    # xpk's five (priority.py), which `xpk workload create --priority` names on its pods.
    Resource(
        "priorityclasses",
        "priorityclass",
        "PriorityClass",
        "scheduling.k8s.io",
        "v1",
        False,
        (*READ, *WRITE),
        ("pc",),
    ),
    Resource(
        "jobsets",
        "jobset",
        "JobSet",
        "jobset.x-k8s.io",
        "v1alpha2",
        True,
        (*READ, "create", "delete", "patch", "update"),
    ),
    # What xpk reads and writes besides JobSets (kueue.py): Kueue's objects, and the Role
    # and RoleBindings `xpk workload create` makes for its service account.
    Resource(
        "workloads",
        "workload",
        "Workload",
        "kueue.x-k8s.io",
        "v1beta1",
        True,
        (*READ, *WRITE),
        ("wl",),
        ("kueue",),
    ),
    Resource(
        "localqueues",
        "localqueue",
        "LocalQueue",
        "kueue.x-k8s.io",
        "v1beta1",
        True,
        (*READ, *WRITE),
        ("queue", "queues", "lq"),
        ("kueue",),
    ),
    Resource(
        "clusterqueues",
        "clusterqueue",
        "ClusterQueue",
        "kueue.x-k8s.io",
        "v1beta1",
        False,
        (*READ, *WRITE),
        ("cq",),
        ("kueue",),
    ),
    Resource(
        "resourceflavors",
        "resourceflavor",
        "ResourceFlavor",
        "kueue.x-k8s.io",
        "v1beta1",
        False,
        (*READ, *WRITE),
        ("flavor", "flavors", "rf"),
        ("kueue",),
    ),
    Resource("roles", "role", "Role", "rbac.authorization.k8s.io", "v1", True, (*READ, *WRITE)),
    Resource(
        "rolebindings",
        "rolebinding",
        "RoleBinding",
        "rbac.authorization.k8s.io",
        "v1",
        True,
        (*READ, *WRITE),
    ),
)
SUBRESOURCES = {
    ("", "v1"): [
        {
            "name": "pods/log",
            "singularName": "",
            "namespaced": True,
            "kind": "Pod",
            "verbs": ["get"],
        },
        # The Eviction API (policy/v1), which `kubectl drain` finds by this entry's group,
        # version and kind and posts to (pods/NAME/eviction).
        {
            "name": "pods/eviction",
            "singularName": "",
            "namespaced": True,
            "group": "policy",
            "version": "v1",
            "kind": "Eviction",
            "verbs": ["create"],
        },
        {
            "name": "pods/status",
            "singularName": "",
            "namespaced": True,
            "kind": "Pod",
            "verbs": ["get"],
        },
    ],
    ("jobset.x-k8s.io", "v1alpha2"): [
        {
            "name": "jobsets/status",
            "singularName": "",
            "namespaced": True,
            "kind": "JobSet",
            "verbs": ["get"],
        },
    ],
    ("batch", "v1"): [
        {
            "name": "jobs/status",
            "singularName": "",
            "namespaced": True,
            "kind": "Job",
            "verbs": ["get"],
        },
    ],
}
GROUPS = (
    ("batch", "v1"),
    ("jobset.x-k8s.io", "v1alpha2"),
    ("kueue.x-k8s.io", "v1beta1"),
    ("rbac.authorization.k8s.io", "v1"),
    ("scheduling.k8s.io", "v1"),
)


def find(group: str, version: str, name: str) -> Resource | None:
    for r in RESOURCES:
        if (r.group, r.version, r.name) == (group, version, name):
            return r
    return None


def by_name(name: str) -> Resource:
    for r in RESOURCES:
        if r.name == name:
            return r
    raise KeyError(name)


def version_info() -> Obj:
    return {
        "major": "1",
        "minor": "33",
        "emulationMajor": "1",
        "emulationMinor": "33",
        "minCompatibilityMajor": "1",
        "minCompatibilityMinor": "32",
        "gitVersion": L.GIT_VERSION,
        "gitCommit": "6a9e52fd77d00a1a1bd7e7b8cbea5d2d3a4f8c1e",
        "gitTreeState": "clean",
        "buildDate": "2025-08-07T09:10:12Z",
        "goVersion": "go1.24.5 X:boringcrypto",
        "compiler": "gc",
        "platform": "linux/amd64",
    }


def api_versions(server: str) -> Obj:
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server}],
    }


def _group(name: str, version: str) -> Obj:
    gv = {"groupVersion": f"{name}/{version}", "version": version}
    return {"name": name, "versions": [gv], "preferredVersion": gv}


def api_group_list() -> Obj:
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": [_group(g, v) for g, v in GROUPS]}


def api_group(name: str) -> Obj | None:
    for g, v in GROUPS:
        if g == name:
            return {"kind": "APIGroup", "apiVersion": "v1", **_group(g, v)}
    return None


def resource_list(group: str, version: str) -> Obj | None:
    mine = [r for r in RESOURCES if (r.group, r.version) == (group, version)]
    if not mine:
        return None
    resources = [
        {
            "name": r.name,
            "singularName": r.singular,
            "namespaced": r.namespaced,
            "kind": r.kind,
            "verbs": list(r.verbs),
            **({"shortNames": list(r.short)} if r.short else {}),
            **({"categories": list(r.categories)} if r.categories else {}),
        }
        for r in mine
    ]
    resources += SUBRESOURCES.get((group, version), [])
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{group}/{version}" if group else version,
        "resources": resources,
    }
