"""The layers hold: checked by importing, and by the import-linter contracts `make lint` runs.

Each headless module is imported in a fresh interpreter; `textual` must stay out of
sys.modules (harlequin's check). The contracts in pyproject.toml keep the rest of the walls
(the console's layers, every module placed; the emulators behind one door; the engine alone;
a backend's parts behind the wiring; the TUI off the network). Each names a whole package and
lists its exceptions, and a test breaks each one in a copy of the tree, with modules that no
contract names, to prove that what lands tomorrow is guarded too. The broken copies are one copy
holding every probe, each in a module of its own, linted once: each case finds its own
module named under its own contract in the report.
"""

from __future__ import annotations

import os
import pkgutil
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.support import REPO

ROOT = REPO


TEXTUAL_HOMES = ("console.tui", "console.screens", "console.widgets")


def _modules(package: str) -> list[str]:
    """Every module of a package but the TUI's: its app shell, screens and widgets (the places
    textual belongs)."""
    path = ROOT / package.replace(".", "/")
    return [
        m.name
        for m in pkgutil.walk_packages([str(path)], prefix=package + ".")
        if not m.name.rsplit(".", 1)[-1].startswith("_") and not m.name.startswith(TEXTUAL_HOMES)
    ]


@pytest.mark.parametrize("package", ["console", "engine", "emulators", "kubeprint"])
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


# The layer contracts (pyproject's [tool.importlinter]), as `make lint` runs them ------------

LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")
CONTRACTS = [
    c["name"]
    for c in tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"][
        "contracts"
    ]
]


def _lint_imports(cwd: Path) -> subprocess.CompletedProcess[str]:
    if not LINT_IMPORTS.exists():
        pytest.skip(f"import-linter is not installed in this environment ({LINT_IMPORTS})")
    return subprocess.run(
        [str(LINT_IMPORTS), str(ROOT / "pyproject.toml"), "--no-cache"],
        cwd=cwd,
        # wide enough that no contract's name or import chain wraps (rich wraps at 80)
        env={**os.environ, "PYTHONPATH": str(cwd), "COLUMNS": "1000"},
        capture_output=True,
        text=True,
        timeout=120,
    )


def _broken(report: str) -> str:
    """The report's part that names the broken contracts (the summary above lists the kept
    ones too)."""
    return report.split("Broken contracts", 1)[1] if "Broken contracts" in report else ""


def _broken_section(report: str, contract: str) -> str:
    """What the report says under the one broken contract whose name starts with
    ``contract``, up to the next broken contract's heading ("" if it is not broken)."""
    (name,) = [c for c in CONTRACTS if c.startswith(contract)]
    broken = _broken(report)
    starts = sorted(i for c in CONTRACTS if (i := broken.find(f"\n{c}\n")) >= 0)
    at = broken.find(f"\n{name}\n")
    if at < 0:
        return ""
    later = [i for i in starts if i > at]
    return broken[at : later[0] if later else len(broken)]


def _copy_tree(to: Path) -> None:
    for package in ("console", "engine", "emulators", "benchmarks", "kubeprint"):
        shutil.copytree(ROOT / package, to / package, ignore=shutil.ignore_patterns("__pycache__"))


def _add_third_backend(tree: Path, init: str) -> None:
    third = tree / "console" / "services" / "backends" / "third"
    third.mkdir()
    (third / "__init__.py").write_text(init)
    (third / "parts.py").write_text("from console.services.model import Event\n")


def test_the_tree_keeps_every_layer_contract() -> None:
    proc = _lint_imports(ROOT)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "0 broken" in proc.stdout


# Each probe is a module that no contract names: the contracts cover what lands tomorrow.
PROBES = [
    ("console/services/_probe.py", "import textual", "The core runs without the TUI"),
    ("console/config/_probe.py", "import rich", "The core runs without the TUI"),
    ("console/script/_probe.py", "import emulators.tpu_pod.client", "Only the wiring"),
    ("console/services/_probe.py", "import emulators.gke.store", "Only the wiring"),
    ("emulators/gke/_probe.py", "import console.services.facade", "The emulators stand"),
    ("emulators/_kit_probe.py", "import engine.notice", "The emulators stand"),
    ("engine/_probe.py", "import console.config", "The engine never imports"),
    ("kubeprint/_probe.py", "import emulators.gke.store", "kubeprint stands alone"),
    ("kubeprint/_probe.py", "import console.services.model", "kubeprint stands alone"),
    ("engine/_probe.py", "import benchmarks.recovery", "The engine never imports"),
    (
        "console/services/recovery/_probe.py",
        "import console.services.backends.tpu_vm.ssh",
        "A backend's parts are reached only",
    ),
    (
        "console/services/_newroom/__init__.py",
        "import console.services.backends.gke.backend",
        "A backend's parts are reached only",
    ),
    (
        "console/services/backends/gke/_probe.py",
        "import console.services.backends.tpu_vm.ssh",
        "The backends are independent",
    ),
    ("console/screens/_probe.py", "import asyncssh", "The TUI never reaches"),
    ("console/tui/_probe.py", "import console.wiring", "The TUI never reaches"),
    ("console/widgets/_probe.py", "import console.services.facade", "The TUI never reaches"),
    ("console/screens/_probe.py", "import console.tui.app", "The console's layers"),
    ("console/widgets/_probe.py", "import console.screens.base", "The console's layers"),
    ("console/services/_probe.py", "import console.tui.app", "The console's layers"),
    ("console/config/_probe.py", "import console.services.model", "The console's layers"),
    # the commands: below every front end (and the wiring), above the services
    ("console/commands/_probe.py", "import console.script.parse", "The console's layers"),
    ("console/commands/_probe.py", "import console.wiring", "The console's layers"),
    ("console/commands/kit/_probe.py", "import console.screens.keys", "The console's layers"),
    ("console/services/_probe.py", "import console.commands", "The console's layers"),
    # the front ends are independent: an agent's call never goes through the script
    ("console/mcp/_probe.py", "import console.script.parse", "The console's layers"),
    ("console/script/_probe.py", "import console.tui.app", "The console's layers"),
    # a new top-level room must be placed in the layers before it lands
    ("console/_newroom.py", "X = 1", "The console's layers"),
    # inside the services: each room imports only the rooms below it
    (
        "console/services/record/_probe.py",
        "import console.services.recovery.watchdog",
        "The services' rooms",
    ),
    (
        "console/services/jobs/_probe.py",
        "import console.services.backends.base",
        "The services' rooms",
    ),
    (
        "console/services/ledger/_probe.py",
        "import console.services.jobs.spec",
        "The services' rooms",
    ),
    (
        "console/services/cadence/_probe.py",
        "import console.services.record.journal",
        "The services' rooms",
    ),
    # a new room inside the services must be placed before it lands
    ("console/services/_room.py", "X = 1", "The services' rooms"),
]

# A third backend, in a copy of the tree: no contract names it, every wall holds for it.
THIRD_BACKEND_PROBES = [
    # its parts are reached only from the wiring...
    ("console/services/recovery/_probe.py", "import console.services.backends.third.parts", "A backend's parts are reached only"),
    ("console/services/_probe.py", "import console.services.backends.third", "A backend's parts are reached only"),
    # ... it imports neither another backend nor the seam ...
    ("console/services/backends/third/_probe.py", "import console.services.backends.gke.kube", "The backends are independent"),
    ("console/services/backends/tpu_vm/_probe.py", "import console.services.backends.third.parts", "The backends are independent"),
    # ... and it sits in the backends' layer of the services' rooms
    ("console/services/backends/third/_probe.py", "import console.services.facade", "The services' rooms"),
]  # fmt: skip


def _probe_module(where: str, case: int) -> tuple[str, str]:
    """``where`` with its first private part (the probe module, or the new room) named for
    case ``case`` alone, and that module's dotted name: every probe sits in one copy of the
    tree, and the report names each by its own module."""
    parts = where.split("/")
    at = next(i for i, part in enumerate(parts) if part.startswith("_") and part != "__init__.py")
    stem, dot, ext = parts[at].partition(".")
    parts[at] = f"{stem}_case{case}{dot}{ext}"
    return "/".join(parts), ".".join([*parts[:at], f"{stem}_case{case}"])


@pytest.fixture(scope="module")
def broken_tree(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[str, str]]:
    """One copy of the tree holding the third backend and every probe, each in a module of
    its own, linted once: the report, and each probe's module by its ``where|line``."""
    tree = tmp_path_factory.mktemp("broken")
    _copy_tree(tree)
    _add_third_backend(tree, '"""A third kind of cluster."""\n')
    modules = {}
    for case, (where, line, _) in enumerate(PROBES + THIRD_BACKEND_PROBES):
        path, module = _probe_module(where, case)
        (tree / path).parent.mkdir(parents=True, exist_ok=True)
        (tree / path).write_text(line + "\n")
        modules[f"{where}|{line}"] = module
    proc = _lint_imports(tree)
    assert proc.returncode != 0, proc.stdout[-3000:]
    return proc.stdout, modules


def _names(section: str, module: str) -> bool:
    return re.search(rf"(?<![\w.]){re.escape(module)}(?![\w.])", section) is not None


@pytest.mark.parametrize(("where", "line", "contract"), PROBES)
def test_a_broken_contract_fails_the_lint(
    broken_tree: tuple[str, dict[str, str]], where: str, line: str, contract: str
) -> None:
    """The contracts are not decoration: one import across a wall, in a copy of the tree,
    and `lint-imports` names the contract, with that import's module under it, and fails."""
    report, modules = broken_tree
    module = modules[f"{where}|{line}"]
    assert _names(_broken_section(report, contract), module), (module, report[-3000:])


@pytest.mark.parametrize(("where", "line", "contract"), THIRD_BACKEND_PROBES)
def test_a_third_backend_is_guarded_without_an_edit(
    broken_tree: tuple[str, dict[str, str]], where: str, line: str, contract: str
) -> None:
    report, modules = broken_tree
    module = modules[f"{where}|{line}"]
    assert _names(_broken_section(report, contract), module), (module, report[-3000:])


def test_a_third_backend_of_its_own_parts_keeps_every_contract(tmp_path: Path) -> None:
    """The other side: inside the third backend its parts import each other and the model
    freely, and the wiring imports it, with no line of pyproject.toml changed."""
    _copy_tree(tmp_path)
    _add_third_backend(tmp_path, "from console.services.backends.third.parts import Event\n")
    (tmp_path / "console" / "wiring" / "_third.py").write_text(
        "import console.services.backends.third.parts\n"
    )
    proc = _lint_imports(tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:]
