"""The cost of one poll of the pod at 4, 32 and 256 (up to 1,024) hosts: CPU, wall time, SSH
sessions; and a worker preempted, detected and recovered at each size.

    .venv/bin/python -m benchmarks.observe [--hosts 4,32,256] [--polls 10]

For each size: an emulated pod (free ports, temp run dir, stopped at the end), the console's
services over it as `phantom` builds them (``make_services``), and ``--polls`` observations
of the pod after the warm-up polls (at least three, until every host has answered once and
its notice watcher listens: the first probes every host and opens the notice watchers, one
SSH session a host; 1,024 of them starting is not a poll's cost), each measured:

* ``cpu_ms``: the console process's CPU time (mean over the polls; the rest are medians) (TPU API call, SSH, parsing, diagnosis input);
* ``emulator_cpu_ms``: the emulator daemon's CPU time (the far side of every call);
* ``wall_ms``;
* ``sessions`` / ``connections``: SSH sessions (commands) and connections opened.

Twice per size, in the same run: ``planned`` (the product: ``ProbePlanner``, trouble plus a
round-robin batch) and ``every_host`` (a probe of every READY host in every poll, the way
polls worked before; the baseline, measured up to ``--baseline-max`` hosts: at 1,024 one such
poll outlasts its budget). Ratios: each figure at the largest size over the smallest, per mode.

Then, planned, a worker (the last host) is preempted as a spot reclaim does: ``detect_s`` is
the time until a poll names it lost (polled at once, as the dropped connection makes the
console do; ``detect_polls`` how many), ``recover_s`` its VM recovery through the backend
(recreate, wait READY, bootstrap with ``python3 -c "import sys"``: the fan-out's own cost,
not an import of Ray), and ``recovered``: a poll afterwards sees every host READY and
answering over SSH (the recreated one with its new host key).

No Ray runs here (a Ray node takes ~250 MB, so 256 of them do not fit this machine): the
GCS does not answer, and the Ray layer costs one failed call per poll at every size.
Printed: a table (a line per size and mode), the ratios, and last one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from benchmarks.pods import MAX_HOSTS, PodInfo, pod_config, preempt, start_pod, stop_pod
from benchmarks.proc import cpu_s, descendants, footprint, processes_footprint
from console.services.backends.tpu_vm.backend import TpuVmBackend
from console.services.backends.tpu_vm.probes import ProbePlanner
from console.services.model import HostState
from console.services.observation import Observation
from console.services.recovery.classify import HostCondition
from console.services.recovery.diagnosis import diagnose
from console.wiring import make_services

WARMUP = 3
WARMUP_DEADLINE_S = 600.0
# How long the warm-up waits for every notice watcher to listen once every host answered: at
# 1,024 hosts on 2 loaded cores a probe that times out stops its host's watcher (the backend
# keeps watchers on hosts that answer), so all of them may never listen at once.
LISTEN_WAIT_S = 60.0
MODES = ("planned", "every_host")
BOOTSTRAP = 'python3 -c "import sys"'


def _all_up(obs: Observation, hosts: int) -> bool:
    return len(obs.hosts) == hosts and all(
        h.tpu_state is HostState.READY and h.ssh_ok for h in obs.hosts
    )


async def warm_up(backend: TpuVmBackend, hosts: int) -> int:
    """Poll until every host has answered and its notice watcher listens (at least
    ``WARMUP`` polls): the measured polls are the steady state, not 1,024 watchers starting.
    Returns how many polls it took."""
    t0 = time.perf_counter()
    n = 0
    watching = backend.settings.watch_notices
    while True:
        obs = await backend.observe()
        n += 1
        listening = len(backend.notices.listening) >= hosts or not watching
        up = n >= WARMUP and _all_up(obs, hosts)
        if up and (listening or time.perf_counter() - t0 > LISTEN_WAIT_S):
            return n
        if up:
            await asyncio.sleep(0.5)  # the watchers start after a poll: let them, not polls
        if time.perf_counter() - t0 > WARMUP_DEADLINE_S:
            bad = [h.name for h in obs.hosts if not h.ssh_ok]
            deaf = hosts - len(backend.notices.listening)
            raise TimeoutError(
                f"{hosts} hosts: {len(bad)} never answered, e.g. {bad[:3]}; "
                f"{deaf} notice watchers not listening"
            )


def cost(daemon: int) -> dict[str, float]:
    """What the pod and the console cost once every host answered and has its notice
    watcher: the console's and the daemon's RSS, threads and fds; the hosts' processes."""
    me, emu = footprint(os.getpid()), footprint(daemon)
    hosts = processes_footprint(descendants(daemon))
    return {
        **{f"console_{k}": v for k, v in me.items()},
        **{f"emulator_{k}": v for k, v in emu.items()},
        **{f"host_{k}": v for k, v in hosts.items()},
    }


async def preempt_and_recover(pod: PodInfo, backend: TpuVmBackend) -> dict[str, float]:
    """The last worker reclaimed: polls until one names it lost, then its VM recovery."""
    index = len(pod.hosts) - 1
    worker = pod.hosts[index].name
    t0 = time.perf_counter()
    await preempt(pod.run_dir, index)
    polls = 0
    while True:
        obs = await backend.observe()
        polls += 1
        if diagnose(obs).conditions.get(worker) is HostCondition.LOST:
            break
        if time.perf_counter() - t0 > 120:
            raise TimeoutError(f"{worker} not seen lost within 120s")
    detect = time.perf_counter() - t0
    t0 = time.perf_counter()
    for step in (
        backend.recreate([worker]),
        backend.wait_hosts_ready([worker], 120.0),
        backend.bootstrap([worker]),
    ):
        res = await step
        if not res.ok:
            raise RuntimeError(f"recovery of {worker} failed: {res.message}")
    recover = time.perf_counter() - t0
    t0 = time.perf_counter()
    while not _all_up(await backend.observe(), len(pod.hosts)):
        if time.perf_counter() - t0 > 120:
            raise TimeoutError(f"{worker} recreated but the pod not all up within 120s")
    return {
        "detect_s": round(detect, 3),
        "detect_polls": polls,
        "recover_s": round(recover, 3),
        "recovered": 1.0,
    }


async def measure(hosts: int, polls: int, baseline_max: int) -> dict[str, dict[str, float]]:
    work = Path(tempfile.mkdtemp(prefix="phantom-bench-observe-"))
    pod = await start_pod(work / "pod", hosts=hosts, ready_delay=0.0, timeout=300.0)
    out: dict[str, dict[str, float]] = {}
    try:
        for mode in MODES if hosts <= baseline_max else MODES[:1]:
            cfg = replace(pod_config(pod, work), bootstrap_command=BOOTSTRAP)
            svc = make_services(cfg, state_dir=work / f"state-{mode}", autostart_pod=False)
            try:
                backend = svc.backend
                assert isinstance(backend, TpuVmBackend)
                if mode == "every_host":
                    backend.observer.probes = ProbePlanner(batch=hosts)
                parts = backend.parts
                t_warm = time.perf_counter()
                warm = await warm_up(backend, hosts)
                warm_s = time.perf_counter() - t_warm
                samples: dict[str, list[float]] = {
                    k: []
                    for k in (
                        "cpu_ms",
                        "emulator_cpu_ms",
                        "wall_ms",
                        "sessions",
                        "conns",
                        "unreachable",
                    )
                }
                for _ in range(polls):
                    s0 = parts.ssh.sessions_opened + parts.probe.sessions_opened
                    c0 = parts.ssh.connections_opened + parts.probe.connections_opened
                    e0, cpu0, t0 = cpu_s(pod.pid), time.process_time(), time.perf_counter()
                    obs = await backend.observe()
                    samples["wall_ms"].append((time.perf_counter() - t0) * 1000)
                    samples["cpu_ms"].append((time.process_time() - cpu0) * 1000)
                    samples["emulator_cpu_ms"].append((cpu_s(pod.pid) - e0) * 1000)
                    samples["sessions"].append(
                        parts.ssh.sessions_opened + parts.probe.sessions_opened - s0
                    )
                    samples["conns"].append(
                        parts.ssh.connections_opened + parts.probe.connections_opened - c0
                    )
                    if len(obs.hosts) != hosts:
                        raise RuntimeError(f"{hosts} hosts: a poll saw {len(obs.hosts)}")
                    # A probe that outlasted its budget is reported (the figure still counts).
                    samples["unreachable"].append(sum(h.ssh_ok is False for h in obs.hosts))
                # CPU clocks tick in 10 ms: their mean over the polls; the rest, medians
                # (hosts found unreachable: the most in any poll).
                out[mode] = {
                    k: round(
                        statistics.fmean(v)
                        if k.endswith("cpu_ms")
                        else max(v)
                        if k == "unreachable"
                        else statistics.median(v),
                        2,
                    )
                    for k, v in samples.items()
                }
                out[mode].update(
                    warmup_polls=warm,
                    warmup_s=round(warm_s, 2),
                    listening=len(backend.notices.listening),
                )
                out[mode].update(cost(pod.pid))  # after the polls: every watcher is up
                if mode == "planned":
                    out[mode].update(await preempt_and_recover(pod, backend))
            finally:
                await svc.stop()
                svc.close_journal()
            print(f"{hosts:>4} hosts {mode:>10}: {out[mode]}", file=sys.stderr, flush=True)
    finally:
        await stop_pod(work / "pod")
        shutil.rmtree(work, ignore_errors=True)
    return out


async def bench(sizes: list[int], polls: int, baseline_max: int) -> dict[str, Any]:
    per_size = {n: await measure(n, polls, baseline_max) for n in sizes}
    out: dict[str, Any] = {"hosts": sizes, "polls": polls}
    for mode in MODES:
        measured = [n for n in sizes if mode in per_size[n]]
        out[mode] = {str(n): per_size[n][mode] for n in measured}
        if not measured:
            continue
        lo, hi = measured[0], measured[-1]
        for key in ("cpu_ms", "emulator_cpu_ms", "wall_ms", "sessions"):
            base = per_size[lo][mode][key]
            ratio = per_size[hi][mode][key] / base if base else float("nan")
            out[f"{mode}_{key}_{hi}_over_{lo}"] = round(ratio, 2)
    out["worker_recovered_at_every_size"] = all(
        per_size[n]["planned"].get("recovered") == 1.0 for n in sizes
    )
    return out


COLUMNS = (
    ("cpu_ms", "console ms"),
    ("emulator_cpu_ms", "emu ms"),
    ("wall_ms", "wall ms"),
    ("sessions", "sessions"),
    ("conns", "conns"),
    ("unreachable", "unreach"),
    ("listening", "watchers"),
    ("emulator_fds", "emu fds"),
    ("console_fds", "con fds"),
    ("emulator_rss_mb", "emu MB"),
    ("host_pss_mb", "hosts MB"),
    ("detect_s", "detect s"),
    ("recover_s", "recover s"),
    ("recovered", "ok"),
)


def table(result: dict[str, Any]) -> str:
    """One line per size and mode: a poll's figures (per poll), the pod's footprint, and the
    preempted worker's detection and recovery (planned mode)."""
    head = f"{'hosts':>5} {'mode':>10} " + " ".join(f"{t:>9}" for _, t in COLUMNS)
    lines = [head]
    for mode in MODES:
        for n, row in result.get(mode, {}).items():
            cells = (f"{row[k]:>9g}" if k in row else f"{'-':>9}" for k, _ in COLUMNS)
            lines.append(f"{n:>5} {mode:>10} " + " ".join(cells))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bench_observe", description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", default="4,32,256", help="comma-separated host counts")
    ap.add_argument("--polls", type=int, default=10, help="measured polls per size and mode")
    ap.add_argument(
        "--baseline-max",
        type=int,
        default=256,
        help="largest size the every-host baseline is measured at",
    )
    args = ap.parse_args(argv)
    try:
        sizes = sorted({int(x) for x in args.hosts.split(",") if x.strip()})
    except ValueError:
        print(f"bench_observe: --hosts {args.hosts!r}: comma-separated integers", file=sys.stderr)
        return 2
    if not sizes or sizes[0] < 1 or sizes[-1] > MAX_HOSTS or args.polls < 1:
        print(f"bench_observe: --hosts between 1 and {MAX_HOSTS}, --polls >= 1", file=sys.stderr)
        return 2
    os.environ.setdefault("NO_GCE_CHECK", "True")
    result = asyncio.run(bench(sizes, args.polls, args.baseline_max))
    print(table(result))
    lo, hi = sizes[0], sizes[-1]
    for key in ("cpu_ms", "sessions"):
        print(f"planned {key} {hi} over {lo}: {result[f'planned_{key}_{hi}_over_{lo}']}")
    print(f"worker preempted, detected, recovered: {result['worker_recovered_at_every_size']}")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
