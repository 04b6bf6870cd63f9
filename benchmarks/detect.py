"""Time to detect a preempted worker at the default 5 s poll, at 4 and 1,024 hosts.

    .venv/bin/python -m benchmarks.detect [--hosts 4,1024] [--rounds 3] [--poll 5]
        [--provider local,gcp]

For each size: an emulated pod (free ports, temp run dir, stopped at the end) and the
console's services over it as `phantom` builds them (``make_services``, auto recovery off),
started as the console runs them: the pod polled every ``--poll`` seconds, woken between
polls by what the backend hears (a host's preemption notice from its metadata server, an
SSH connection dropped from the far end and the TPU API read on its own until it says the
VM is gone). Once every host's notice watcher listens, ``--rounds`` times each:

* ``notice``: the last worker gets a preemption notice (metadata ``instance/preempted``
  TRUE, SIGTERM, 30 s grace): from the emulator's notice time to the journal's
  ``preemption_notice`` row (``notice_heard_all``: the part until the host's watcher line
  reached the console; the rest is the console's own);
* ``abrupt``: the last worker killed at once (the emulator's plain preempt): from the
  moment the TPU API says PREEMPTED (the emulator's ``preempt`` event, stamped when the
  VM's last process is gone and the API turns; on a loaded box the kill itself takes a
  few hundred milliseconds, which no console can hear sooner) to the journal's
  ``preempted`` row (``abrupt_s``); beside it ``abrupt_call_s``, from the preempt call
  (an upper bound: it holds the kill), and the detector's own ``detect_s`` of that row
  (``abrupt_detector_s``, from the preemption time the TPU API reports: it counts from
  the first loss since the pod was last seen healthy, so without a recovery between
  rounds it also holds the earlier rounds' losses);

each for one host (``host``: the last worker; on the gcp path, whose faithful emulator
reclaims whole slices only, that takes the slice as well) and for the whole slice
(``slice``), on the local provider and on the gcp path over the GCP-faithful emulator
(``--provider``), with the ratio gcp/local per figure;

the lost hosts recreated between rounds (their watchers listening again before the next). Each
figure is a median, beside ``over_poll`` (the figure over the poll interval, the baseline an
interval poll alone would give: detection at a uniformly random moment of the interval
waits ``poll / 2`` on average). Goal: <= 0.2 s at the 5 s poll at every size.

Last line: one JSON object.
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
from pathlib import Path
from typing import Any

from benchmarks.pods import (
    MAX_HOSTS,
    PodInfo,
    gcp_config,
    gcp_user_key,
    pod_config,
    start_pod,
    stop_pod,
)
from console.services.backends.tpu_vm.backend import TpuVmBackend
from console.services.facade import Facade
from console.services.model import Event, EventKind, Update
from console.wiring import make_services
from emulators.tpu_pod import client as pod_client

LISTEN_DEADLINE_S = 600.0


async def _listening(backend: TpuVmBackend, hosts: int, deadline_s: float) -> float:
    """Wait until every host's watcher listens; how long that took."""
    t0 = time.perf_counter()
    while len(backend.notices.listening) < hosts:
        if time.perf_counter() - t0 > deadline_s:
            raise TimeoutError(
                f"{hosts} hosts: {hosts - len(backend.notices.listening)} notice watchers "
                f"not listening after {deadline_s:.0f}s"
            )
        await asyncio.sleep(0.2)
    return time.perf_counter() - t0


async def _row(rows: dict[str, Event], kind: str, host: str, timeout_s: float) -> Event:
    t0 = time.perf_counter()
    while (ev := rows.get(f"{kind}/{host}")) is None:
        if time.perf_counter() - t0 > timeout_s:
            raise TimeoutError(f"no {kind} row for {host} within {timeout_s:.0f}s")
        await asyncio.sleep(0.01)
    return ev


def _api_said(events: tuple[dict[str, Any], ...], host: str) -> float | None:
    """When the emulator's TPU API turned ``host`` PREEMPTED (its last ``preempt`` event)."""
    times = [
        float(e["t"]) for e in events if e.get("kind") == "preempt" and host in e.get("hosts", ())
    ]
    return max(times) if times else None


async def _recreate(svc: Facade, backend: TpuVmBackend, lost: list[str], hosts: int) -> None:
    for step in (
        backend.recreate(lost),
        backend.wait_hosts_ready(lost, 300.0),
    ):
        res = await step
        if not res.ok:
            raise RuntimeError(f"recreate of {', '.join(lost)} failed: {res.message}")
    t0 = time.perf_counter()
    while True:  # the poll sees it answer, and starts its watcher
        await svc.refresh()
        if len(backend.notices.listening) >= hosts:
            return
        if time.perf_counter() - t0 > LISTEN_DEADLINE_S:
            raise TimeoutError(f"{', '.join(lost)}: recreated, a watcher never listened")
        await asyncio.sleep(0.5)


LOSSES = ("host", "slice")
MODES = ("notice", "abrupt")


async def _pod_and_config(
    provider: str, hosts: int, work: Path, poll_s: float
) -> tuple[PodInfo, Any]:
    """The pod and the config driving it: ``local`` the emulator through the local provider,
    ``gcp`` the GCP-faithful emulator through the gcp path (Google's TPU client on its
    loopback endpoint, a GCP user's SSH identity to the workers' external IPs)."""
    recovery = {"poll_interval_s": poll_s, "auto": False, "notice_grace_s": 30}
    if provider == "gcp":
        key = gcp_user_key(work / "google_compute_engine")
        pod = await start_pod(
            work / "pod", hosts=hosts, ready_delay=0.0, timeout=600.0,
            faithful=True, ssh_user="alice", ssh_key=key,
        )  # fmt: skip
        return pod, gcp_config(pod, work, recovery=recovery)
    pod = await start_pod(work / "pod", hosts=hosts, ready_delay=0.0, timeout=600.0)
    return pod, pod_config(pod, work, recovery=recovery)


async def measure(
    hosts: int, rounds: int, poll_s: float, provider: str = "local"
) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="phantom-bench-detect-"))
    pod, cfg = await _pod_and_config(provider, hosts, work, poll_s)
    rows: dict[str, Event] = {}

    def on_update(u: Update) -> None:
        if isinstance(u, Event) and u.kind in (EventKind.PREEMPTION_NOTICE, EventKind.PREEMPTED):
            rows.setdefault(f"{u.kind}/{u.host}", u)

    # (loss, mode) -> figures: from the emulator's notice stamp to the notice row; from the
    # TPU API turning PREEMPTED to the preempted row.
    figures: dict[tuple[str, str], list[float]] = {(lo, m): [] for lo in LOSSES for m in MODES}
    heard: list[float] = []  # of notice: the emulator's stamp -> the watcher's line here
    abrupt_call: list[float] = []
    detector: list[float] = []
    try:
        svc = make_services(cfg, state_dir=work / "state", autostart_pod=False)
        backend = svc.backend
        assert isinstance(backend, TpuVmBackend)
        svc.subscribe(on_update)
        try:
            await svc.start()
            listen_s = await _listening(backend, len(pod.hosts), LISTEN_DEADLINE_S)
            index = len(pod.hosts) - 1
            worker = pod.hosts[index].name
            for i in range(rounds):
                for loss in LOSSES:
                    target: int | str = index if loss == "host" else "all"
                    for mode in MODES:
                        # A moment into the poll's interval, as a reclaim comes at any time.
                        await asyncio.sleep(poll_s * (0.3 + 0.4 * (i % 2)))
                        rows.clear()
                        t_call = time.time()
                        if mode == "notice":
                            info = await pod_client.async_preempt(
                                pod.run_dir, target, notice=30.0, wait=False
                            )
                            given = info.hosts[index].notice_at or t_call
                            ev = await _row(rows, EventKind.PREEMPTION_NOTICE, worker, 60.0)
                            figures[loss, mode].append(max(0.0, ev.at - given))
                            heard.append(backend.notices.notices.get(worker, ev.at) - given)
                            await _row(rows, EventKind.PREEMPTED, worker, 120.0)
                        else:
                            info = await pod_client.async_preempt(pod.run_dir, target)
                            ev = await _row(rows, EventKind.PREEMPTED, worker, 60.0)
                            said = _api_said(info.events, worker) or t_call
                            figures[loss, mode].append(max(0.0, ev.at - said))
                            abrupt_call.append(ev.at - t_call)
                            detector.append(float(ev.data.get("detect_s", ev.at - t_call)))
                        print(
                            f"{provider:>5} {len(pod.hosts):>5} hosts round {i + 1} "
                            f"{loss:>5} {mode:>6}: {figures[loss, mode][-1]:.3f}s",
                            file=sys.stderr,
                            flush=True,
                        )
                        lost = [worker] if loss == "host" else [h.name for h in pod.hosts]
                        await _recreate(svc, backend, lost, len(pod.hosts))
        finally:
            await svc.stop()
            svc.close_journal()
    finally:
        await stop_pod(work / "pod")
        shutil.rmtree(work, ignore_errors=True)
    med = {f"{lo}_{m}_s": statistics.median(v) for (lo, m), v in figures.items()}
    return {
        **{k: round(v, 3) for k, v in med.items()},
        # The names of the figures before the slice and provider were measured too.
        "notice_s": round(med["host_notice_s"], 3),
        "abrupt_s": round(med["host_abrupt_s"], 3),
        "abrupt_call_s": round(statistics.median(abrupt_call), 3),
        "abrupt_detector_s": round(statistics.median(detector), 3),
        **{f"{lo}_{m}_all": [round(x, 3) for x in v] for (lo, m), v in figures.items()},
        "notice_heard_all": [round(x, 3) for x in heard],
        "worst_over_poll": round(max(med.values()) / poll_s, 4),
        "listen_s": round(listen_s, 1),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bench_detect", description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", default="4,1024", help="comma-separated host counts")
    ap.add_argument("--rounds", type=int, default=3, help="preemptions of each kind per size")
    ap.add_argument("--poll", type=float, default=5.0, help="the poll interval, seconds")
    ap.add_argument(
        "--provider", default="local,gcp", help="local, gcp or both (the ratio needs both)"
    )
    args = ap.parse_args(argv)
    try:
        sizes = sorted({int(x) for x in args.hosts.split(",") if x.strip()})
    except ValueError:
        print(f"bench_detect: --hosts {args.hosts!r}: comma-separated integers", file=sys.stderr)
        return 2
    providers = [p.strip() for p in args.provider.split(",") if p.strip()]
    if not providers or any(p not in ("local", "gcp") for p in providers):
        print(f"bench_detect: --provider {args.provider!r}: local, gcp or local,gcp",
              file=sys.stderr)  # fmt: skip
        return 2
    if not sizes or sizes[0] < 2 or sizes[-1] > MAX_HOSTS or args.rounds < 1 or args.poll <= 0:
        print(
            f"bench_detect: --hosts between 2 and {MAX_HOSTS}, --rounds >= 1, --poll > 0",
            file=sys.stderr,
        )
        return 2
    os.environ.setdefault("NO_GCE_CHECK", "True")

    async def run() -> dict[str, dict[str, Any]]:
        return {
            f"{p}/{n}": await measure(n, args.rounds, args.poll, p)
            for n in sizes
            for p in providers
        }

    result = asyncio.run(run())
    # Not abrupt_detector_s: it counts from the first loss since the pod was last healthy,
    # which without a recovery between rounds holds the earlier rounds' losses.
    keys = [f"{lo}_{m}_s" for lo in LOSSES for m in MODES]
    print(f"{'provider/hosts':>14} " + " ".join(f"{k[:-2]:>13}" for k in keys) + f" {'/poll':>7}")
    for name, row in result.items():
        print(
            f"{name:>14} "
            + " ".join(f"{row[k]:>13.3f}" for k in keys)
            + f" {row['worst_over_poll']:>7.4f}"
        )
    ratios: dict[str, dict[str, float | None]] = {}
    for n in sizes:
        gcp, local = result.get(f"gcp/{n}"), result.get(f"local/{n}")
        if gcp is None or local is None:
            continue
        ratios[str(n)] = {
            k[:-2]: round(gcp[k] / local[k], 2) if local[k] > 0 else None for k in keys
        }
        print(
            f"{'gcp/local ' + str(n):>14} "
            + " ".join(
                f"{'-' if ratios[str(n)][k[:-2]] is None else ratios[str(n)][k[:-2]]:>13}"
                for k in keys
            )
        )
    print(json.dumps({"poll_s": args.poll, "rounds": args.rounds, **result,
                      "gcp_over_local": ratios}))  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
