"""`phantom --script FILE`: the console's actions without a screen (cron, CI, agents).

The script is read and checked whole before anything runs (exit 2 naming every problem,
nothing started); then ``runner.ScriptRunner`` runs it against the same services the TUI
drives. The language reference is ``phantom --script-help`` (``language.usage_text``).
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import TextIO

from console import exit_codes
from console.commands import GkeControl, PodControl
from console.config import Config
from console.script.parse import ScriptError, parse_script
from console.script.runner import ScriptRunner, ServicesFactory
from console.secrets import Scrubber

MAX_SCRIPT_BYTES = 1 << 20


def read_script(path: str, stdin: TextIO | None = None) -> tuple[str, str, Path]:
    """(text, display name, base dir for relative files). ValueError naming the problem
    (missing, a directory, binary, too big)."""
    if path == "-":
        text = (stdin or sys.stdin).read(MAX_SCRIPT_BYTES + 1)
        if len(text) > MAX_SCRIPT_BYTES:
            raise ValueError(f"more than {MAX_SCRIPT_BYTES:,} characters on stdin")
        return text, "<stdin>", Path.cwd()
    p = Path(path)
    try:
        if p.is_dir():
            raise ValueError("is a directory; --script takes a file ('-' for stdin)")
        size = p.stat().st_size
        if size > MAX_SCRIPT_BYTES:
            raise ValueError(f"is {size:,} bytes; a script is at most {MAX_SCRIPT_BYTES:,}")
        return p.read_bytes().decode("utf-8"), path, p.resolve().parent
    except UnicodeDecodeError:
        raise ValueError("is not text (binary content)") from None
    except OSError as exc:
        raise ValueError(exc.strerror or str(exc)) from None


def script_main(
    path: str,
    config: Config,
    *,
    services_factory: ServicesFactory | None = None,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
    stdin: TextIO | None = None,
    pod_control: PodControl | None = None,
    gke_control: GkeControl | None = None,
) -> int:
    """Run a script; returns the exit code (0 ok, 1 step failed, 2 invalid, 130 interrupted)."""
    out = sys.stdout if stdout is None else stdout
    err = sys.stderr if stderr is None else stderr
    scrub = Scrubber([config.wandb.api_key_env])
    try:
        text, name, base_dir = read_script(path, stdin)
    except ValueError as exc:
        print(scrub.text(f"phantom: cannot read script {path!r}: {exc}"), file=err)
        return exit_codes.USAGE
    from console.wiring import unbuilt_services

    # The services the script runs against, decided now and built at its first step that
    # needs the cluster: what the script is checked against comes with them.
    services = unbuilt_services(config, services_factory)
    path_exists = None
    if config.is_gke:
        from console.wiring import storage_probe

        path_exists = storage_probe(config)
    try:
        script = parse_script(text, services, name=name, base_dir=base_dir, path_exists=path_exists)
    except ScriptError as exc:
        for issue in exc.issues:
            print(scrub.text(issue.render(exc.name)), file=err)
        print(
            f"phantom: {len(exc.issues)} problem(s) in {exc.name}; nothing was run "
            "(`phantom --script-help` prints the language reference)",
            file=err,
        )
        return exit_codes.USAGE

    if pod_control is None:
        from console.wiring import pod_control as make_pod_control

        pod_control = make_pod_control(config)
    if gke_control is None and config.is_gke and config.is_emulated:
        from console.wiring import gke_control as make_gke_control

        gke_control = make_gke_control(config)
    runner = ScriptRunner(
        script,
        config,
        services=services,
        pod_control=pod_control,
        stdout=out,
        stderr=err,
        gke_control=gke_control,
    )
    return asyncio.run(runner.run())
