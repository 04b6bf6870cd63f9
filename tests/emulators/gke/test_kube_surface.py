"""The Kubernetes surface real clients rely on, judged by the real kubectl: health and
version endpoints, `kubectl explain` from the published OpenAPI, server-side apply that
creates, dry runs that change nothing (`kubectl diff`, `--dry-run=server`), strict and
warn field validation with the API server's wording, ConfigMap/Service/ServiceAccount,
and the JobSet controller's headless Service. The manifests are written here, by hand."""

from __future__ import annotations

import json
import os
import subprocess
import urllib.request
from pathlib import Path

import pytest

from emulators.gke import client as gke_client
from tests.support.fixtures_gke import gke_module, kubectl
from tests.support.waiting import wait_until

__all__ = ["gke_module"]

SETTINGS = """\
apiVersion: v1
kind: ConfigMap
metadata:
  name: settings
  labels:
    team: rl
data:
  learning_rate: "{lr}"
"""

# A Job with two typos: one in the Job's own spec, one inside its pod template.
TYPO_JOB = """\
apiVersion: batch/v1
kind: Job
metadata:
  name: typo-job
spec:
  backofLimit: 2
  template:
    spec:
      restartPolicy: Never
      nodeSelectr:
        cloud.google.com/gke-nodepool: cpu-np
      containers:
      - name: main
        image: busybox:1.36
        command: ["true"]
"""

TYPO_POD = """\
apiVersion: v1
kind: Pod
metadata:
  name: typo-pod
spec:
  containers:
  - name: main
    image: busybox:1.36
    imagePullPolicyy: IfNotPresent
"""

# A JobSet that is not xpk's: its replicated job is "workers", two pods, DNS hostnames on.
WORKERS = """\
apiVersion: jobset.x-k8s.io/v1alpha2
kind: JobSet
metadata:
  name: {name}
spec:
  network:
    enableDNSHostnames: true
  failurePolicy:
    maxRestarts: {restarts}
  replicatedJobs:
  - name: workers
    replicas: 1
    template:
      spec:
        parallelism: 2
        completions: 2
        backoffLimit: 0
        template:
          spec:
            {typo}restartPolicy: Never
            containers:
            - name: main
              image: python:3.11
              command: ["sleep", "120"]
"""


# Each pod resolves its peer by the name the JobSet's headless Service gives it.
PEERS = """\
apiVersion: jobset.x-k8s.io/v1alpha2
kind: JobSet
metadata:
  name: net
spec:
  replicatedJobs:
  - name: workers
    template:
      spec:
        parallelism: 2
        completions: 2
        template:
          spec:
            restartPolicy: Never
            containers:
            - name: main
              image: python:3.11
              command:
              - python
              - -c
              - |
                import os, socket, time
                me = int(os.environ["JOB_COMPLETION_INDEX"])
                peer = f"net-workers-0-{1 - me}.net"
                deadline = time.time() + 20
                while True:
                    try:
                        print("peer", socket.gethostbyname(peer), flush=True)
                        break
                    except OSError:
                        if time.time() > deadline:
                            raise
                        time.sleep(0.2)  # sleep-noqa: the pod's own DNS retry
                full = f"net-workers-0-{me}.net.default.svc.cluster.local"
                print("self", socket.getaddrinfo(full, 80)[0][4][0], flush=True)
                time.sleep(120)  # sleep-noqa: the workers stay up for the test
"""


def run(
    info: gke_client.GkeInfo, *args: str, version: str = "1.33", stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "KUBECONFIG": str(info.kubeconfig), "HOME": str(info.run_dir)}
    return subprocess.run(
        [kubectl(version), *args], input=stdin, capture_output=True, text=True, timeout=60, env=env
    )


def ok(info: gke_client.GkeInfo, *args: str, **kw: str) -> str:
    proc = run(info, *args, **kw)
    assert proc.returncode == 0, f"kubectl {' '.join(args)}: {proc.stderr}"
    return proc.stdout


def get_json(info: gke_client.GkeInfo, *args: str) -> dict:  # type: ignore[type-arg]
    return dict(json.loads(ok(info, "get", *args, "-o", "json")))


def http_get(info: gke_client.GkeInfo, path: str) -> tuple[int, str, str]:
    try:
        with urllib.request.urlopen(info.server + path, timeout=10) as resp:
            return resp.status, resp.headers.get("Content-Type", ""), resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers.get("Content-Type", ""), exc.read().decode()


def test_health_and_version_endpoints(gke_module: gke_client.GkeInfo) -> None:
    for path in ("/healthz", "/livez", "/readyz", "/readyz/etcd", "/livez/ping"):
        assert http_get(gke_module, path)[::2] == (200, "ok"), path
    code, ctype, body = http_get(gke_module, "/readyz?verbose")
    assert code == 200 and ctype.startswith("text/plain")
    lines = body.splitlines()
    assert lines[0] == "[+]ping ok" and "[+]etcd ok" in lines and "[+]shutdown ok" in lines
    assert lines[-1] == "readyz check passed"
    body = http_get(gke_module, "/livez?verbose&exclude=etcd")[2]
    assert "[+]etcd excluded: ok" in body.splitlines() and body.endswith("livez check passed\n")
    assert http_get(gke_module, "/healthz?verbose")[2].endswith("healthz check passed\n")
    assert http_get(gke_module, "/readyz/nonesuch")[0] == 404
    version = json.loads(http_get(gke_module, "/version")[2])
    assert version["major"] == "1" and version["gitVersion"].startswith("v1.33.")
    # and as kubectl asks for them
    assert ok(gke_module, "get", "--raw", "/readyz?verbose").endswith("readyz check passed\n")
    assert "Server Version: v1.33." in ok(gke_module, "version")


@pytest.mark.parametrize("version", ["1.33", "1.27"])
def test_kubectl_explain_prints_fields(gke_module: gke_client.GkeInfo, version: str) -> None:
    out = ok(gke_module, "explain", "jobset.spec.failurePolicy", version=version)
    assert "KIND:       JobSet" in out and "FIELD: failurePolicy <Object>" in out
    assert "maxRestarts\t<integer>" in out and "rules\t<[]Object>" in out
    out = ok(gke_module, "explain", "pod.spec.containers", version=version)
    assert "FIELD: containers <[]Object>" in out and "image\t<string>" in out
    out = ok(gke_module, "explain", "job.spec.backoffLimit", version=version)
    assert "FIELD: backoffLimit <integer>" in out
    assert "<map[string]string>" in ok(gke_module, "explain", "configmap.data", version=version)


def test_server_side_apply_creates_and_dry_runs_change_nothing(
    gke_module: gke_client.GkeInfo, tmp_path: Path
) -> None:
    path = tmp_path / "settings.yaml"
    path.write_text(SETTINGS.format(lr="0.001"))
    assert ok(gke_module, "apply", "--server-side", "-f", str(path)).strip() == (
        "configmap/settings serverside-applied"
    )
    live = get_json(gke_module, "configmap", "settings")
    assert live["data"] == {"learning_rate": "0.001"}
    path.write_text(SETTINGS.format(lr="0.002"))
    for extra in ([], ["--server-side"]):
        diff = run(gke_module, "diff", *extra, "-f", str(path))
        assert diff.returncode == 1, diff.stderr  # 1: differences found
        assert '-  learning_rate: "0.001"' in diff.stdout
        assert '+  learning_rate: "0.002"' in diff.stdout
    out = ok(gke_module, "apply", "--server-side", "--dry-run=server", "-f", str(path))
    assert out.strip() == "configmap/settings serverside-applied (server dry run)"
    patched = ok(
        gke_module,
        "patch",
        "configmap",
        "settings",
        "--dry-run=server",
        "-p",
        '{"data":{"learning_rate":"9"}}',
        "-o",
        "jsonpath={.data.learning_rate}",
    )
    assert patched == "9"  # the answer is what would be...
    out = ok(gke_module, "delete", "configmap", "settings", "--dry-run=server")
    assert out.strip() == 'configmap "settings" deleted (server dry run)'
    assert get_json(gke_module, "configmap", "settings") == live  # ...and nothing changed
    # and the apply for real
    ok(gke_module, "apply", "--server-side", "-f", str(path))
    assert get_json(gke_module, "configmap", "settings")["data"]["learning_rate"] == "0.002"
    ok(gke_module, "delete", "configmap", "settings")

    # a JobSet (a custom resource: merge patches) created by server-side apply
    path = tmp_path / "ssa.yaml"
    path.write_text(WORKERS.format(name="ssa", restarts=2, typo=""))
    assert ok(gke_module, "apply", "--server-side", "-f", str(path)).strip() == (
        "jobset.jobset.x-k8s.io/ssa serverside-applied"
    )
    before = get_json(gke_module, "jobset", "ssa")
    labelled = WORKERS.format(name="ssa", restarts=2, typo="")
    path.write_text(labelled.replace("  name: ssa\n", "  name: ssa\n  labels:\n    stage: two\n"))
    for extra in ([], ["--server-side"]):
        diff = run(gke_module, "diff", *extra, "-f", str(path))
        assert "+    stage: two" in diff.stdout, (diff.stdout, diff.stderr)
    after = get_json(gke_module, "jobset", "ssa")  # (its status moves on: the pods start)
    assert after["spec"] == before["spec"] and "labels" not in after["metadata"]
    ok(gke_module, "delete", "jobset", "ssa")


@pytest.mark.parametrize("version", ["1.33", "1.27"])
def test_a_typo_inside_a_pod_template_is_refused(
    gke_module: gke_client.GkeInfo, tmp_path: Path, version: str
) -> None:
    job = tmp_path / "job.yaml"
    job.write_text(TYPO_JOB)
    bad = run(gke_module, "apply", "-f", str(job), version=version)
    assert bad.returncode == 1
    assert (
        'Job in version "v1" cannot be handled as a Job: strict decoding error: '
        'unknown field "spec.backofLimit", unknown field "spec.template.spec.nodeSelectr"'
    ) in bad.stderr
    pod = tmp_path / "pod.yaml"
    pod.write_text(TYPO_POD)
    bad = run(gke_module, "create", "--validate=strict", "-f", str(pod), version=version)
    assert 'unknown field "spec.containers[0].imagePullPolicyy"' in bad.stderr
    js = tmp_path / "js.yaml"
    js.write_text(
        WORKERS.format(name=f"typo{version[-2:]}", restarts=0, typo="nodeSelectr: {}\n            ")
    )
    bad = run(gke_module, "apply", "-f", str(js), version=version)
    assert (
        'JobSet in version "v1alpha2" cannot be handled as a JobSet: strict decoding error: '
        'unknown field "spec.replicatedJobs[0].template.spec.template.spec.nodeSelectr"'
    ) in bad.stderr, bad.stderr
    names = ok(gke_module, "get", "jobs,pods,jobsets", "-o", "name")
    assert "typo" not in names


def test_warn_prints_one_warning_per_unknown_field(
    gke_module: gke_client.GkeInfo, tmp_path: Path
) -> None:
    job = tmp_path / "job.yaml"
    job.write_text(TYPO_JOB.replace("typo-job", "warned-job"))
    proc = run(gke_module, "create", "--validate=warn", "-f", str(job))
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines() == [
        'Warning: unknown field "spec.backofLimit"',
        'Warning: unknown field "spec.template.spec.nodeSelectr"',
    ]
    stored = get_json(gke_module, "job", "warned-job")["spec"]
    assert "backofLimit" not in stored and stored["backoffLimit"] == 6  # pruned, defaulted
    assert "nodeSelectr" not in stored["template"]["spec"]
    # the raw header: a well-formed quoted-string with its inner quotes escaped
    req = urllib.request.Request(
        f"{gke_module.server}/api/v1/namespaces/default/configmaps?fieldValidation=Warn&dryRun=All",
        data=json.dumps(
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "w"}, "dta": {}}
        ).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(req, timeout=10) as resp:
        assert resp.headers.get_all("Warning") == ['299 - "unknown field \\"dta\\""']
    ok(gke_module, "delete", "job", "warned-job")


def test_configmap_service_serviceaccount(gke_module: gke_client.GkeInfo, tmp_path: Path) -> None:
    manifest = tmp_path / "core.yaml"
    manifest.write_text(
        """\
apiVersion: v1
kind: ServiceAccount
metadata:
  name: trainer
---
apiVersion: v1
kind: Service
metadata:
  name: tensorboard
spec:
  selector:
    app: tensorboard
  ports:
  - port: 6006
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: knobs
data:
  a: "1"
  b: "2"
"""
    )
    out = ok(gke_module, "apply", "-f", str(manifest)).split("\n")
    assert out[:3] == [
        "serviceaccount/trainer created",
        "service/tensorboard created",
        "configmap/knobs created",
    ]
    table = ok(gke_module, "get", "svc", "tensorboard").splitlines()
    assert table[0].split() == ["NAME", "TYPE", "CLUSTER-IP", "EXTERNAL-IP", "PORT(S)", "AGE"]
    cells = table[1].split()
    assert cells[:2] == ["tensorboard", "ClusterIP"] and cells[3:5] == ["<none>", "6006/TCP"]
    assert cells[2].startswith("34.118.")
    assert ok(gke_module, "get", "cm", "knobs").splitlines()[1].split()[:2] == ["knobs", "2"]
    sas = ok(gke_module, "get", "sa", "-o", "name").split()
    assert sas == ["serviceaccount/default", "serviceaccount/trainer"]
    # update: apply again with a change, then label; the ClusterIP stays
    ip = cells[2]
    manifest.write_text(manifest.read_text().replace('b: "2"', 'b: "3"'))
    assert "configmap/knobs configured" in ok(gke_module, "apply", "-f", str(manifest))
    assert get_json(gke_module, "cm", "knobs")["data"] == {"a": "1", "b": "3"}
    ok(gke_module, "label", "svc", "tensorboard", "tier=ui")
    svc = get_json(gke_module, "svc", "tensorboard")
    assert svc["metadata"]["labels"] == {"tier": "ui"} and svc["spec"]["clusterIP"] == ip
    # watch: a new ConfigMap shows up in `kubectl get cm -w`
    env = {**os.environ, "KUBECONFIG": str(gke_module.kubeconfig)}
    watch = subprocess.Popen(
        [kubectl("1.33"), "get", "cm", "-w", "--output-watch-events"],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert watch.stdout is not None
        assert watch.stdout.readline().split()[:2] == ["EVENT", "NAME"]
        # the ConfigMaps there are, in name order: xpk's two are there from the start
        first = [watch.stdout.readline().split()[:2] for _ in range(3)]
        assert [name for _, name in first] == [
            "knobs",
            "phantom-gke-metadata-configmap",
            "phantom-gke-resources-configmap",
        ]
        ok(gke_module, "create", "configmap", "later", "--from-literal=x=y")
        assert watch.stdout.readline().split()[:2] == ["ADDED", "later"]
    finally:
        watch.terminate()
        watch.wait(10)
    ok(gke_module, "delete", "-f", str(manifest))
    ok(gke_module, "delete", "cm", "later")
    left = ok(gke_module, "get", "cm,svc,sa", "-o", "name").split()
    assert not {"configmap/knobs", "configmap/later", "service/tensorboard"} & set(left)
    assert "serviceaccount/trainer" not in left and "service/kubernetes" in left


def test_jobset_headless_service_and_pod_hostnames(
    gke_module: gke_client.GkeInfo, tmp_path: Path
) -> None:
    path = tmp_path / "net.yaml"
    path.write_text(PEERS)
    ok(gke_module, "apply", "-f", str(path))
    selector = "jobset.sigs.k8s.io/jobset-name=net"

    def pods() -> list[dict]:  # type: ignore[type-arg]
        return list(get_json(gke_module, "pods", "-l", selector)["items"])

    wait_until(
        lambda: len([p for p in pods() if p["status"].get("podIP")]) == 2, 30, "2 pods with IPs"
    )
    svc = get_json(gke_module, "service", "net")
    assert svc["spec"]["clusterIP"] == "None"
    assert svc["spec"]["selector"] == {"jobset.sigs.k8s.io/jobset-name": "net"}
    assert svc["metadata"]["ownerReferences"][0]["kind"] == "JobSet"
    by_host = {p["spec"]["hostname"]: p for p in pods()}
    assert sorted(by_host) == ["net-workers-0-0", "net-workers-0-1"]
    assert {p["spec"]["subdomain"] for p in by_host.values()} == {"net"}
    # Python in each container resolves its peer's name to the peer's pod IP
    for me, peer in (("0", "1"), ("1", "0")):
        pod = by_host[f"net-workers-0-{me}"]
        want = [
            f"peer {by_host[f'net-workers-0-{peer}']['status']['podIP']}",
            f"self {pod['status']['podIP']}",
        ]

        def printed(name: str = pod["metadata"]["name"], want: list[str] = want) -> bool:
            proc = run(gke_module, "logs", name)
            return proc.returncode == 0 and proc.stdout.splitlines()[:2] == want

        wait_until(printed, 30, f"pod {me} to resolve its peer and itself")
    ok(gke_module, "delete", "jobset", "net")
    wait_until(
        lambda: "service/net" not in ok(gke_module, "get", "svc", "-o", "name"),
        30,
        "the headless Service collected with its JobSet",
    )
