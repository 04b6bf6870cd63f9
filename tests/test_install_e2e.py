"""The product as a user installs it, away from the checkout.

The sdist is built, then the wheel from the sdist (``python -m build``, with the locked
build backend), so a file the sdist forgets is missing from the wheel too. The wheel goes
into a fresh venv beside the base install's pins (requirements/console.txt, uv.lock's
export: no engine), and every command runs from a directory outside the checkout with
nothing of it on the path: ``--version``, ``pod up``, the first-look example (a preemption
and the whole recovery loop, Ray included), ``status --json`` and ``pod down``. No stderr
holds a warning line, and the venv holds no torch, JAX or SB3.

The build and the venv are this module's (one bring-up); the image test shares them.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tomllib
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from benchmarks.pods import gcp_user_key
from emulators.tpu_pod.client import pod_status, start_pod, stop_pod
from tests.script.test_e2e import assert_pod_gone, write_config
from tests.support import REPO
from tests.test_quiet_terminal import warning_lines

UV = REPO / ".tools" / "uv" / "bin" / "uv"
PINS = REPO / "requirements" / "console.txt"
VERSION = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not UV.exists(), reason="uv is not installed (make setup)"),
]


@dataclass(frozen=True)
class Built:
    wheel: Path
    sdist: Path


@dataclass(frozen=True)
class Installed:
    venv: Path
    home: Path  # outside the checkout: the commands' cwd and XDG dirs

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
        env.update(
            PATH=f"{self.venv / 'bin'}{os.pathsep}{env.get('PATH', '')}",
            XDG_STATE_HOME=str(self.home / "state"),
            XDG_CONFIG_HOME=str(self.home / "config"),
            XDG_CACHE_HOME=str(self.home / "cache"),
            PYTHONWARNINGS="always",
        )
        return env

    def phantom(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.venv / "bin" / "phantom"), *args],
            cwd=self.home,
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=timeout,
        )


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    out = tmp_path_factory.mktemp("dist")
    argv = [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(REPO)]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (wheel,) = out.glob("phantom_console-*.whl")
    (sdist,) = out.glob("phantom_console-*.tar.gz")
    return Built(wheel, sdist)


@pytest.fixture(scope="module")
def installed(built: Built, tmp_path_factory: pytest.TempPathFactory) -> Installed:
    root = tmp_path_factory.mktemp("user")
    venv, home = root / "venv", root / "home"
    home.mkdir()
    python = str(venv / "bin" / "python")
    for argv in (
        [str(UV), "venv", "--quiet", "--python", sys.executable, str(venv)],
        [str(UV), "pip", "install", "--quiet", "--python", python, "--require-hashes", "--no-deps", "-r", str(PINS)],
        [str(UV), "pip", "install", "--quiet", "--python", python, "--no-deps", str(built.wheel)],
        [str(UV), "pip", "check", "--quiet", "--python", python],  # the pins meet its metadata
    ):  # fmt: skip
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=600, cwd=home)
        assert proc.returncode == 0, (argv, proc.stdout, proc.stderr)
    return Installed(venv, home)


def test_the_wheel_holds_the_product_and_its_data_not_the_benchmarks(built: Built) -> None:
    names = zipfile.ZipFile(built.wheel).namelist()
    tops = {n.split("/")[0] for n in names if not n.startswith("phantom_console-")}
    assert tops == {"console", "engine", "emulators", "kubeprint"}
    for data in (
        "console/tui/app.tcss",
        "console/screens/overview.tcss",
        "emulators/gke/data/jobset-v1alpha2.schema.json",
        "engine/sweeps/ppo_rl_study.json",
    ):
        assert data in names
    entry = next(n for n in names if n.endswith("entry_points.txt"))
    assert "phantom = console.cli:run" in zipfile.ZipFile(built.wheel).read(entry).decode()


def test_the_installed_tool_runs_a_preemption_drill_from_outside_the_checkout(
    installed: Installed,
) -> None:
    where = subprocess.run(
        [str(installed.venv / "bin" / "python"), "-c", "import console; print(console.__file__)"],
        cwd=installed.home,
        env=installed.env(),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert where.startswith(str(installed.venv)), where
    engine = [
        m for m in ("torch", "jax", "stable_baselines3", "gymnasium")
        if (installed.venv / "lib" / "python3.11" / "site-packages" / m).exists()
    ]  # fmt: skip
    assert engine == [], "the console's install carries the engine's stack"

    version = installed.phantom("--version")
    assert version.returncode == 0 and version.stdout == f"phantom {VERSION}\n"
    config = str(write_config(installed.home, hosts=2))
    run_dir = installed.home / "pod"
    seen = {"--version": version}
    try:
        up = installed.phantom("pod", "up", "--run-dir", str(run_dir), "--hosts", "2", "--ssh-port", "0")  # fmt: skip
        seen["pod up"] = up
        assert up.returncode == 0, up.stderr
        example = str(REPO / "examples" / "first_look.phantom")
        script = installed.phantom("--config", config, "--script", example, timeout=600)
        seen["--script"] = script
        lines = [json.loads(line) for line in script.stdout.splitlines()]
        assert script.returncode == 0, (script.stderr[-3000:], lines[-1:])
        kinds = {x["kind"] for x in lines if x["type"] == "event"}
        assert {"preempted", "recovered", "incident"} <= kinds
        status = installed.phantom("--config", config, "status", "--json")
        seen["status"] = status
        assert status.returncode == 0, status.stderr
        snap = json.loads(status.stdout)
        assert snap["pod"]["tpu_state"] == "READY" and snap["ray"]["alive_nodes"] == 2
        down = installed.phantom("pod", "down", "--run-dir", str(run_dir))
        seen["pod down"] = down
        assert down.returncode == 0, down.stderr
    finally:
        assert_pod_gone(run_dir)
    assert pod_status(run_dir) is None
    leaks = {cmd: warning_lines(p.stderr) for cmd, p in seen.items() if warning_lines(p.stderr)}
    assert leaks == {}


def buildah(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    argv = ["buildah", "--storage-driver", "vfs", *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)


def buildah_problem() -> str | None:
    if not shutil.which("buildah"):
        return "buildah is not installed (apt-get install buildah debootstrap; .ci/run does)"
    if os.geteuid() != 0:
        return "buildah's chroot isolation with the vfs driver needs root here"
    return None


@pytest.mark.skipif(buildah_problem() is not None, reason=buildah_problem() or "")
@pytest.mark.timeout(1200)
def test_the_image_runs_the_watchdog_against_a_pod_on_the_hosts_loopback(
    built: Built, tmp_path: Path
) -> None:
    """`make image`'s build (deploy/Dockerfile by buildah, a debootstrap base where no
    registry answers), then in the image, as its user: `phantom --version`, and a GCP
    cluster's watch pass and status through the TPU API and SSH of a GCP-faithful pod
    emulator on the host's loopback (the container shares the host's network)."""
    tag = f"localhost/phantom-watch-test-{os.getpid()}"
    image = [sys.executable, str(REPO / "scripts" / "image.py"), "--wheel", str(built.wheel)]
    keys, config = tmp_path / "keys", tmp_path / "config"
    keys.mkdir()
    config.mkdir()
    key = gcp_user_key(keys / "google_compute_engine")
    ctr = ""
    try:
        proc = subprocess.run([*image, "--tag", tag], capture_output=True, text=True, timeout=1100)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        assert proc.stdout.startswith(f"{tag}: "), proc.stdout  # its size, for the record
        print(proc.stdout)
        pod = start_pod(
            tmp_path / "pod", hosts=1, ssh_port=0, faithful=True, accelerator_type="v4-8",
            ssh_user="alice", ssh_key=key, ready_delay=0.2, timeout=120,
        )  # fmt: skip
        (config / "config.toml").write_text(
            GCP_CONFIG.format(api=pod.tpu_api, port=pod.ssh_port, node=pod.node_name)
        )
        for path in (keys, key):  # the image's user (uid 10001) reads its key, as mounted
            os.chown(path, 10001, 10001)
        made = buildah("from", "--quiet", tag)
        assert made.returncode == 0, made.stderr
        ctr = made.stdout.strip()
        run = ["run", "--isolation", "chroot", "--env", "NO_GCE_CHECK=True"]
        run += ["-v", f"{config}:/config:ro", "-v", f"{keys}:/keys:ro", ctr, "--"]
        version = buildah(*run, "phantom", "--version")
        assert version.returncode == 0 and version.stdout.startswith("phantom "), version
        assert buildah(*run, "id", "-un").stdout.strip() == "phantom"
        phantom = [*run, "phantom", "--config", "/config/config.toml"]
        watch = buildah(*phantom, "watch", "--once", timeout=300)
        assert watch.returncode == 0, watch.stderr[-3000:]
        lines = [json.loads(line) for line in watch.stdout.splitlines()]
        assert lines[-1] == {
            "type": "watch",
            "state": "stopped",
            "message": "stopped",
            "exit_code": 0,
        }
        assert any(x.get("kind") == "host_key" and x["data"]["source"] == "TPU API" for x in lines)
        status = buildah(*phantom, "status", "--json", timeout=300)
        assert status.returncode == 0, status.stderr[-3000:]
        snap = json.loads(status.stdout)
        assert snap["pod"]["provider"] == "gcp" and snap["pod"]["tpu_state"] == "READY"
        assert [h["ssh"] for h in snap["pod"]["hosts"]] == ["ok"], snap["pod"]["hosts"]
        assert warning_lines(watch.stderr + status.stderr) == []
    finally:
        stop_pod(tmp_path / "pod")
        if ctr:
            buildah("rm", ctr)
        buildah("rmi", tag)
    assert pod_status(tmp_path / "pod") is None


GCP_CONFIG = """
[cluster]
provider = "gcp"
project = "phantom-local"
zone = "local-a"
node_name = "{node}"
accelerator_type = "v4-8"
api_endpoint = "http://{api}"

[ssh]
user = "alice"
key = "/keys/google_compute_engine"
port = {port}
"""
