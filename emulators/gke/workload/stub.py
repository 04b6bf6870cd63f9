"""Entry point of images the emulator cannot run (Pathways servers, unknown images):
log like a server that started, then wait for SIGTERM (default action: exit 143)."""

from __future__ import annotations

import argparse
import os
import sys
import time


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--role", default="image")
    p.add_argument("--image", default="")
    args, rest = p.parse_known_args(argv)
    host = os.environ.get("HOSTNAME", "")
    if args.role == "image":
        print(
            f"emulator: image {args.image!r} has no emulated entrypoint; idling "
            f"(args: {' '.join(rest)})",
            flush=True,
        )
    else:
        print(
            f"I0000 00:00:00.000000 {os.getpid()} server.cc:1] Pathways {args.role} "
            f"starting on {host} with flags: {' '.join(rest)}",
            flush=True,
        )
        print(
            f"I0000 00:00:00.000000 {os.getpid()} server.cc:2] Pathways {args.role} ready",
            flush=True,
        )
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    sys.exit(main())
