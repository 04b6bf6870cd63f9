"""Two 2-host pod emulators in their own zones (pod-a on 127.0.0.x, pod-b on 127.1.0.x) and
the ``[[clusters]]`` config naming them (``tests.watch.test_watch_fleet.fleet_toml``), for
the front ends' fleet tests; every process stopped by its pid afterwards. (No tests here.)"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from emulators.tpu_pod.client import PodInfo
from tests.support.fixtures_pod import start_test_pod, stop_test_pod

NAMES = ("pod-a", "pod-b")


@dataclass
class TwoPods:
    config: Path
    pods: dict[str, PodInfo]


@contextlib.contextmanager
def two_pods(tmp_path: Path) -> Iterator[TwoPods]:
    from tests.watch.test_watch_fleet import fleet_toml

    pods: dict[str, PodInfo] = {}
    try:
        for zone, name in zip(("local-a", "local-b"), NAMES, strict=True):
            pods[name] = start_test_pod(
                tmp_path / name, hosts=2, extra_args=["--zone", zone, "--node-name", name]
            )
        config = tmp_path / "fleet.toml"
        config.write_text(fleet_toml(pods, tmp_path))
        yield TwoPods(config, pods)
    finally:
        for pod in pods.values():
            stop_test_pod(pod.run_dir)
