"""Build the watchdog's image (deploy/Dockerfile) with buildah: no Docker engine needed.

    python3 scripts/image.py --wheel DIST/phantom_console-X-py3-none-any.whl [--tag phantom-watch]
        [--base python:3.11-slim]            # make image

The build context is a folder of its own holding what the Dockerfile copies (the wheel and
requirements/console.txt), so nothing else of the checkout is read. buildah runs the
Dockerfile's steps under ``--isolation chroot`` with the ``vfs`` storage driver, which work
where a container runtime cannot (this machine, CI's); ``--layers=false`` commits once.

The base: ``--base`` where it is present or can be pulled; where no registry answers, a
Debian bookworm (Python 3.11, as python:3.11-slim) made by debootstrap from Debian's own
mirror stands in, built once and kept as ``localhost/phantom-base:bookworm`` (about a minute
and a half here). Prints the image's name and size on stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEBIAN_BASE = "localhost/phantom-base:bookworm"
DEBIAN_SUITE = "bookworm"  # Debian 12: Python 3.11, the project's
DEBIAN_MIRROR = os.environ.get("DEBIAN_MIRROR", "http://deb.debian.org/debian")
DEBIAN_PACKAGES = "python3,python3-venv,ca-certificates"
BUILD_CA = "/run/phantom-build-ca.crt"


class ImageError(Exception):
    """A step failed; the message says which and how to fix it."""


def buildah(*args: str, capture: bool = True) -> subprocess.CompletedProcess[str]:
    """buildah on the vfs driver; its own output to our stderr unless captured."""
    cmd = ["buildah", "--storage-driver", "vfs", *args]
    if capture:
        return subprocess.run(cmd, capture_output=True, text=True, check=False)
    return subprocess.run(cmd, stdout=sys.stderr, text=True, check=False)


def have_image(name: str) -> bool:
    return buildah("inspect", "--type", "image", name).returncode == 0


def debian_base() -> str:
    """``localhost/phantom-base:bookworm``, made by debootstrap if it is not there yet."""
    if have_image(DEBIAN_BASE):
        return DEBIAN_BASE
    if not shutil.which("debootstrap"):
        raise ImageError("no base image: install debootstrap (apt-get install debootstrap)")
    with tempfile.TemporaryDirectory(prefix="phantom-base-") as tmp:
        rootfs = Path(tmp) / "rootfs"
        print(f"image: making a Debian {DEBIAN_SUITE} base with debootstrap", file=sys.stderr)
        cmd = ["debootstrap", "--variant=minbase", f"--include={DEBIAN_PACKAGES}"]
        proc = subprocess.run(
            [*cmd, DEBIAN_SUITE, str(rootfs), DEBIAN_MIRROR], capture_output=True, text=True
        )
        if proc.returncode != 0:
            raise ImageError(f"debootstrap failed:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
        for cache in ("var/cache/apt/archives", "var/lib/apt/lists"):
            for item in (rootfs / cache).glob("*"):
                if item.is_file():
                    item.unlink()
        ctr = buildah("from", "scratch").stdout.strip()
        try:
            if buildah("copy", ctr, str(rootfs), "/").returncode != 0:
                raise ImageError("buildah copy of the debootstrap tree failed")
            buildah("config", "--cmd", "/bin/bash", "--env", "LANG=C.UTF-8", ctr)
            if buildah("commit", "--quiet", ctr, DEBIAN_BASE).returncode != 0:
                raise ImageError("buildah commit of the Debian base failed")
        finally:
            buildah("rm", ctr)
    return DEBIAN_BASE


def pick_base(wanted: str) -> str:
    if have_image(wanted):
        return wanted
    pulled = buildah("pull", "--quiet", wanted)
    if pulled.returncode == 0:
        return wanted
    reason = pulled.stderr.strip().splitlines()[-1] if pulled.stderr.strip() else "no answer"
    print(f"image: {wanted} cannot be pulled here ({reason})", file=sys.stderr)
    return debian_base()


def host_ca() -> Path | None:
    """The CA bundle pip and uv trust on this machine (``PIP_CERT``, ``SSL_CERT_FILE``, or
    pip's ``cert`` setting). Behind a TLS-inspecting proxy the build's downloads need it too:
    it is mounted for the build only (named by build arguments), never copied into the image."""
    found = os.environ.get("PIP_CERT") or os.environ.get("SSL_CERT_FILE")
    if not found:
        listed = subprocess.run(
            [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True
        ).stdout
        for line in listed.splitlines():
            key, _, value = line.partition("=")
            if key.endswith(".cert"):
                found = value.strip("'\"")
    return Path(found) if found and Path(found).is_file() else None


def size(tag: str) -> str:
    """The image's size, uncompressed, as buildah prints it (e.g. "1.1 GB")."""
    (entry,) = json.loads(buildah("images", "--json", tag).stdout or "[]")
    return str(entry["size"])


def build(wheel: Path, tag: str, base: str) -> str:
    if not shutil.which("buildah"):
        raise ImageError("buildah is not installed (apt-get install buildah)")
    chosen = pick_base(base)
    with tempfile.TemporaryDirectory(prefix="phantom-image-") as tmp:
        context = Path(tmp)
        (context / "dist").mkdir()
        (context / "requirements").mkdir()
        shutil.copy2(wheel, context / "dist" / wheel.name)
        for pins in ("uv.txt", "console.txt"):
            shutil.copy2(ROOT / "requirements" / pins, context / "requirements")
        args = ["bud", "--isolation", "chroot", "--layers=false"]
        args += ["--build-arg", f"BASE={chosen}", "-f", str(ROOT / "deploy" / "Dockerfile")]
        ca = host_ca()
        if ca:
            args += ["--volume", f"{ca}:{BUILD_CA}:ro"]
            args += [
                "--build-arg",
                f"PIP_CERT={BUILD_CA}",
                "--build-arg",
                f"SSL_CERT_FILE={BUILD_CA}",
            ]
        proc = buildah(*args, "-t", tag, str(context), capture=False)
    if proc.returncode != 0:
        raise ImageError(f"buildah bud failed (exit {proc.returncode}); its output is above")
    return chosen


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="scripts/image.py", description=__doc__.splitlines()[0])
    parser.add_argument("--wheel", type=Path, required=True, help="the phantom-console wheel")
    parser.add_argument("--tag", default="phantom-watch", help="the image's name")
    parser.add_argument("--base", default="python:3.11-slim", help="the base image wanted")
    args = parser.parse_args(argv)
    try:
        base = build(args.wheel, args.tag, args.base)
    except ImageError as exc:
        print(f"image: {exc}", file=sys.stderr)
        return 1
    print(f"{args.tag}: {size(args.tag)} (base {base}, {size(base)})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
