"""The console's W&B-API cadence poll at 4 and 64 runs: CPU and wall time per poll.

    .venv/bin/python -m benchmarks.wandb_cadence [--runs 4,64] [--rows 300] [--polls 5]

One W&B emulator (temp run dir, free port, stopped at the end) holds one project per size,
each with that many running runs of ``--rows`` history rows, written the way wandb-core
writes them (``UpsertBucket``, then ``file_stream`` posts of ``wandb-history.jsonl``). For
each size the console's online source (``OnlineRunSource``: the real ``wandb.Api()``, one
``Runs`` listing and one sampled history per running run) under the pollers' tracker
(``CadenceTracker``, the stall rule) is polled once to warm up (log-in, imports), then
``--polls`` times, each measured:

* ``cpu_ms``: this process's CPU time per poll (the console's side: HTTP, JSON, the rule);
* ``wall_ms``: per poll (median), the emulator's answers included;
* ``requests``: HTTP requests the emulator served per poll.

The ratios are the largest size over the smallest. Last line: one JSON object.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from console.services.cadence.sources import OnlineRunSource
from console.services.cadence.tracker import CadenceTracker
from emulators.wandb import client

KEY_ENV = "PHANTOM_BENCH_WANDB_KEY"
ENTITY = "bench"
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback only


def _post(url: str, key: str, body: dict[str, Any]) -> Any:
    token = base64.b64encode(f"api:{key}".encode()).decode()
    req = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "Authorization": f"Basic {token}"},
    )
    with _DIRECT.open(req, timeout=30) as resp:
        return json.loads(resp.read())


UPSERT = """mutation UpsertBucket($name: String, $project: String, $entity: String) {
  upsertBucket(input: {name: $name, modelName: $project, entityName: $entity}) {
    bucket { id name } inserted } }"""


def populate(base_url: str, key: str, project: str, runs: int, rows: int) -> None:
    """``runs`` running runs of ``rows`` rows each, logged every 2 s until now."""
    now = time.time()
    for i in range(runs):
        name = f"run{i:03d}"
        _post(
            f"{base_url}/graphql",
            key,
            {"query": UPSERT, "variables": {"name": name, "project": project, "entity": ENTITY}},
        )
        content = [
            json.dumps({"_step": s, "_timestamp": now - 2.0 * (rows - s), "loss": 1.0 / (s + 1)})
            for s in range(rows)
        ]
        _post(
            f"{base_url}/files/{ENTITY}/{project}/{name}/file_stream",
            key,
            {"files": {"wandb-history.jsonl": {"offset": 0, "content": content}}},
        )


def emulator_requests(base_url: str) -> int:
    with _DIRECT.open(f"{base_url}/_phantom/status", timeout=10) as resp:
        return int(json.loads(resp.read())["requests"])


def measure(base_url: str, key: str, runs: int, polls: int) -> dict[str, Any]:
    source = OnlineRunSource(
        f"cadence{runs}",
        ENTITY,
        base_url=base_url,
        api_key_env=KEY_ENV,
        environ={KEY_ENV: key},
        max_runs=runs,
    )
    source.prepare()
    tracker = CadenceTracker([source], stall_factor=5.0)
    first = tracker.poll()  # warm-up: log-in, the API's own imports
    if len(first) != runs or tracker.errors:
        raise SystemExit(f"warm-up poll saw {len(first)} of {runs} runs: {tracker.errors}")
    cpu, wall, reqs = [], [], []
    for _ in range(polls):
        before = emulator_requests(base_url)
        c0, w0 = time.process_time(), time.perf_counter()
        cads = tracker.poll()
        wall.append(time.perf_counter() - w0)
        cpu.append(time.process_time() - c0)
        reqs.append(emulator_requests(base_url) - before - 1)  # minus the status call itself
        assert len(cads) == runs and not tracker.errors, tracker.errors
    return {
        "runs": runs,
        "cpu_ms": round(1000 * statistics.mean(cpu), 1),
        "wall_ms": round(1000 * statistics.median(wall), 1),
        "requests": round(statistics.median(reqs)),
    }


def run(sizes: list[int], rows: int, polls: int, say: Any = print) -> dict[str, Any]:
    key = "b" * 40  # a fake key of the real length, accepted by this emulator only
    run_dir = Path(tempfile.mkdtemp(prefix="phantom-bench-wandb-"))
    try:
        info = client.start(run_dir, environ={**os.environ, "PHANTOM_WANDB_API_KEY": key})
        try:
            for n in sizes:
                populate(info.base_url, key, f"cadence{n}", n, rows)
            results = [measure(info.base_url, key, n, polls) for n in sizes]
        finally:
            client.stop(run_dir)
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)
    say(f"{'runs':>5} {'cpu ms/poll':>12} {'wall ms/poll':>13} {'requests':>9}")
    for r in results:
        say(f"{r['runs']:>5} {r['cpu_ms']:>12} {r['wall_ms']:>13} {r['requests']:>9}")
    lo, hi = results[0], results[-1]
    ratio = {
        "cpu": round(hi["cpu_ms"] / lo["cpu_ms"], 1) if lo["cpu_ms"] else None,
        "wall": round(hi["wall_ms"] / lo["wall_ms"], 1) if lo["wall_ms"] else None,
    }
    say(f"ratio {hi['runs']}/{lo['runs']}: cpu x{ratio['cpu']}, wall x{ratio['wall']}")
    return {
        "rows": rows,
        "polls": polls,
        "sizes": results,
        f"ratio_{hi['runs']}_{lo['runs']}": ratio,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bench_wandb_cadence", description=__doc__.splitlines()[0])
    ap.add_argument("--runs", default="4,64", help="comma-separated run counts (default 4,64)")
    ap.add_argument("--rows", type=int, default=300, help="history rows per run (default 300)")
    ap.add_argument("--polls", type=int, default=5, help="measured polls per size (default 5)")
    args = ap.parse_args(argv)
    try:
        sizes = sorted(int(x) for x in args.runs.split(",") if x.strip())
    except ValueError:
        ap.error(f"--runs {args.runs!r}: comma-separated whole numbers, e.g. 4,64")
    if not sizes or min(sizes) < 1 or args.rows < 2 or args.polls < 1:
        ap.error("--runs needs counts >= 1, --rows >= 2, --polls >= 1")
    print(json.dumps(run(sizes, args.rows, args.polls)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
