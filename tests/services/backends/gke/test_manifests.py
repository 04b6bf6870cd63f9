"""A WorkloadSpec as xpk would make it: the standard and Pathways JobSets, the conversion
Job, the `xpk workload create[-pathways]` line and the Cloud Console links — secrets only
ever by reference; and the API server (the emulator's) accepts each manifest."""

from __future__ import annotations

import urllib.parse

import yaml

from console.services.backends.gke import manifests as M
from console.services.backends.gke.client import AsyncioKubeApi
from console.services.backends.gke.kube import Resource
from console.services.jobs.workload import WorkloadSpec
from emulators.gke import client as gke_client
from tests.support.fixtures_gke import RESTART_CODES, gke_module

__all__ = ["gke_module"]

REF = M.ClusterRef(project="my-proj", location="us-central1", cluster="rl-cluster")
SPEC = WorkloadSpec(
    name="gptoss-rl",
    image="gcr.io/my-proj/maxtext-rl:v1",
    command="bash run_gptoss_20b_rl.sh",
    tpu_type="v5p-64",
    slices=2,
    max_restarts=4,
    env={"STEPS": "100", "WANDB_API_KEY": "$MY_WANDB_KEY"},
    base_output_directory="gs://my-bucket/maxtext-runs",
    maxtext_ckpt_path="gs://my-bucket/gpt-oss-20b/0/items",
    termination_grace_s=45,
)


def pod_spec(js: dict, job: int = 0) -> dict:
    return js["spec"]["replicatedJobs"][job]["template"]["spec"]["template"]["spec"]


def test_standard_jobset_is_what_xpk_applies() -> None:
    js = M.standard_jobset(SPEC)
    assert (
        js["kind"] == "JobSet" and js["metadata"]["labels"]["xpk.google.com/workload"] == SPEC.name
    )
    assert js["spec"]["failurePolicy"]["maxRestarts"] == 4
    assert js["spec"]["failurePolicy"]["rules"] == [
        {"action": "FailJobSet", "onJobFailureReasons": ["PodFailurePolicy"]}
    ]
    rj = js["spec"]["replicatedJobs"][0]
    assert (rj["name"], rj["replicas"]) == ("slice-job", 2)
    jspec = rj["template"]["spec"]
    assert (jspec["parallelism"], jspec["completions"], jspec["backoffLimit"]) == (8, 8, 0)
    rule = jspec["podFailurePolicy"]["rules"][0]
    assert rule["action"] == "FailJob" and rule["onExitCodes"]["values"] == RESTART_CODES
    ps = pod_spec(js)
    assert ps["nodeSelector"] == {
        "cloud.google.com/gke-tpu-accelerator": "tpu-v5p-slice",
        "cloud.google.com/gke-tpu-topology": "2x4x4",
        "cloud.google.com/gke-spot": "true",
    }
    assert ps["terminationGracePeriodSeconds"] == 45
    c = ps["containers"][0]
    assert c["name"] == "jax-tpu" and c["resources"]["limits"]["google.com/tpu"] == 4
    assert "(bash run_gptoss_20b_rl.sh) & PID=$!" in c["command"][2]
    env = {e["name"]: e for e in c["env"]}
    assert env["BASE_OUTPUT_DIRECTORY"]["value"] == "gs://my-bucket/maxtext-runs"
    assert env["RUN_NAME"]["value"] == "gptoss-rl"
    assert env["MAXTEXT_CKPT_PATH"]["value"] == "gs://my-bucket/gpt-oss-20b/0/items"
    for var in ("HF_TOKEN", "WANDB_API_KEY"):
        assert env[var]["valueFrom"]["secretKeyRef"] == {
            "name": "gptoss-rl-phantom-env",
            "key": var,
        }
        assert "value" not in env[var]


def test_pathways_jobset_has_a_cpu_head_and_workers_per_slice() -> None:
    js = M.pathways_jobset(WorkloadSpec(**{**SPEC.__dict__, "template": "pathways"}))
    head, workers = js["spec"]["replicatedJobs"]
    assert (head["name"], workers["name"], workers["replicas"]) == ("pathways-head", "worker", 2)
    assert js["spec"]["coordinator"] == {"replicatedJob": "pathways-head"}
    hs = pod_spec(js, 0)
    assert hs["nodeSelector"] == {"cloud.google.com/gke-nodepool": "cpu-np"}
    assert [c["name"] for c in hs["initContainers"]] == ["pathways-proxy", "pathways-rm"]
    assert "--instance_count=2" in hs["initContainers"][1]["args"]
    # xpk wraps the head's command as it wraps a standard workload's (SIGTERM forwarded)
    assert hs["containers"][0]["command"] == [
        "bash",
        "-c",
        M.XPK_WRAPPER.format(command=SPEC.command),
    ]
    assert {"name": "XCLOUD_ENVIRONMENT", "value": "GCP"} in hs["containers"][0]["env"]
    assert js["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "multislice-queue"
    ws = pod_spec(js, 1)
    assert ws["restartPolicy"] == "OnFailure" and ws["containers"][0]["name"] == "pathways-worker"


def test_run_location_of_a_jobset_made_elsewhere_is_read_from_its_env() -> None:
    """An xpk- or kubectl-made JobSet carries no console label: where it writes comes from
    the coordinator's env, as the seed's run script reads it."""
    for js in (M.standard_jobset(SPEC), M.pathways_jobset(SPEC)):
        js["metadata"]["labels"] = {}
        assert M.run_location(js) == ("gptoss-rl", "gs://my-bucket/maxtext-runs/gptoss-rl")
    js = M.standard_jobset(SPEC)
    env = pod_spec(js)["containers"][0]["env"]
    pod_spec(js)["containers"][0]["env"] = [
        {"name": "BASE_OUTPUT_DIRECTORY", "value": "gs://b/runs/"},
        {"name": "WORKLOAD_NAME", "value": "w1"},
    ]
    assert M.run_location(js) == ("w1", "gs://b/runs/w1")  # RUN_NAME defaults to the workload
    pod_spec(js)["containers"][0]["env"] = [e for e in env if e["name"] != "BASE_OUTPUT_DIRECTORY"]
    assert M.run_location(js) is None
    assert M.run_location(M.convert_job(SPEC)) is None


def test_conversion_is_a_job_with_its_command() -> None:
    spec = WorkloadSpec(
        name="to-maxtext",
        template="convert",
        image="gcr.io/my-proj/maxtext-rl:v1",
        command="bash convert_checkpoint.sh",
        base_output_directory="gs://my-bucket/gpt-oss-20b",
    )
    job = M.convert_job(spec)
    assert job["kind"] == "Job" and job["apiVersion"] == "batch/v1"
    cmd = job["spec"]["template"]["spec"]["containers"][0]["command"][2]
    assert cmd == (
        "bash convert_checkpoint.sh direction=to_maxtext "
        "base_output_directory=gs://my-bucket/gpt-oss-20b hf_token_env=HF_TOKEN"
    )


def test_preview_names_secrets_and_never_holds_them() -> None:
    pv = M.preview(SPEC, REF)
    assert pv.secret_name == "gptoss-rl-phantom-env"
    assert pv.secret_keys == ("HF_TOKEN", "WANDB_API_KEY")
    assert yaml.safe_load(pv.manifest_yaml) == pv.manifest
    line = pv.command_line
    assert line.startswith("xpk workload create \\\n  --cluster rl-cluster")
    for part in (
        "--project my-proj",
        "--zone us-central1",
        "--workload gptoss-rl",
        "--docker-image gcr.io/my-proj/maxtext-rl:v1",
        "--tpu-type v5p-64",
        "--num-slices 2",
        "--max-restarts 4",
        "--termination-grace-period-seconds 45",
        "--spot",
        "--env STEPS=100",
        '--env "HF_TOKEN=$HF_TOKEN"',
        '--env "WANDB_API_KEY=$MY_WANDB_KEY"',
        "--command 'bash run_gptoss_20b_rl.sh'",
    ):
        assert part in line, part
    pathways = M.preview(WorkloadSpec(**{**SPEC.__dict__, "template": "pathways"}), REF)
    assert pathways.command_line.startswith("xpk workload create-pathways")


def test_cloud_console_links_are_xpks() -> None:
    pv = M.preview(SPEC, REF)
    assert pv.console_url == (
        "https://console.cloud.google.com/kubernetes/service/us-central1/rl-cluster/default/"
        "gptoss-rl/details?project=my-proj"
    )
    head, _, tail = pv.logs_url.partition("query=")
    assert head == "https://console.cloud.google.com/logs/query;"
    query = urllib.parse.unquote(tail.split(";")[0])
    assert 'resource.labels.pod_name:"gptoss-rl-slice-job-0-0-"' in query
    assert 'resource.labels.cluster_name="rl-cluster"' in query
    assert pv.logs_url.endswith(";storageScope=project;duration=P1D?project=my-proj")


async def test_the_api_server_accepts_every_template(gke_module: gke_client.GkeInfo) -> None:
    api = await AsyncioKubeApi.connect(gke_module.kubeconfig)
    try:
        for template in ("standard", "pathways", "convert"):
            spec = WorkloadSpec(
                **{**SPEC.__dict__, "template": template, "name": f"dry-{template}"}
            )
            kind = Resource.JOBS if template == "convert" else Resource.JOBSETS
            stored = await api.create(kind, M.manifest(spec), dry_run=True)
            assert stored["metadata"]["name"] == f"dry-{template}"
    finally:
        await api.close()
