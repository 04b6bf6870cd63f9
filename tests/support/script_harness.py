"""The script and status front ends under test: the one ``FakeServices`` (built by the front
end, as the real ones are), a recording ``PodControl``, and the subprocess entry point of the
SIGINT test. (No tests in this module.)
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from console.config import Config
from tests.support.fake_services import Behaviour, Call, FakeServices

# What the front ends read while they work; the intents are the rest of the calls.
READS = frozenset({"job_status", "list_jobs", "events", "follow_logs"})


def _services(
    config: Config, behaviour: Behaviour, on_call: Callable[[Call], None]
) -> FakeServices:
    """An idle healthy pod (no jobs yet) named as the config names it."""
    return FakeServices("idle", config=config, behaviour=behaviour, on_call=on_call)


class FakePod:
    """PodControl recording pod up/down."""

    def __init__(self, record: Callable[[Call], None], up: bool = False) -> None:
        self._record = record
        self.up_now = up

    async def is_up(self) -> bool:
        return self.up_now

    async def up(
        self, hosts: int, *, ready_delay: float | None, ssh_port: int | None
    ) -> dict[str, Any]:
        self._record(Call("pod.up", {"hosts": hosts}))
        self.up_now = True
        return {"state": "READY", "hosts": hosts}

    async def down(self) -> bool:
        self._record(Call("pod.down"))
        was, self.up_now = self.up_now, False
        return was


@dataclass
class Harness:
    behaviour: Behaviour = field(default_factory=Behaviour)
    recorded: list[Call] = field(default_factory=list)
    built: int = 0

    def record(self, call: Call) -> None:
        self.recorded.append(call)

    def factory(self, config: Config) -> FakeServices:
        self.built += 1
        return _services(config, self.behaviour, self.record)

    def pod(self, up: bool = False) -> FakePod:
        return FakePod(self.record, up)

    @property
    def calls(self) -> list[tuple[Any, ...]]:
        """Every call as (name, *arguments)."""
        return [c.as_tuple() for c in self.recorded]

    def names(self, *, reads: bool = True) -> list[str]:
        return [c.name for c in self.recorded if reads or c.name not in READS]


def file_recorder(path: str) -> Callable[[Call], None]:
    """For the subprocess test: every call appended to ``path`` as a JSON line."""

    def record(call: Call) -> None:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(list(call.as_tuple()), default=str) + "\n")

    return record


def run_in_subprocess(script: str, calls_path: str, hang: str, fleet: bool = False) -> int:
    """Entry point of the SIGINT/SIGTERM test's child process. ``fleet``: over two clusters,
    pod-a and pod-b, each call recorded as ``CLUSTER/NAME``."""
    import sys

    from console.config.fleet import parse_fleet
    from console.script.main import script_main
    from console.services.model import JobStatus

    record = file_recorder(calls_path)
    behaviour = Behaviour(hang={hang}, job_statuses=[JobStatus.RUNNING])
    if not fleet:
        return script_main(
            script,
            Config(),
            services_factory=lambda cfg: _services(cfg, behaviour, record),
            pod_control=FakePod(record),
            stdout=sys.stdout,
            stderr=sys.stderr,
        )
    names = ("pod-a", "pod-b")
    clusters = parse_fleet({"clusters": [{"name": n} for n in names]}, source="fleet.toml")

    def on(name: str) -> Callable[[Call], None]:
        return lambda call: record(Call(f"{name}/{call.name}", call.args))

    return script_main(
        script,
        clusters,
        services_factory=lambda cfg: _services(cfg, behaviour, on(cfg.name)),
        pod_control={n: FakePod(on(n)) for n in names},
        stdout=sys.stdout,
        stderr=sys.stderr,
    )
