"""The core runs without the TUI: services and engine never pull in textual.

Each headless module is imported in a fresh interpreter; `textual` must stay out of
sys.modules (harlequin's check). Third-party libraries may use rich themselves, so only
our own code's rich imports are caught, by the lint hook.
"""

from __future__ import annotations

import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _modules(package: str) -> list[str]:
    path = ROOT / package.replace(".", "/")
    return [
        m.name
        for m in pkgutil.walk_packages([str(path)], prefix=package + ".")
        if not m.name.rsplit(".", 1)[-1].startswith("_")
    ]


@pytest.mark.parametrize("package", ["console.services", "engine"])
def test_headless_packages_do_not_import_textual(package: str) -> None:
    modules = _modules(package)
    assert modules, f"no modules found under {package}"
    code = (
        "import importlib, sys\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] == 'textual')\n"
        "print(','.join(bad))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "", f"{package} imported: {proc.stdout.strip()}"
