"""Preemption with notice (issue 15): per-host GCE metadata servers, SIGTERM, grace, SIGKILL."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
from google.cloud import tpu_v2

from emulators.tpu_pod import client
from emulators.tpu_pod.cli import pod_main
from emulators.tpu_pod.client import PodInfo
from tests.support.emulator_helpers import alive, metadata_get, running_pod, tpu
from tests.support.fixtures_pod import ssh_run
from tests.support.waiting import wait_until

# Runs on an emulated host: on SIGTERM it asks its metadata server whether it is being
# preempted, writes what it saw, and carries on (ticking) until it is SIGKILLed.
STUBBORN = r"""
import json, os, signal, sys, time, urllib.request
out = sys.argv[1]
def meta(path):
    req = urllib.request.Request(
        f"http://{os.environ['GCE_METADATA_HOST']}/computeMetadata/v1/{path}",
        headers={"Metadata-Flavor": "Google"})
    return urllib.request.urlopen(req, timeout=5).read().decode()
def on_term(sig, frame):
    # written whole, then renamed: the test reads it as soon as it exists
    with open(out + ".term.tmp", "w") as fh:
        json.dump({"preempted": meta("instance/preempted")}, fh)
    os.replace(out + ".term.tmp", out + ".term")
signal.signal(signal.SIGTERM, on_term)
with open(out + ".pid", "w") as fh:
    fh.write(str(os.getpid()))
tick = 0
while True:
    time.sleep(0.05)  # sleep-noqa: the workload's tick, counted after SIGTERM
    if os.path.exists(out + ".term"):
        tick += 1
        with open(out + ".ticks", "w") as fh:
            fh.write(str(tick))
"""

POLITE = r"""
import signal, sys, time
signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))
print("up", flush=True)
time.sleep(1000)  # sleep-noqa: a workload that runs until signalled
"""


def start_script(info: PodInfo, host: int, script: str, name: str) -> Path:
    """Run ``script`` detached on ``host``; its output files go to the bucket."""
    path = info.bucket / f"{name}.py"
    path.write_text(script)
    out = info.bucket / name
    cmd = f"setsid python {path} {out} </dev/null >/dev/null 2>&1 &"
    assert ssh_run(info, host, cmd).returncode == 0
    wait_until(lambda: (info.bucket / f"{name}.pid").exists(), 30, f"{name} started")
    return out


def test_metadata_server_speaks_gce(pod: PodInfo) -> None:
    host = pod.hosts[1]
    assert host.metadata == f"{host.ip}:{pod.metadata_port}"
    status, body, headers = metadata_get(host.metadata, "instance/preempted", header=False)
    assert status == 403 and "Metadata-Flavor" in body
    status, body, headers = metadata_get(host.metadata, "instance/preempted")
    assert (status, body) == (200, "FALSE")
    assert headers["Metadata-Flavor"] == "Google" and headers["ETag"]
    assert metadata_get(host.metadata, "instance/name")[1] == host.name
    assert metadata_get(host.metadata, "instance/zone")[1].endswith("/zones/local-a")
    assert metadata_get(host.metadata, "project/project-id")[1] == "phantom-local"
    listing = metadata_get(host.metadata, "instance/attributes/")[1].splitlines()
    assert {"accelerator-type", "agent-worker-number"} <= set(listing)
    assert metadata_get(host.metadata, "instance/attributes/agent-worker-number")[1] == "1"
    tree = json.loads(metadata_get(host.metadata, "instance/", recursive="true")[1])
    assert tree["networkInterfaces"]["0"]["ip"] == host.ip
    assert metadata_get(host.metadata, "instance/nope")[0] == 404

    # Every host process finds its own metadata server through GCE_METADATA_HOST.
    query = (
        "curl -s -H 'Metadata-Flavor: Google' "
        "http://$GCE_METADATA_HOST/computeMetadata/v1/instance/name; echo; echo $GCE_METADATA_IP"
    )
    out = ssh_run(pod, 3, query).stdout.split()
    assert out == [pod.hosts[3].name, pod.hosts[3].metadata]
    # google-auth on the host finds it too (and never tries the link-local address).
    probe = (
        "import google.auth.transport.requests as r\n"
        "from google.auth.compute_engine import _metadata as m\n"
        "q = r.Request()\n"
        "print(m.is_on_gce(q), m.get_project_id(q), m.get(q, 'instance/preempted'))\n"
    )
    result = ssh_run(pod, 0, "python -", input_text=probe)
    assert result.stdout.split() == ["True", "phantom-local", "FALSE"], result.stderr


def test_notice_gives_sigterm_metadata_true_a_grace_then_sigkill(tmp_path: Path) -> None:
    with running_pod(tmp_path / "pod") as info:
        stubborn = start_script(info, 2, STUBBORN, "stubborn")
        pid = int((info.bucket / "stubborn.pid").read_text())
        host = info.hosts[2]
        # A long-poll with nothing changing answers the same value at its timeout_sec.
        _, value, headers = metadata_get(
            host.metadata, "instance/preempted", wait_for_change="true", timeout_sec="1"
        )
        assert value == "FALSE"
        # One started before the notice (GCE's way: last_etag) returns when it flips.
        polled: list[str] = []
        poller = threading.Thread(
            target=lambda: polled.append(
                metadata_get(
                    host.metadata,
                    "instance/preempted",
                    timeout=60,
                    wait_for_change="true",
                    last_etag=headers["ETag"],
                )[1]
            )
        )
        poller.start()

        during = client.preempt(info.run_dir, 2, notice=5, wait=False)

        assert during.hosts[2].state == "PREEMPTING" and during.hosts[2].notice_at
        assert during.state == "READY"  # the API says PREEMPTED once the VM is gone
        assert metadata_get(host.metadata, "instance/preempted")[1] == "TRUE"
        poller.join(30)
        assert polled == ["TRUE"]
        wait_until(lambda: (info.bucket / "stubborn.term").exists(), 30, "SIGTERM handled")
        assert json.loads((info.bucket / "stubborn.term").read_text()) == {"preempted": "TRUE"}
        # It keeps running after SIGTERM: the grace is its own to use.
        wait_until(
            lambda: (
                int((info.bucket / "stubborn.ticks").read_text() or 0) >= 3
                if (info.bucket / "stubborn.ticks").exists()
                else False
            ),
            30,
            "ticks after SIGTERM",
        )
        assert alive(pid)
        assert ssh_run(info, 2, "true").returncode == 255  # sshd is going down

        done = client.wait_for(info.run_dir, lambda p: p.state == "PREEMPTED", 60, "PREEMPTED")
        assert not alive(pid)
        event = next(e for e in reversed(done.events) if e["kind"] == "preempt")
        assert event["notice"]["sigterm"] >= 1 and event["notice"]["left_after_grace"] >= 1
        assert event["killed"] >= 1  # SIGKILL took what ignored the notice
        assert [e["kind"] for e in done.events].count("preempt_notice") == 1
        assert stubborn.with_suffix(".term").exists()


def test_processes_that_exit_on_sigterm_end_the_grace_early(pod: PodInfo) -> None:
    started = pod.bucket / "polite.py"
    started.write_text(POLITE)
    proc = ssh_run(pod, 3, f"setsid python {started} </dev/null >/dev/null 2>&1 & echo $!")
    pid = int(proc.stdout)
    wait_until(lambda: alive(pid), 10, "polite process up")

    after = client.preempt(pod.run_dir, 3, notice=120)  # waits until PREEMPTED

    assert after.hosts[3].state == "PREEMPTED" and not alive(pid)
    notice = after.events[-1]["notice"]
    assert notice["sigterm"] >= 1 and notice["left_after_grace"] == 0
    assert notice["grace_used_s"] < 120  # the VM went down once everything had exited


def test_grace_zero_is_the_abrupt_kill(tmp_path: Path) -> None:
    with running_pod(tmp_path / "pod", preempt_grace=0.5) as info:
        start_script(info, 1, STUBBORN, "abrupt")
        pid = int((info.bucket / "abrupt.pid").read_text())
        after = client.preempt(info.run_dir, 1, notice=0)
        assert after.hosts[1].state == "PREEMPTED" and not alive(pid)
        assert not (info.bucket / "abrupt.term").exists()  # no SIGTERM, no notice
        assert "preempt_notice" not in [e["kind"] for e in after.events]
        assert "notice" not in after.events[-1]

        # `--notice` without a value takes the daemon's default grace.
        assert pod_main(["preempt", "2", "--notice", "--run-dir", str(info.run_dir)]) == 0
        done = client.pod_status(info.run_dir)
        assert done is not None and done.hosts[2].state == "PREEMPTED"
        notice = next(e for e in reversed(done.events) if e["kind"] == "preempt_notice")
        assert notice["grace_s"] == 0.5 and done.preempt_grace == 0.5


async def test_faithful_notice_reaches_every_host_of_the_slice(tmp_path: Path) -> None:
    with running_pod(tmp_path / "pod", faithful=True, hosts=2) as info:
        during = client.preempt(info.run_dir, 0, notice=1, wait=False)
        assert [h.state for h in during.hosts] == ["PREEMPTING", "PREEMPTING"]
        for h in during.hosts:
            assert metadata_get(h.metadata, "instance/preempted")[1] == "TRUE"
        client.wait_for(info.run_dir, lambda p: p.state == "PREEMPTED", 60, "PREEMPTED")
        async with tpu(info) as api:
            node = await api.get_node(name=info.node_path)
        assert node.state == tpu_v2.Node.State.PREEMPTED


def test_bad_notice_is_a_usage_error(pod: PodInfo, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(client.PodUsageError, match="--notice"):
        client.preempt(pod.run_dir, 1, notice=-1)
    assert pod_main(["preempt", "1", "--notice", "soon", "--run-dir", str(pod.run_dir)]) == 2
    assert "not a number of seconds" in capsys.readouterr().err
    assert client.pod_status(pod.run_dir).hosts[1].state == "READY"  # type: ignore[union-attr]


def test_a_host_recreated_during_its_grace_is_not_preempted_after_it(pod: PodInfo) -> None:
    """The console recreates a noticed host once its jobs are done, before its grace ends
    (its GCS ignores SIGTERM): the new VM is not the one the notice was for, and must not
    be killed when the old one's processes are found gone (the recreate kills them)."""
    for _ in range(3):  # a GCS and its like: they ignore the notice
        started = ssh_run(pod, 1, "nohup bash -c \"trap '' TERM; sleep 120\" >/dev/null 2>&1 &")
        assert started.returncode == 0, started.stderr
    done: list[PodInfo] = []
    noticed = threading.Thread(
        target=lambda: done.append(client.preempt(pod.run_dir, 1, notice=60, wait=True))
    )
    noticed.start()
    try:
        wait_until(
            lambda: (
                (s := client.pod_status(pod.run_dir)) is not None
                and s.hosts[1].state == "PREEMPTING"
            ),
            30,
            "the notice given",
        )
        client.recreate(pod.run_dir, 1)
        client.wait_for(pod.run_dir, lambda p: p.hosts[1].state == "READY", 60, "w1 READY")
    finally:
        noticed.join(90)  # the notice ends once the old VM's processes are gone
    assert done, "the notice never ended"
    after = client.pod_status(pod.run_dir)
    assert after is not None and after.hosts[1].state == "READY"
    kinds = [e["kind"] for e in after.events]
    assert "preempt" not in kinds[kinds.index("recreate") :], after.events[-3:]
    assert ssh_run(pod, 1, "true").returncode == 0  # the new VM answers
