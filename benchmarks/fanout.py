"""Fan-out benchmark: the same command on 1, 4, 32 and 256 emulated hosts.

    .venv/bin/python -m benchmarks.fanout [--hosts 1,4,32,256] [--repeat 5]

Starts one emulated pod with max(--hosts) hosts (free ports, temp run dir, stopped at
the end), then times ``SshFanout.run`` on the first N hosts for each N, with the
product's default ``ssh.parallelism`` (``--parallelism`` to try another):

- ``cold``: fresh connections (TCP + SSH handshake + auth + command), the first fan-out
  after a recovery;
- ``warm``: cached connections (one new session per host), every later fan-out.

Two commands: ``--command`` (default ``sleep 0.5``: a remote step that waits on I/O, like
most bootstrap steps) and ``true`` (pure SSH overhead). The baseline is the 1-host time
of the same run; ratios near 1 mean the fan-out is parallel. Each point also prints the
CPU it cost the console (this process) and the emulator (its daemon and the shells it ran):
on a real pod the hosts' side runs on the hosts, here both share this machine's cores.
Last line: one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, NamedTuple

from benchmarks.pods import MAX_HOSTS, daemon_pid, start_pod, stop_pod
from benchmarks.proc import cpu_s
from console.config import SshConfig
from console.services.backends.tpu_vm.endpoints import HostEndpoint
from console.services.backends.tpu_vm.hostkeys import HostKeyPolicy
from console.services.backends.tpu_vm.ssh import SshFanout


class Sample(NamedTuple):
    wall_s: float
    console_cpu_s: float
    emulator_cpu_s: float


async def _time_fanout(
    fan: SshFanout, command: str, n: int, cold: bool, emulator_pid: int | None = None
) -> Sample:
    if cold:
        await fan.close()  # drop cached connections
    e0 = cpu_s(emulator_pid, children=True) if emulator_pid else 0.0
    c0, t0 = time.process_time(), time.perf_counter()
    res = await fan.run(command, hosts=list(range(n)))
    elapsed, console = time.perf_counter() - t0, time.process_time() - c0
    # each exit status is sent after the daemon reaped its shell: their CPU is counted now
    emulator = cpu_s(emulator_pid, children=True) - e0 if emulator_pid else 0.0
    bad = [r.error for r in res.values() if not r.ok]
    if bad:
        raise RuntimeError(f"fan-out failed on {len(bad)} host(s): {bad[0]}")
    return Sample(elapsed, console, emulator)


def _median(samples: list[Sample], field: str) -> float:
    return statistics.median(getattr(s, field) for s in samples)


async def bench(
    sizes: list[int], command: str, repeat: int, parallelism: int | None = None
) -> tuple[dict[str, dict[str, dict[int, float]]], dict[str, dict[str, float]]]:
    """(wall seconds per command, mode and host count; CPU per host at the largest count)."""
    work = Path(tempfile.mkdtemp(prefix="phantom-bench-fanout-"))
    run_dir = work / "pod"
    pod = await start_pod(
        run_dir, hosts=max(sizes), ssh_port=0, api_port=0, ready_delay=0.2, timeout=180.0
    )
    try:
        eps = [HostEndpoint(h.name, h.ip, h.ssh_port, h.index) for h in pod.hosts]
        policy = HostKeyPolicy("file", pod.known_hosts)  # the emulator writes its keys there
        fan = SshFanout(
            eps,
            user=pod.ssh_user,
            client_keys=[pod.client_key],
            host_keys=policy,
            parallelism=parallelism or SshConfig().parallelism,
            connect_timeout_s=30.0,
        )
        emulator = daemon_pid(run_dir)
        results: dict[str, dict[str, dict[int, float]]] = {}
        cpu: dict[str, dict[str, float]] = {}
        try:
            await _time_fanout(fan, "true", max(sizes), cold=True)  # warm-up (imports, caches)
            for cmd in (command, "true"):
                per: dict[str, dict[int, float]] = {"cold": {}, "warm": {}}
                for n in sizes:
                    for mode in ("cold", "warm"):
                        samples = []
                        for _ in range(repeat):
                            if mode == "warm":
                                await _time_fanout(fan, "true", n, cold=False)  # ensure cached
                            samples.append(
                                await _time_fanout(fan, cmd, n, mode == "cold", emulator)
                            )
                        per[mode][n] = _median(samples, "wall_s")
                        console_ms = _median(samples, "console_cpu_s") * 1000 / n
                        emulator_ms = _median(samples, "emulator_cpu_s") * 1000 / n
                        if cmd == command and n == max(sizes):
                            cpu[mode] = {
                                "console_ms_per_host": round(console_ms, 2),
                                "emulator_ms_per_host": round(emulator_ms, 2),
                            }
                        print(
                            f"{cmd!r:>14} {mode:>4} {n:>3} hosts: "
                            f"median {per[mode][n] * 1000:8.1f} ms over {repeat}; CPU per "
                            f"host: console {console_ms:5.2f} ms, emulator {emulator_ms:5.2f} ms",
                            file=sys.stderr,
                        )
                results[cmd] = per
        finally:
            await fan.close()
    finally:
        await stop_pod(run_dir)
        shutil.rmtree(work, ignore_errors=True)
    return results, cpu


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bench_fanout", description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", default="1,4,32,256", help="comma-separated host counts")
    ap.add_argument("--parallelism", type=int, help="ssh.parallelism (default: the product's)")
    ap.add_argument("--command", default="sleep 0.5", help="the remote command timed")
    ap.add_argument("--repeat", type=int, default=5, help="samples per point (median)")
    args = ap.parse_args(argv)
    try:
        sizes = sorted({int(x) for x in args.hosts.split(",") if x.strip()})
    except ValueError:
        print(f"bench_fanout: --hosts {args.hosts!r}: comma-separated integers", file=sys.stderr)
        return 2
    if not sizes or sizes[0] < 1 or sizes[-1] > MAX_HOSTS or args.repeat < 1:
        print(f"bench_fanout: --hosts between 1 and {MAX_HOSTS}, --repeat >= 1", file=sys.stderr)
        return 2
    if args.parallelism is not None and args.parallelism < 1:
        print("bench_fanout: --parallelism >= 1", file=sys.stderr)
        return 2
    results, cpu = asyncio.run(bench(sizes, args.command, args.repeat, args.parallelism))
    lo, hi = sizes[0], sizes[-1]
    main_cmd = results[args.command]
    out: dict[str, Any] = {
        "command": args.command,
        "hosts": sizes,
        "repeat": args.repeat,
        "cold_s": {str(n): round(v, 4) for n, v in main_cmd["cold"].items()},
        "warm_s": {str(n): round(v, 4) for n, v in main_cmd["warm"].items()},
        "true_cold_s": {str(n): round(v, 4) for n, v in results["true"]["cold"].items()},
        "true_warm_s": {str(n): round(v, 4) for n, v in results["true"]["warm"].items()},
        f"fanout_{hi}_over_{lo}": round(main_cmd["cold"][hi] / main_cmd["cold"][lo], 3),
        f"fanout_{hi}_over_{lo}_warm": round(main_cmd["warm"][hi] / main_cmd["warm"][lo], 3),
        f"overhead_{hi}_over_{lo}_true_cold": round(
            results["true"]["cold"][hi] / results["true"]["cold"][lo], 3
        ),
        f"cpu_per_host_at_{hi}": cpu,
    }
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
