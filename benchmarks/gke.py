"""GKE benchmark: time to detect a slice preemption, time back to Running, and the cost of an
incremental metric reload as the event file grows.

    .venv/bin/python -m benchmarks.gke [--rounds 3] [--poll 0.5] [--base-steps 2000]

Preemption (the console's services on the local GKE emulator, a temp run dir, everything
stopped at the end): a GRPO workload on a v5p-64 spot slice, preempted ``--rounds`` times
with no grace; per round, measured on this machine's clock from the moment the preemption
was sent:

* ``detect_s``: until the console journals the slice as preempted (watch -> cache -> poll ->
  diagnosis -> detector -> journal), with the poll interval as its baseline
  (``detect_over_poll``);
* ``back_to_running_s``: until the workload is RUNNING again (the JobSet restarted on the
  recreated nodes), with the emulator's node recreate delay as its baseline.

Metrics (no cluster): an event file of ``--base-steps`` steps (six Tunix tags each) is read,
then ``--new-steps`` are appended and the reader polls (the incremental cost, median of
``--repeat``). The file is grown 10x and the same is measured again. ``incremental_10x_over_
base`` near 1 means the cost follows the new events, not the file's size; the full reload of
the two files (``full_10x_over_base``, near 10) is the contrast measured in the same run.

Last line: one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from console.config import Config, parse_config
from console.services.backends.gke.metrics import DOC_TAGS, RunReader
from console.services.model import Event, EventKind, JobStatus, Update, WorkloadStatus
from console.wiring import make_services
from console.wiring.gke import LocalGkeControl
from console.wiring.settings import workload_defaults


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# -- metrics ---------------------------------------------------------------------------------------
class _Writer:
    """tensorboard's own writer (as Tunix writes its scalars)."""

    def __init__(self, logdir: Path) -> None:
        from tensorboard.compat.proto import event_pb2, summary_pb2
        from tensorboard.summary.writer.event_file_writer import EventFileWriter

        self._event, self._summary = event_pb2.Event, summary_pb2.Summary
        self._w = EventFileWriter(str(logdir), max_queue_size=1_000_000, flush_secs=3600)

    def steps(self, first: int, count: int) -> None:
        for step in range(first, first + count):
            values = [
                self._summary.Value(tag=t, simple_value=step * 0.001) for t in DOC_TAGS.values()
            ]
            self._w.add_event(
                self._event(wall_time=1e9 + step, step=step, summary=self._summary(value=values))
            )
        self._w.flush()

    def close(self) -> None:
        self._w.close()


def _timed(fn: Any) -> float:
    """Seconds of one call, the garbage collector off while it runs (as timeit does): a
    collection triggered by earlier allocations is not the call's own cost."""
    gc.collect()
    gc.disable()
    try:
        t0 = time.perf_counter()
        fn()
        return time.perf_counter() - t0
    finally:
        gc.enable()


def bench_metrics(base_steps: int, new_steps: int, repeat: int) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="phantom-bench-gke-metrics-"))
    try:
        writer = _Writer(work)
        writer.steps(1, base_steps)
        reader = RunReader(str(work))
        reader.poll()
        step = base_steps + 1

        def incremental() -> list[float]:
            nonlocal step
            costs = []
            for _ in range(repeat):
                writer.steps(step, new_steps)
                step += new_steps
                costs.append(_timed(reader.poll))
            return costs

        def full() -> list[float]:
            return [_timed(lambda: RunReader(str(work)).poll()) for _ in range(repeat)]

        (path,) = list(work.iterdir())
        base_size = path.stat().st_size
        full_base, inc_base = full(), incremental()  # the full reload of the base file
        writer.steps(step, 10 * base_steps - (step - 1))  # grow the file to 10x
        step = 10 * base_steps + 1
        reader.poll()
        big_size = path.stat().st_size
        full_big, inc_big = full(), incremental()
        writer.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    med = statistics.median
    return {
        "event_file_bytes": [base_size, big_size],
        "new_events_per_poll": new_steps,
        "incremental_base_ms": round(med(inc_base) * 1e3, 3),
        "incremental_10x_ms": round(med(inc_big) * 1e3, 3),
        "incremental_10x_over_base": round(med(inc_big) / med(inc_base), 3),
        "full_reload_base_ms": round(med(full_base) * 1e3, 2),
        "full_reload_10x_ms": round(med(full_big) * 1e3, 2),
        "full_10x_over_base": round(med(full_big) / med(full_base), 3),
    }


# -- preemption ------------------------------------------------------------------------------------
def _config(run_dir: Path, poll_s: float) -> Config:
    return parse_config(
        {
            "cluster": {"provider": "gke"},
            "gke": {"run_dir": str(run_dir), "hf_token_env": ""},
            "recovery": {"poll_interval_s": poll_s, "ready_timeout_s": 120.0},
        },
        source="<bench_gke>",
    )


async def _until(check: Any, timeout_s: float, what: str) -> float:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"no {what} within {timeout_s:.0f}s")
        await asyncio.sleep(0.02)
    return time.perf_counter()


async def bench_preemption(rounds: int, poll_s: float, recreate_delay: float) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="phantom-bench-gke-"))
    config = _config(work / "gke", poll_s)
    control = LocalGkeControl(config)
    await control.up(1, recreate_delay=recreate_delay)
    svc = None
    try:
        svc = make_services(config, state_dir=work / "state", autostart_pod=False)
        seen: list[Update] = []
        svc.subscribe(seen.append)
        await svc.start()
        spec = workload_defaults(config).but(
            "bench", max_restarts=rounds + 1, env={"STEPS": "100000", "STEP_TIME": "0.5"}
        )
        await svc.create_workload(spec, "bench")

        def running() -> bool:
            return any(
                isinstance(w, WorkloadStatus) and w.status is JobStatus.RUNNING
                for w in svc.snapshot().workloads  # type: ignore[union-attr]
            )

        await _until(running, 120, "RUNNING workload")
        detects: list[float] = []
        backs: list[float] = []
        reported: list[float] = []
        for i in range(rounds):
            before = len(
                [u for u in seen if isinstance(u, Event) and u.kind == EventKind.PREEMPTED]
            )
            await asyncio.sleep(2 * poll_s)  # a steady state: the last poll saw it healthy
            t0 = time.perf_counter()
            await svc.preempt_slice("0", 0.0, "bench")

            def detected(n: int = before) -> bool:
                return (
                    len([u for u in seen if isinstance(u, Event) and u.kind == EventKind.PREEMPTED])
                    > n
                )

            detects.append(await _until(detected, 60, "preempted event") - t0)
            ev = [u for u in seen if isinstance(u, Event) and u.kind == EventKind.PREEMPTED][-1]
            if isinstance(ev.data.get("detect_s"), int | float):
                reported.append(float(ev.data["detect_s"]))
            await _until(lambda: not running(), 60, "the workload leaving RUNNING")
            backs.append(await _until(running, 180, "RUNNING again") - t0)
            _log(f"round {i + 1}: detect {detects[-1]:.3f}s, back to Running {backs[-1]:.2f}s")
    finally:
        if svc is not None:
            await svc.stop()
            svc.close_journal()
        await control.down()
        shutil.rmtree(work, ignore_errors=True)
    med = statistics.median
    return {
        "rounds": rounds,
        "poll_interval_s": poll_s,
        "detect_s": round(med(detects), 3),
        "detect_samples_s": [round(x, 3) for x in detects],
        "detect_over_poll": round(med(detects) / poll_s, 3),
        "detect_reported_s": round(med(reported), 3) if reported else None,
        "back_to_running_s": round(med(backs), 2),
        "back_to_running_samples_s": [round(x, 2) for x in backs],
        "node_recreate_delay_s": recreate_delay,
        "back_over_recreate_delay": round(med(backs) / recreate_delay, 3),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bench_gke", description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3, help="slice preemptions (median)")
    ap.add_argument("--poll", type=float, default=0.5, help="recovery.poll_interval_s")
    ap.add_argument("--recreate-delay", type=float, default=2.0, help="emulator node recreation")
    ap.add_argument("--base-steps", type=int, default=2000, help="steps in the base event file")
    ap.add_argument("--new-steps", type=int, default=50, help="steps appended per poll")
    ap.add_argument("--repeat", type=int, default=7, help="samples per metrics figure")
    ap.add_argument("--skip-preemption", action="store_true", help="metrics figures only")
    args = ap.parse_args(argv)
    if min(args.rounds, args.base_steps, args.new_steps, args.repeat) < 1 or args.poll <= 0:
        print("bench_gke: counts must be >= 1 and --poll > 0", file=sys.stderr)
        return 2
    out: dict[str, Any] = {"metrics": bench_metrics(args.base_steps, args.new_steps, args.repeat)}
    _log(f"metrics: {out['metrics']}")
    if not args.skip_preemption:
        out["preemption"] = asyncio.run(
            bench_preemption(args.rounds, args.poll, args.recreate_delay)
        )
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
