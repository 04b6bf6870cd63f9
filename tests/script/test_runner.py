"""The script runner over a recording fake at the services boundary.

Checks ordering of service calls, exit codes, the JSON line shapes on stdout, event
deduplication, secret scrubbing and the interrupt contract (exit 130 after stopping the
jobs it submitted and bringing down the pod it brought up, tested in a real subprocess).
"""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from console import exit_codes
from console.config import Config, ConfigError, parse_config
from console.script.main import script_main
from tests.support import REPO
from tests.support.fake_data import log_lines, recovered
from tests.support.fake_services import Behaviour
from tests.support.script_harness import Harness

ROOT = REPO
STEP_KEYS = {"type", "n", "line", "action", "ok", "elapsed_s", "result"}


def run(
    tmp_path: Path,
    text: str,
    h: Harness | None = None,
    *,
    pod_up: bool = False,
    config: Config | None = None,
) -> tuple[int, list[dict[str, Any]], str, Harness]:
    h = h or Harness()
    path = tmp_path / "s.phantom"
    path.write_text(text)
    out, err = io.StringIO(), io.StringIO()
    code = script_main(
        str(path),
        config or Config(),
        services_factory=h.factory,
        pod_control=h.pod(up=pod_up),
        stdout=out,
        stderr=err,
    )
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    return code, lines, err.getvalue(), h


def steps(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [x for x in lines if x["type"] == "step"]


def events(lines: list[dict[str, Any]], kind: str | None = None) -> list[dict[str, Any]]:
    return [x for x in lines if x["type"] == "event" and (kind is None or x["kind"] == kind)]


DRILL = """\
pod up --hosts 4
wait-ready --timeout 30
bootstrap
ray-up
tunnel
submit single --train-args "--algo ppo --total-timesteps 2048 --alpha 0.3 --device cpu"
wait-job last RUNNING --timeout 30
preempt 2
wait-event preempted --host phantom-pod-w2 --timeout 5
recover --timeout 60
wait-job last SUCCEEDED --timeout 30
logs last --tail 2
status
finally
teardown
pod down
"""


def test_happy_path_order_shapes_and_events(tmp_path: Path) -> None:
    code, lines, err, h = run(tmp_path, DRILL)
    assert code == exit_codes.OK, err
    # Every stdout line is a JSON object with a type; steps carry exactly the documented keys.
    assert {x["type"] for x in lines} == {"step", "event", "summary"}
    st = steps(lines)
    assert all(set(s) == STEP_KEYS for s in st)
    assert [s["n"] for s in st] == list(range(1, 16))
    assert [s["line"] for s in st] == [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 15, 16]
    assert all(s["ok"] for s in st)
    assert [s["action"] for s in st][:6] == [
        "pod up",
        "wait-ready",
        "bootstrap",
        "ray-up",
        "tunnel",
        "submit",
    ]
    # Services are built after `pod up` and stopped before `pod down`.
    names = h.names(reads=False)
    assert names[0] == "pod.up" and names[1] == "start"
    assert names[-2:] == ["stop", "pod.down"]
    assert [n for n in names if n not in ("start", "stop")] == [
        "pod.up",
        "wait_ready",
        "bootstrap",
        "ray_up",
        "open_tunnel",
        "submit",
        "preempt",
        "recover",
        "job_logs",
        "refresh",
        "job_logs",  # status's ledger advice reads the newest job's log (its save cost)
        "teardown",
        "pod.down",
    ]
    assert ("preempt", "phantom-pod-w2", "script") in h.calls
    assert ("wait_ready", 30.0, "script") in h.calls
    # Events: one preempted line although it was published twice; recovered with mttr_s;
    # job state transitions, each once, in order.
    pre = events(lines, "preempted")
    assert len(pre) == 1 and pre[0]["host"] == "phantom-pod-w2" and "at" in pre[0]
    rec = events(lines, "recovered")
    assert len(rec) == 1 and rec[0]["mttr_s"] == recovered().mttr_s
    job = [(e["job_id"], e["status"]) for e in events(lines, "job_state")]
    assert job == [
        ("raysubmit_1", "PENDING"),
        ("raysubmit_1", "RUNNING"),
        ("raysubmit_1", "SUCCEEDED"),
    ]
    # Ordering on stdout: the event lines appear while their step runs (before its line).
    idx = {id(x): i for i, x in enumerate(lines)}
    preempt_step = next(s for s in st if s["action"] == "preempt")
    assert idx[id(pre[0])] < idx[id(preempt_step)]
    wait_ev = next(s for s in st if s["action"] == "wait-event")
    assert wait_ev["result"]["kind"] == "preempted"
    # Results: JSON-able service results.
    submit = next(s for s in st if s["action"] == "submit")["result"]
    assert submit["job_id"] == "raysubmit_1" and "engine.train" in submit["entrypoint"]
    logs = next(s for s in st if s["action"] == "logs")["result"]
    tail = [line.text for line in log_lines("raysubmit_1")]
    assert logs == {"job_id": "raysubmit_1", "total_lines": len(tail), "lines": tail[-2:]}
    status = next(s for s in st if s["action"] == "status")["result"]
    assert set(status) >= {"pod", "ray", "jobs", "cadence", "recovery"}
    # The summary is last.
    summary = lines[-1]
    assert summary["type"] == "summary" and summary["ok"] and summary["exit_code"] == 0
    assert summary["steps_run"] == summary["steps_total"] == 15
    assert summary["interrupted"] is None
    # stderr: diagnostics only, never JSON.
    assert "[1/15] line 1: pod up --hosts 4" in err


def test_a_failed_step_stops_the_script_but_finally_runs(tmp_path: Path) -> None:
    h = Harness(Behaviour(fail={"bootstrap"}))
    code, lines, err, h = run(tmp_path, DRILL, h)
    assert code == exit_codes.FAILED
    st = steps(lines)
    assert [s["action"] for s in st] == [
        "pod up",
        "wait-ready",
        "bootstrap",
        "teardown",
        "pod down",
    ]
    failed = st[2]
    assert not failed["ok"] and failed["result"]["error"] == "bootstrap failed on purpose"
    assert failed["result"]["per_host"]["phantom-pod-w0"]["ok"] is False
    # teardown skipped: this run never started Ray; the pod it brought up goes down.
    assert st[3]["ok"] and st[3]["result"] == {"skipped": "this script did not start Ray"}
    assert st[4]["ok"] and st[4]["result"] == {"was_running": True}
    assert "teardown" not in h.names() and "ray_up" not in h.names()
    assert f"{tmp_path / 's.phantom'}:3: bootstrap failed: bootstrap failed on purpose" in err
    summary = lines[-1]
    assert summary["exit_code"] == 1 and not summary["ok"]
    assert summary["failed"] == [
        {"n": 3, "line": 3, "action": "bootstrap", "error": "bootstrap failed on purpose"}
    ]


def test_without_finally_nothing_after_a_failure_runs(tmp_path: Path) -> None:
    h = Harness(Behaviour(fail={"ray_up"}))
    code, lines, _, h = run(tmp_path, "bootstrap\nray-up\ntunnel\nteardown\n", h, pod_up=True)
    assert code == exit_codes.FAILED
    assert [s["action"] for s in steps(lines)] == ["bootstrap", "ray-up"]
    assert "open_tunnel" not in h.names()


def test_continue_on_error_directive_and_flag(tmp_path: Path) -> None:
    h = Harness(Behaviour(fail={"ray_up", "open_tunnel"}))
    text = "ray-up --continue\nset continue-on-error on\ntunnel\nset continue-on-error off\nbootstrap\n"
    code, lines, _, h = run(tmp_path, text, h, pod_up=True)
    assert code == exit_codes.FAILED  # failures still make the exit code 1
    assert [(s["action"], s["ok"]) for s in steps(lines)] == [
        ("ray-up", False),
        ("tunnel", False),
        ("bootstrap", True),
    ]
    assert lines[-1]["steps_failed"] == 2


def test_a_service_exception_fails_the_step_with_its_message(tmp_path: Path) -> None:
    h = Harness(Behaviour(raise_in={"preempt": ValueError("preempt: only on provider local")}))
    code, lines, err, _ = run(tmp_path, "preempt 1\n", h, pod_up=True)
    assert code == exit_codes.FAILED
    st = steps(lines)[0]
    # a sentence, as the service wrote it (issue 36: it began "ValueError:")
    assert st["result"]["error"] == "preempt: only on provider local"
    assert "preempt failed: preempt: only on provider local" in err
    assert "ValueError" not in err


def test_an_unexpected_exception_is_named_as_one(tmp_path: Path) -> None:
    h = Harness(Behaviour(raise_in={"preempt": KeyError("w9")}))
    code, lines, _err, _ = run(tmp_path, "preempt 1\n", h, pod_up=True)
    assert code == exit_codes.FAILED
    assert steps(lines)[0]["result"]["error"] == "unexpected KeyError: 'w9'"


def test_config_error_from_the_services_is_exit_2(tmp_path: Path) -> None:
    h = Harness(Behaviour(raise_in={"start": ConfigError("c.toml", ["ssh.key: not found"])}))
    code, lines, err, _ = run(tmp_path, "ray-up\ntunnel\n", h, pod_up=True)
    assert code == exit_codes.USAGE
    assert [s["action"] for s in steps(lines)] == ["ray-up"]
    assert "ssh.key: not found" in err


def test_pod_up_refuses_a_running_pod(tmp_path: Path) -> None:
    code, lines, _, h = run(tmp_path, "pod up\nfinally\npod down\n", pod_up=True)
    assert code == exit_codes.FAILED
    st = steps(lines)
    assert "already running" in st[0]["result"]["error"]
    # The finally block must not take down a pod this script did not bring up.
    assert st[1]["result"] == {"skipped": "this script did not bring a pod up"}
    assert "pod.down" not in h.names() and "pod.up" not in h.names()


def test_wait_job_fails_early_when_the_job_ends_otherwise(tmp_path: Path) -> None:
    h = Harness(Behaviour(job_statuses=["RUNNING", "FAILED"]))
    code, lines, _, _ = run(
        tmp_path, "submit single\nwait-job SUCCEEDED --timeout 60\n", h, pod_up=True
    )
    assert code == exit_codes.FAILED
    st = steps(lines)[1]
    assert "ended FAILED, expected SUCCEEDED" in st["result"]["error"]
    assert st["elapsed_s"] < 30  # failed early, not at the timeout


def test_wait_job_times_out(tmp_path: Path) -> None:
    h = Harness(Behaviour(job_statuses=["RUNNING"]))
    code, lines, _, _ = run(
        tmp_path, "submit single\nwait-job last SUCCEEDED --timeout 0.3\n", h, pod_up=True
    )
    assert code == exit_codes.FAILED
    assert "not SUCCEEDED within 0.3s (status RUNNING)" in steps(lines)[1]["result"]["error"]


def test_wait_job_follows_a_resubmitted_job(tmp_path: Path) -> None:
    h = Harness(Behaviour(resubmit_on_recover=True))
    code, lines, err, h = run(
        tmp_path, "submit single\nrecover\nwait-job last SUCCEEDED\n", h, pod_up=True
    )
    assert code == exit_codes.OK, err
    res = steps(lines)[2]["result"]
    assert res["job_id"] == "raysubmit_2" and res["followed_from"] == "raysubmit_1"
    assert events(lines, "job_resubmitted")[0]["new_job_id"] == "raysubmit_2"


def test_wait_job_follows_a_resubmission_it_only_knows_from_the_registry(
    tmp_path: Path,
) -> None:
    """The TUI's watchdog resubmitted the job; this script never saw the event, but the
    shared registry says which job carries on: `last` follows it."""
    h = Harness(Behaviour(resubmit_on_recover=True, announce_resubmission=False))
    code, lines, err, h = run(
        tmp_path, "submit single\nrecover\nwait-job last SUCCEEDED\n", h, pod_up=True
    )
    assert code == exit_codes.OK, err
    res = steps(lines)[2]["result"]
    assert res["job_id"] == "raysubmit_2" and res["followed_from"] == "raysubmit_1"


def test_a_lost_job_nothing_resubmits_ends_the_wait_as_a_failure(tmp_path: Path) -> None:
    h = Harness(Behaviour(job_statuses=["RUNNING", "LOST"]))
    t0 = time.monotonic()
    fast = parse_config({"recovery": {"poll_interval_s": 0.5}})
    code, lines, _, _ = run(
        tmp_path,
        "submit single\nwait-job last SUCCEEDED --timeout 10m\n",
        h,
        pod_up=True,
        config=fast,
    )
    assert code == exit_codes.FAILED
    error = steps(lines)[1]["result"]["error"]
    assert "is LOST" in error and "nothing resubmits it" in error
    assert time.monotonic() - t0 < 60  # a few polls, not the 10 minutes it was given


def test_last_after_a_failed_submit_fails_at_run_time(tmp_path: Path) -> None:
    h = Harness(Behaviour(raise_in={"submit": RuntimeError("dashboard unreachable")}))
    code, lines, _, _ = run(
        tmp_path, "set continue-on-error on\nsubmit single\nlogs\n", h, pod_up=True
    )
    assert code == exit_codes.FAILED
    assert "no job was submitted" in steps(lines)[1]["result"]["error"]


def test_recover_failure_and_timeout(tmp_path: Path) -> None:
    h = Harness(Behaviour(fail={"recover"}))
    code, lines, _, _ = run(tmp_path, "recover --timeout 5\n", h, pod_up=True)
    assert code == exit_codes.FAILED
    assert steps(lines)[0]["result"]["error"] == "recovery failed: bootstrap"
    assert ("recover", "script", 5.0) in h.calls


def test_wait_event_times_out_and_consumes_matches(tmp_path: Path) -> None:
    text = "preempt 1\nwait-event preempted\nwait-event preempted --timeout 0.2\n"
    code, lines, _, _ = run(tmp_path, text, pod_up=True)
    assert code == exit_codes.FAILED
    st = steps(lines)
    assert st[1]["ok"] and st[1]["result"]["host"] == "phantom-pod-w1"
    assert "no 'preempted' event within 0.2s" in st[2]["result"]["error"]


@pytest.mark.parametrize("as_events", [False, True], ids=["jobinfo", "job_state-event"])
def test_job_state_deduplicated_between_bus_and_polling(tmp_path: Path, as_events: bool) -> None:
    h = Harness(Behaviour(job_updates_as_events=as_events))
    code, lines, _, _ = run(tmp_path, "submit single\nwait-job last SUCCEEDED\n", h, pod_up=True)
    assert code == exit_codes.OK
    evs = events(lines, "job_state")
    pairs = [(e["job_id"], e["status"]) for e in evs]
    assert pairs == [
        ("raysubmit_1", "PENDING"),
        ("raysubmit_1", "RUNNING"),
        ("raysubmit_1", "SUCCEEDED"),
    ]
    # One shape whichever layer saw the transition first.
    assert all(
        {"job_id", "old_status", "new_status", "status", "at", "host"} <= set(e) for e in evs
    )


def test_secrets_never_reach_stdout_or_stderr(tmp_path: Path, monkeypatch: Any) -> None:
    secret = "wandb-key-0123456789abcdef"
    monkeypatch.setenv("WANDB_API_KEY", secret)
    monkeypatch.setenv("MY_SERVICE_TOKEN", "tok-987654321")
    b = Behaviour(
        logs=f"wandb: logging in with {secret}\nhttp header Bearer tok-987654321\n",
        action_data={"api_token": "literal-token-value", "env": {"WANDB_API_KEY": secret}},
        raise_in={"open_tunnel": RuntimeError(f"auth failed for key {secret}")},
    )
    text = (
        "set continue-on-error on\n"
        "bootstrap\n"
        'submit single --runtime-env \'{"env_vars": {"WANDB_API_KEY": "$WANDB_API_KEY"}}\'\n'
        "logs\n"
        "tunnel\n"
    )
    code, lines, err, _ = run(tmp_path, text, Harness(b), pod_up=True)
    assert code == exit_codes.FAILED
    blob = json.dumps(lines) + err
    for value in (secret, "tok-987654321", "literal-token-value"):
        assert value not in blob
    assert "••••••" in blob
    # A $NAME reference is a name, not a secret: it stays readable.
    submit = steps(lines)[1]["result"]
    assert submit["runtime_env"]["env_vars"]["WANDB_API_KEY"] == "$WANDB_API_KEY"


def test_sleep_and_auto_recovery(tmp_path: Path) -> None:
    code, lines, _, h = run(tmp_path, "auto-recovery off\nsleep 10ms\n", pod_up=True)
    assert code == exit_codes.OK
    assert ("set_auto_recovery", False, "script") in h.calls
    assert steps(lines)[1]["result"] == {"slept_s": 0.01}


def test_ledger_verb_and_its_bad_flag(tmp_path: Path) -> None:
    code, lines, _, _ = run(tmp_path, "ledger --since 1h\nledger\n")
    assert code == exit_codes.OK
    for step in steps(lines):
        assert {"goodput", "headline", "badput_s", "money", "advice", "jobs"} <= set(step["result"])
    code, lines, err, h = run(tmp_path, "ledger --since soon\n")
    assert code == exit_codes.USAGE and not h.calls
    assert "--since" in err


# --- interrupts: a real process, a real signal ------------------------------------------------


def _child(tmp_path: Path, text: str, fleet: bool = False) -> tuple[subprocess.Popen[str], Path]:
    script = tmp_path / "s.phantom"
    script.write_text(text)
    calls = tmp_path / "calls.jsonl"
    code = (
        "import sys\n"
        "from tests.support.script_harness import run_in_subprocess\n"
        f"sys.exit(run_in_subprocess({str(script)!r}, {str(calls)!r}, hang='none', "
        f"fleet={fleet!r}))\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    return proc, calls


def _read_until(proc: subprocess.Popen[str], pred: Any, timeout: float = 60) -> list[dict]:
    assert proc.stdout is not None
    got: list[dict] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        got.append(json.loads(line))
        if pred(got[-1]):
            return got
    raise AssertionError(f"condition not seen; got {got}")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupt_stops_what_it_started_and_exits_130(tmp_path: Path, sig: int) -> None:
    text = (
        "pod up --hosts 2\n"
        "submit single\n"
        "wait-job last SUCCEEDED --timeout 1h\n"  # the fake's job runs forever
        "teardown\n"
    )
    proc, calls_path = _child(tmp_path, text)
    try:
        _read_until(proc, lambda x: x.get("action") == "submit")
        # The wait-job step is now polling; it is the one interrupted.
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == exit_codes.INTERRUPTED, err
    rest = [json.loads(line) for line in out.splitlines()]
    interrupted = [x for x in rest if x["type"] == "step"]
    assert interrupted == [
        {**interrupted[0], "action": "wait-job", "ok": False, "result": {"error": "interrupted"}}
    ]
    summary = rest[-1]
    assert summary["type"] == "summary" and summary["exit_code"] == 130
    assert summary["interrupted"] == signal.Signals(sig).name
    assert summary["cleanup"] == {"stopped_jobs": ["raysubmit_1"], "pod_down": True}
    calls = [json.loads(line) for line in calls_path.read_text().splitlines()]
    names = [c[0] for c in calls]
    assert ["stop_job", "raysubmit_1", "script"] in calls
    assert names.index("stop_job") < names.index("pod.down")
    assert "teardown" not in names  # the step after the interrupted one never ran
    assert f"phantom: {signal.Signals(sig).name}: stopping what this script started" in err


def test_an_interrupt_undoes_what_the_script_did_on_each_cluster(tmp_path: Path) -> None:
    """Over a fleet: the jobs submitted on each cluster are stopped there, and only the pod
    the script brought up (pod-a's) is taken down."""
    text = (
        "use pod-a\n"
        "pod up --hosts 2\n"
        "submit single\n"
        "use pod-b\n"
        "submit single\n"
        "wait-job last SUCCEEDED --timeout 1h\n"  # the fake's job runs forever
    )
    proc, calls_path = _child(tmp_path, text, fleet=True)
    try:
        _read_until(proc, lambda x: x.get("action") == "submit" and x.get("cluster") == "pod-b")
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == exit_codes.INTERRUPTED, err
    summary = json.loads(out.splitlines()[-1])
    assert summary["cleanup"] == {
        "clusters": {
            "pod-a": {"stopped_jobs": ["raysubmit_1"], "pod_down": True},
            "pod-b": {"stopped_jobs": ["raysubmit_1"], "pod_down": False},
        }
    }
    names = [json.loads(line)[0] for line in calls_path.read_text().splitlines()]
    assert "pod-a/stop_job" in names and "pod-b/stop_job" in names and "pod-a/pod.down" in names
    assert not any(n.startswith("pod-b/pod.") for n in names)


def test_logs_are_plain_text_every_line_kept(tmp_path: Path) -> None:
    """A Ray driver's log in colour (issue 36, item 6): the script's `logs` gives the text
    the job printed, without colour codes, each line as often as the job printed it (a
    real job's worker line reaches the driver once, tests/services/backends/tpu_vm/
    test_jobs.py; a line printed twice, as a Tune table's border, stays twice)."""
    worker = "\x1b[36m(train_worker pid=4242, ip=127.0.0.11)\x1b[0m "
    driver = [
        "\x1b[1m\x1b[32mJob 'raysubmit_1' started\x1b[0m",
        *[worker + f"step {n} loss 0.{n}" for n in (100, 200)],
        "",
        worker + "checkpoint saved at step 200\r",
        "+-----+",
        "+-----+",
    ]
    h = Harness(Behaviour(logs="\n".join(driver)))
    code, lines, _, _ = run(tmp_path, "submit single\nlogs last --tail 50\n", h, pod_up=True)
    assert code == exit_codes.OK
    logs = next(s for s in steps(lines) if s["action"] == "logs")["result"]
    prefix = "(train_worker pid=4242, ip=127.0.0.11) "
    assert logs["lines"] == [
        "Job 'raysubmit_1' started",
        prefix + "step 100 loss 0.100",
        prefix + "step 200 loss 0.200",
        "",
        prefix + "checkpoint saved at step 200",
        "+-----+",
        "+-----+",
    ]
    assert not any("\x1b" in line for line in logs["lines"])
