"""Install exactly what a lock names: uv where it runs, pip from the same pins where it does not.

    python3 scripts/install.py project VENV [--uv UV]        # make setup: .venv from uv.lock
    python3 scripts/install.py tool VENV REQUIREMENTS [--uv UV]   # .tools/xpk from its lock

``project``: ``uv sync --locked --extra dev`` (the project editable, with the engine and the
test tools; nothing else stays in VENV). ``--locked`` refuses a lock that no longer matches
pyproject.toml instead of resolving anew: `make lock` fixes that, on purpose, in a commit.
``tool``: ``uv pip sync`` of a requirements file with hashes into its own venv.

Both write bytecode at install, as pip does (without it, a shell with
PYTHONDONTWRITEBYTECODE=1, this machine's, compiles torch, ray and jax again in every Python
process a test starts). Where uv is missing or fails, pip installs the same pins with
``--require-hashes`` (requirements/dev.txt is uv.lock's export), saying so.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROJECT_PINS = ROOT / "requirements" / "dev.txt"
STALE_FIX = "run `make lock` (it re-locks what pyproject.toml now asks for) and commit uv.lock"


def run(cmd: list[str], **env: str) -> bool:
    return subprocess.run(cmd, cwd=ROOT, check=False, env={**os.environ, **env}).returncode == 0


def venv(path: Path, python: str) -> Path:
    """``path``'s interpreter, with pip (a venv uv made has none)."""
    if not (path / "bin" / "python").exists():
        subprocess.run([python, "-m", "venv", str(path)], check=True)
    target = path / "bin" / "python"
    if subprocess.run([target, "-m", "pip", "--version"], capture_output=True).returncode != 0:
        subprocess.run([target, "-m", "ensurepip", "--quiet"], check=True)
    return target


def pip_install(python: Path, requirements: Path, *more: str) -> bool:
    pip = [str(python), "-m", "pip", "install", "--quiet"]
    return run([*pip, "--require-hashes", "--no-deps", "-r", str(requirements)]) and (
        not more or run([*pip, "--no-deps", *more])
    )


def project(path: Path, uv: str | None, python: str) -> bool:
    if uv:
        check = [uv, "lock", "--check", "--quiet"]
        if subprocess.run(check, cwd=ROOT, check=False, capture_output=True).returncode != 0:
            print(f"setup: uv.lock does not match pyproject.toml: {STALE_FIX}", file=sys.stderr)
            return False
        cmd = [uv, "sync", "--locked", "--extra", "dev", "--compile-bytecode", "--quiet"]
        if run([*cmd, "--python", python], UV_PROJECT_ENVIRONMENT=str(path)):
            return True
        print("note: uv could not install the lock; installing its pins with pip", file=sys.stderr)
    # pip builds the editable project with the locked setuptools, not one it fetches
    target = venv(path, python)
    return pip_install(target, PROJECT_PINS, "--no-build-isolation", "-e", str(ROOT))


def tool(path: Path, requirements: Path, uv: str | None, python: str) -> bool:
    target = venv(path, python)
    if uv:
        cmd = [uv, "pip", "sync", "--python", str(target), "--require-hashes"]
        if run([*cmd, "--compile-bytecode", "--quiet", str(requirements)]):
            return True
        print(f"note: uv could not install {requirements.name}; trying pip", file=sys.stderr)
    return pip_install(target, requirements)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="scripts/install.py", description=__doc__.splitlines()[0])
    parser.add_argument("--uv", help="the uv binary (absent or failing: pip)")
    parser.add_argument("--python", default=sys.executable, help="the interpreter of new venvs")
    sub = parser.add_subparsers(dest="what", required=True)
    sub.add_parser("project", help="the project's venv from uv.lock").add_argument("venv")
    one = sub.add_parser("tool", help="a tool's venv from its requirements file")
    one.add_argument("venv")
    one.add_argument("requirements")
    args = parser.parse_args(argv)
    uv = args.uv if args.uv and Path(args.uv).exists() else None
    if args.what == "project":
        ok = project(Path(args.venv).absolute(), uv, args.python)
    else:
        ok = tool(Path(args.venv).absolute(), Path(args.requirements).absolute(), uv, args.python)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
