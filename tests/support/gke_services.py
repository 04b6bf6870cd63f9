"""The console's GKE backend and services on a GKE emulator of the test's own.

``gke_config`` points a config at an emulator run dir; ``gke_backend`` builds the backend
alone (its journal in memory), ``gke_services`` the whole facade through
``wiring.make_services``. Both stop what they built also when the test fails; the cluster
fixtures (``fixtures_gke``) stop the emulator and check no container survived.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Iterator, Mapping
from pathlib import Path
from typing import Any

from console.config import Config, parse_config
from console.secrets import Scrubber
from console.services.backends.gke.backend import GkeBackend
from console.services.facade import Facade
from console.services.model import Event, Update
from console.services.record.journal import Journal
from console.services.record.sink import EventSink
from console.wiring import make_services
from console.wiring.gke import gke_access
from console.wiring.settings import gke_settings
from emulators.gke import client as gke_client
from emulators.tpu_pod.procs import find_marked

FAKE_TOKEN = "hf_" + "Q7" * 17  # the shape of an HF token: it must never show anywhere
ENV = {"HF_TOKEN": FAKE_TOKEN}


def gke_config(run_dir: Path, **gke: Any) -> Config:
    recovery = gke.pop("recovery", {})
    return parse_config(
        {
            "cluster": {"provider": "gke"},
            "gke": {"run_dir": str(run_dir), **gke},
            "recovery": {"poll_interval_s": 0.5, "ready_timeout_s": 60, **recovery},
        },
        source="gke-test.toml",
    )


@contextlib.asynccontextmanager
async def gke_backend(
    info: gke_client.GkeInfo, config: Config | None = None
) -> AsyncIterator[tuple[GkeBackend, list[Update]]]:
    config = config or gke_config(info.run_dir)
    published: list[Update] = []
    journal = Journal(":memory:", scrubber=Scrubber(["HF_TOKEN"]))
    sink = EventSink(journal, published.append)
    backend = GkeBackend(gke_settings(config), gke_access(config, info), sink=sink, environ=ENV)
    try:
        yield backend, published
    finally:
        await backend.close()
        await sink.flush()
        sink.close()
        journal.close()


@contextlib.asynccontextmanager
async def gke_services(
    config: Config, state_dir: Path, environ: Mapping[str, str] | None = None
) -> AsyncIterator[tuple[Facade, list[Update]]]:
    """The facade as `phantom` builds it (wiring.make_services), started; every update it
    publishes lands in the list."""
    svc = make_services(
        config, state_dir=state_dir, environ=dict(ENV if environ is None else environ)
    )
    seen: list[Update] = []
    svc.subscribe(seen.append)
    try:
        await svc.start()
        yield svc, seen
    finally:
        await svc.stop()
        svc.close_journal()


def events(seen: list[Update], kind: str) -> list[Event]:
    return [u for u in seen if isinstance(u, Event) and u.kind == kind]


def trainer_pids(info: gke_client.GkeInfo) -> list[int]:
    """The emulated GRPO trainers' processes (for SIGSTOP: pods stay Running, no metrics)."""
    run_id = (info.run_dir / "run_id").read_text().strip()
    cg = (info.run_dir / "cgroup").read_text().strip() if (info.run_dir / "cgroup").exists() else ""
    out = []
    for pid in find_marked(f"{run_id}:", Path(cg) if cg else None):
        with contextlib.suppress(OSError):
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            if b"emulators.gke.workload.grpo" in argv:
                out.append(pid)
    return out


@contextlib.contextmanager
def environ(**values: str) -> Iterator[None]:
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
