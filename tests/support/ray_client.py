"""A ray:// task run the way a user runs one, and what to read when it fails."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

RAY_CLIENT_TASK = """
import json, sys
import ray
ray.init(sys.argv[1], logging_level="ERROR")

@ray.remote(num_cpus=0)
def where():
    return ray.util.get_node_ip_address()

print(json.dumps({"ran_on": ray.get(where.remote()), "nodes": len(ray.nodes())}))
"""


def ray_client_server_logs(root: Path) -> str:
    """The tails of Ray's client-server logs under ``root``: why a ray:// connect failed."""
    tails = []
    for f in sorted(root.rglob("ray_client_server*.err")) + sorted(
        root.rglob("ray_client_server*.out")
    ):
        text = f.read_text(errors="replace")[-1500:]
        if text.strip():
            tails.append(f"--- {f.relative_to(root)}\n{text}")
    return "\n".join(tails) or f"(no ray_client_server logs under {root})"


async def ray_client_task(address: str, logs_root: Path) -> dict[str, object]:
    """Run ``RAY_CLIENT_TASK`` against ``address`` in a fresh interpreter; its result."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        RAY_CLIENT_TASK,
        address,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 240)
    assert proc.returncode == 0, err.decode()[-3000:] + "\n" + ray_client_server_logs(logs_root)
    result: dict[str, object] = json.loads(out.decode().strip().splitlines()[-1])
    return result


def client_proxier_env(gcs: str) -> dict[str, str]:
    """The environment of the Ray client proxier serving the cluster whose GCS is ``gcs``."""
    for pid in (p.name for p in Path("/proc").iterdir() if p.name.isdigit()):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            if b"ray.util.client.server" not in cmd or b"--mode=proxy" not in cmd:
                continue
            if f"--address={gcs}".encode() not in cmd:
                continue
            raw = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:  # gone meanwhile
            continue
        pairs = (item.decode(errors="replace").partition("=") for item in raw.split(b"\0") if item)
        return {name: value for name, _, value in pairs}
    raise AssertionError(f"no Ray client proxier for {gcs} is running")
