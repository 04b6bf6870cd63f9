"""Timings of the GKE emulator: `up`, and a slice preemption of an xpk-style JobSet
(notice -> 8 pods Failed -> JobSet restart -> 8 new pods Running).

``python -m benchmarks.emulator_gke [--rounds N] [--recreate-delay S]``; the run dir is a
temporary directory, removed afterwards with everything the emulator started.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from emulators.gke import client

JS = "/apis/jobset.x-k8s.io/v1alpha2/namespaces/default/jobsets"
SEL = "labelSelector=jobset.sigs.k8s.io/jobset-name%3Dbench"
COUNTER = "exec python -c \"import time\nwhile True:\n    print('step', flush=True)\n    time.sleep(0.2)\""


def _get(info: client.GkeInfo, path: str) -> Any:
    with urllib.request.urlopen(f"{info.server}{path}", timeout=10) as resp:
        return json.loads(resp.read())


def _post(info: client.GkeInfo, path: str, body: Any) -> None:
    req = urllib.request.Request(
        f"{info.server}{path}",
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    urllib.request.urlopen(req, timeout=10).close()


def _wait(check: Any, timeout: float = 120.0) -> float:
    t0 = time.monotonic()
    while not check():
        if time.monotonic() - t0 > timeout:
            raise TimeoutError("bench: condition not reached")
        time.sleep(0.01)
    return time.monotonic()


def _jobset() -> dict[str, Any]:
    pod = {
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 30,
        "nodeSelector": {"cloud.google.com/gke-tpu-accelerator": "tpu-v5p-slice"},
        "tolerations": [{"operator": "Exists", "key": "google.com/tpu"}],
        "containers": [
            {
                "name": "jax-tpu",
                "image": "gcr.io/p/maxtext:1",
                "command": ["bash", "-c", COUNTER],
                "resources": {"limits": {"google.com/tpu": 4}},
            }
        ],
    }
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "bench"},
        "spec": {
            "failurePolicy": {"maxRestarts": 100},
            "replicatedJobs": [
                {
                    "name": "slice-job",
                    "replicas": 1,
                    "template": {
                        "spec": {
                            "parallelism": 8,
                            "completions": 8,
                            "backoffLimit": 0,
                            "template": {"spec": pod},
                        }
                    },
                }
            ],
        },
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--recreate-delay", type=float, default=1.0)
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="gke-bench-") as tmp:
        run_dir = Path(tmp)
        t0 = time.monotonic()
        info = client.start(
            run_dir, recreate_delay=args.recreate_delay, extra_args=["--job-backoff", "0.01"]
        )
        up = time.monotonic() - t0
        try:
            _post(info, JS, _jobset())

            def phases() -> list[str]:
                items = _get(info, f"/api/v1/namespaces/default/pods?{SEL}")["items"]
                return [i.get("status", {}).get("phase", "") for i in items]

            t1 = time.monotonic()
            _wait(lambda: phases().count("Running") == 8)
            first_running = time.monotonic() - t1
            failed, restarted, back = [], [], []
            for r in range(args.rounds):
                t = time.monotonic()
                client.preempt_slice(run_dir, 0, grace_s=30)
                failed.append(_wait(lambda: "Running" not in phases()) - t)
                want = r + 1

                def restarts_reached(w: int = want) -> bool:
                    return bool(_get(info, f"{JS}/bench")["status"].get("restarts") == w)

                restarted.append(_wait(restarts_reached) - t)
                back.append(_wait(lambda: phases().count("Running") == 8) - t)
        finally:
            client.stop(run_dir)
    print(f"up (daemon -> API answering):             {up:.2f} s")
    print(f"JobSet created -> 8 pods Running:         {first_running:.2f} s")
    print(
        f"preempt -> no pod Running (median of {args.rounds}):  {statistics.median(failed):.2f} s"
    )
    print(f"preempt -> JobSet restarts+1 (median):    {statistics.median(restarted):.2f} s")
    print(
        f"preempt -> 8 new pods Running (median):   {statistics.median(back):.2f} s "
        f"(recreate delay {args.recreate_delay:g} s)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
