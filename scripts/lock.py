"""Write the locks, or check that they are current.

    python scripts/lock.py --uv UV write [--upgrade]   # make lock / make upgrade
    python scripts/lock.py --uv UV check               # make lint

What a fresh machine installs is named here, never "whatever the registries serve today":

- ``uv.lock``: the project with every extra, for every platform, each file's hash. `make
  setup` installs it with ``uv sync --locked``.
- ``requirements/dev.txt``: the same, exported for pip (hashes; the fallback where uv cannot
  run). ``requirements/console.txt``: the base install alone (the console and its emulators,
  no engine), which the watchdog's image and the wheel test install.
- ``requirements/xpk.txt``: the xpk tool venv (``.tools/xpk``), pinned at the Makefile's
  XPK_VERSION with its dependencies' hashes.
- ``requirements/uv.txt``: uv itself, which pip installs first: the version pyproject's
  ``[tool.uv] required-version`` names (another uv may write another lock; to move to a new
  uv, change that line and run `make lock`).

``write`` re-locks (``--upgrade``: to the newest versions pyproject allows) and re-exports;
``check`` exits 1 naming the command that fixes what is stale.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PYTHON_VERSION = "3.11"
# Each export: its file, and the extras it installs (none: the base alone).
EXPORTS = {"dev.txt": ["dev"], "console.txt": []}
FIX = "run `make lock` (or `make upgrade` for the newest allowed versions) and commit the result"


class Project:
    """The checkout whose locks are written or checked (a copy of it, in the tests)."""

    def __init__(self, root: Path, uv_bin: str) -> None:
        self.root = root
        self.req = root / "requirements"
        self.uv_bin = uv_bin

    def uv(self, *args: str) -> subprocess.CompletedProcess[str]:
        cmd = [self.uv_bin, *args]
        return subprocess.run(cmd, cwd=self.root, check=False, text=True, capture_output=True)

    def export(self, extras: list[str]) -> str:
        args = ["export", "--frozen", "--no-emit-project", "--format", "requirements-txt"]
        proc = self.uv(*args, *(a for extra in extras for a in ("--extra", extra)), "--quiet")
        if proc.returncode != 0:
            raise SystemExit(f"lock: uv export failed:\n{proc.stderr}")
        return proc.stdout

    def compile_pins(self, requirement: str, upgrade: bool) -> str:
        """``requirement`` and its dependencies, universal, with hashes (pip-compile's form)."""
        with tempfile.TemporaryDirectory() as tmp:
            src = Path(tmp) / "in.txt"
            src.write_text(requirement + "\n")
            args = ["pip", "compile", str(src), "--universal", "--generate-hashes", "--quiet"]
            args += ["--python-version", PYTHON_VERSION, "--no-header"]
            proc = self.uv(*args, *(["--upgrade"] if upgrade else []))
        if proc.returncode != 0:
            raise SystemExit(f"lock: uv pip compile {requirement} failed:\n{proc.stderr}")
        header = (
            f"# {requirement} and its dependencies: `make lock` writes this (scripts/lock.py)\n"
        )
        return header + proc.stdout.replace(str(src), "scripts/lock.py")

    def xpk_version(self) -> str:
        found = re.search(r"^XPK_VERSION := (\S+)", (self.root / "Makefile").read_text(), re.M)
        assert found, "Makefile: XPK_VERSION := ... not found"
        return found.group(1)

    def uv_version(self) -> str:
        """pyproject's ``required-version`` (``==X``): the uv that writes and reads the lock."""
        pyproject = tomllib.loads((self.root / "pyproject.toml").read_text())
        required = str(pyproject["tool"]["uv"]["required-version"])
        assert required.startswith("=="), "pyproject: [tool.uv] required-version = '==X.Y.Z'"
        return required.removeprefix("==")

    def tools(self) -> list[tuple[str, str, str]]:
        """(name, version, where that version is set) of each tool pinned by its own file."""
        return [
            ("xpk", self.xpk_version(), "the Makefile's XPK_VERSION"),
            ("uv", self.uv_version(), "pyproject's [tool.uv] required-version"),
        ]

    def pinned(self, name: str) -> str | None:
        path = self.req / f"{name}.txt"
        text = path.read_text() if path.exists() else ""
        found = re.search(rf"^{re.escape(name)}==(\S+)", text, re.M)
        return found.group(1) if found else None

    def write(self, upgrade: bool) -> int:
        proc = self.uv("lock", *(["--upgrade"] if upgrade else []))
        print(proc.stderr, end="", file=sys.stderr)
        if proc.returncode != 0:
            return 1
        self.req.mkdir(exist_ok=True)
        for name, extras in EXPORTS.items():
            (self.req / name).write_text(self.export(extras))
        for name, version, _ in self.tools():
            if upgrade or self.pinned(name) != version:
                pins = self.compile_pins(f"{name}=={version}", upgrade)
                (self.req / f"{name}.txt").write_text(pins)
        return 0

    def problems(self) -> list[str]:
        found = []
        if self.uv("lock", "--check", "--quiet").returncode != 0:
            found.append("uv.lock does not match pyproject.toml")
        else:
            for name, extras in EXPORTS.items():
                path = self.req / name
                if not path.exists() or path.read_text() != self.export(extras):
                    found.append(f"requirements/{name} is not uv.lock's export")
        for name, version, where in self.tools():
            if self.pinned(name) != version:
                found.append(f"requirements/{name}.txt does not pin {where}, {name} {version}")
        return found

    def check(self) -> int:
        problems = self.problems()
        for problem in problems:
            print(f"lock: {problem}: {FIX}", file=sys.stderr)
        return 1 if problems else 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="scripts/lock.py", description=__doc__.splitlines()[0])
    parser.add_argument("--uv", required=True, help="the uv binary (make: .tools/uv/bin/uv)")
    parser.add_argument("--root", type=Path, default=ROOT, help=argparse.SUPPRESS)  # tests
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("write", help="re-lock and re-export")
    up.add_argument("--upgrade", action="store_true", help="to the newest allowed versions")
    sub.add_parser("check", help="exit 1, naming the fix, if a lock is stale")
    args = parser.parse_args(argv)
    if not Path(args.uv).exists():
        print(f"lock: {args.uv} is missing: `make setup` installs it", file=sys.stderr)
        return 1
    project = Project(args.root, args.uv)
    return project.write(args.upgrade) if args.command == "write" else project.check()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
