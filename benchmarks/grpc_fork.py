"""Why every Ray node starts with ``GRPC_ENABLE_FORK_SUPPORT=false`` (raycmd.NODE_ENV).

Ray's client proxier starts a server per client with ``Popen(preexec_fn=...)`` (a fork,
then an exec) while its other threads serve gRPC streams. This runs that pattern: a gRPC
server with a few live bidirectional streams, and N fork+execs of ``/bin/true`` beside
them, once with gRPC's fork handlers at their default and once switched off, each in its
own interpreter (the variable is read when gRPC loads). A child that died before its exec
returns a signal, not 0.

    python -m benchmarks.grpc_fork [--forks 300]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
from concurrent import futures


def _child_run(forks: int) -> dict[str, int]:
    import grpc  # imported here: the variable must be set before gRPC loads

    def echo(requests, _ctx):  # type: ignore[no-untyped-def]
        yield from requests

    handler = grpc.method_handlers_generic_handler(
        "b.Echo", {"S": grpc.stream_stream_rpc_method_handler(echo)}
    )
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=16))
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    stop = threading.Event()

    def stream() -> None:
        call = grpc.insecure_channel(f"127.0.0.1:{port}").stream_stream("/b.Echo/S")
        while not stop.is_set():
            for _ in call(iter([b"x" * 100] * 50)):
                pass

    for _ in range(4):
        threading.Thread(target=stream, daemon=True).start()
    time.sleep(1.0)  # the streams are flowing

    def preexec() -> None:  # what Ray's start_ray_process does before the exec
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})

    died: dict[str, int] = {}
    for _ in range(forks):
        rc = subprocess.Popen(["/bin/true"], preexec_fn=preexec).wait()
        if rc != 0:
            name = signal.Signals(-rc).name if rc < 0 else f"exit {rc}"
            died[name] = died.get(name, 0) + 1
    stop.set()
    return died


def run(forks: int, env: dict[str, str]) -> dict[str, int]:
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.grpc_fork", "--child", "--forks", str(forks)],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=600,
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise SystemExit(f"child failed ({proc.returncode}): {proc.stderr[-2000:]}")
    died: dict[str, int] = json.loads(lines[-1])
    return died


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--forks", type=int, default=300, help="fork+execs per mode (default 300)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.forks < 1:
        ap.error("--forks must be at least 1")
    if args.child:
        print(json.dumps(_child_run(args.forks)), flush=True)
        os._exit(0)  # the streams' threads would hold the interpreter open
    base = {k: v for k, v in os.environ.items() if k != "GRPC_ENABLE_FORK_SUPPORT"}
    os.environ.clear()
    os.environ.update(base)
    on = run(args.forks, {})
    off = run(args.forks, {"GRPC_ENABLE_FORK_SUPPORT": "false"})
    for label, died in (("gRPC fork handlers on (default)", on), ("off (raycmd.NODE_ENV)", off)):
        total = sum(died.values())
        print(f"{label:34s} {total:4d} of {args.forks} children died before exec {died or ''}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
