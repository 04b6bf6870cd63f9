"""The locks name what a fresh machine installs, and `make lint` fails while one is stale.

Each case edits a copy of the checkout's lock inputs (pyproject, the Makefile, uv.lock and
the exports) and runs the check `make lint` runs (scripts/lock.py) with the pinned uv."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.support import REPO

UV = REPO / ".tools" / "uv" / "bin" / "uv"
LOCK_SCRIPT = REPO / "scripts" / "lock.py"
INPUTS = ["pyproject.toml", "Makefile", "uv.lock", "requirements", "README.md"]

pytestmark = pytest.mark.skipif(not UV.exists(), reason="uv is not installed (make setup)")


def check(root: Path) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, str(LOCK_SCRIPT), "--uv", str(UV), "--root", str(root), "check"]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)


@pytest.fixture
def copy(tmp_path: Path) -> Path:
    for name in INPUTS:
        src = REPO / name
        if src.is_dir():
            shutil.copytree(src, tmp_path / name)
        else:
            shutil.copy2(src, tmp_path / name)
    return tmp_path


def test_the_committed_locks_are_current() -> None:
    proc = check(REPO)
    assert proc.returncode == 0, proc.stderr


def test_a_pyproject_edit_without_a_relock_fails_naming_the_fix(copy: Path) -> None:
    pyproject = copy / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace('"rich>=13.7"', '"rich>=13.8"'))
    proc = check(copy)
    assert proc.returncode == 1
    assert "lock: uv.lock does not match pyproject.toml: run `make lock`" in proc.stderr


def test_an_export_that_is_not_the_locks_fails(copy: Path) -> None:
    exported = copy / "requirements" / "console.txt"
    exported.write_text(re.sub(r"^textual==\S+", "textual==0.1", exported.read_text(), flags=re.M))
    proc = check(copy)
    assert proc.returncode == 1
    assert "requirements/console.txt is not uv.lock's export: run `make lock`" in proc.stderr


def test_a_tool_pin_that_is_not_the_makefiles_fails(copy: Path) -> None:
    makefile = copy / "Makefile"
    makefile.write_text(
        re.sub(r"^XPK_VERSION := \S+", "XPK_VERSION := 9.9.9", makefile.read_text(), flags=re.M)
    )
    proc = check(copy)
    assert proc.returncode == 1
    assert "requirements/xpk.txt does not pin the Makefile's XPK_VERSION, xpk 9.9.9" in proc.stderr


def test_the_lock_takes_torchs_cpu_build_with_its_hash_and_pypi_for_the_rest() -> None:
    lock = tomllib.loads((REPO / "uv.lock").read_text())
    torches = {p["version"]: p for p in lock["package"] if p["name"] == "torch"}
    cpu = torches["2.13.0+cpu"]
    assert cpu["source"]["path"].startswith("/opt/wheels/")
    (wheel,) = cpu["wheels"]
    assert wheel["hash"].startswith("sha256:")
    others = [p for p in lock["package"] if "registry" in p["source"]]
    assert {p["source"]["registry"] for p in others} == {"https://pypi.org/simple"}
    engine_only = {"torch", "stable-baselines3", "jax", "jaxlib", "gymnasium"}
    console = (REPO / "requirements" / "console.txt").read_text()
    assert not [n for n in engine_only if re.search(rf"^{n}==", console, re.M)]
