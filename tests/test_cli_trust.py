"""`phantom trust HOST` against the emulator: a recreated VM's new host key is refused
until the user trusts it, then accepted; the action is journaled."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from console.config import load_config
from console.wiring import make_services
from emulators.tpu_pod import client as pod_client
from emulators.tpu_pod.client import PodInfo


def _write_config(pod: PodInfo, tmp_path: Path) -> Path:
    cfg = tmp_path / "config.toml"
    cfg.write_text(
        "[cluster]\n"
        f'provider = "local"\nhosts = {len(pod.hosts)}\nrun_dir = "{pod.run_dir}"\n'
        "[ssh]\n"
        f'known_hosts_policy = "accept-new"\nknown_hosts = "{tmp_path / "known_hosts"}"\n'
        "connect_timeout_s = 5.0\nretries = 0\n"
    )
    return cfg


async def _run_on(cfg: Path, host: str) -> tuple[bool, str]:
    svc = make_services(load_config(cfg), autostart_pod=False)
    try:
        res = await svc.backend.parts.ssh.run("echo $PHANTOM_HOST", hosts=[host])
        (only,) = res.values()
        return only.ok, only.stdout_tail.strip() or only.error
    finally:
        await svc.stop()


def _phantom(cfg: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "console", "--config", str(cfg), *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


async def test_trust_accepts_a_recreated_hosts_new_key(pod: PodInfo, tmp_path: Path) -> None:
    cfg = _write_config(pod, tmp_path)
    ok, out = await _run_on(cfg, "w2")
    assert ok and out == "phantom-pod-w2", out  # first use recorded the key

    pod_client.recreate(pod.run_dir, 2, wait=True)
    ok, err = await _run_on(cfg, "w2")
    assert not ok
    assert "changed" in err and "phantom trust" in err, err

    proc = _phantom(cfg, "trust", "w2")
    assert proc.returncode == 0, proc.stderr
    assert "w2" in proc.stdout

    ok, out = await _run_on(cfg, "w2")
    assert ok and out == "phantom-pod-w2", out


def test_trust_unknown_host_exits_2(pod: PodInfo, tmp_path: Path) -> None:
    proc = _phantom(_write_config(pod, tmp_path), "trust", "w9")
    assert proc.returncode == 2
    assert "w9" in proc.stderr
