"""`phantom --script FILE`: the console's actions without a screen (cron, CI, agents).

The script is read and checked whole before anything runs (exit 2 naming every problem,
nothing started); then ``runner.ScriptRunner`` runs it against the same services the TUI
drives. Over a ``[[clusters]]`` fleet every cluster's services are handed to it, each built
only at the first line that acts there. The language reference is ``phantom --script-help`` (``language.usage_text``).
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TextIO, TypeVar

from console import exit_codes
from console.commands import GkeControl, PodControl
from console.commands.kit.bind import PathExists
from console.config import Config
from console.config.fleet import Fleet
from console.script.parse import ScriptError, parse_script
from console.script.runner import ScriptRunner, ServicesFactory, Target
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
    config: Config | Fleet,
    *,
    cluster: str | None = None,
    services_factory: ServicesFactory | None = None,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
    stdin: TextIO | None = None,
    pod_control: PodControl | Mapping[str, PodControl] | None = None,
    gke_control: GkeControl | Mapping[str, GkeControl] | None = None,
) -> int:
    """Run a script; returns the exit code (0 ok, 1 step failed, 2 invalid, 130 interrupted).

    ``config``: one cluster's, or a fleet's (each line acts on the cluster ``use`` or its
    ``--cluster`` chose; ``cluster`` is the one chosen before the first ``use``). The
    emulators' clients are made from each cluster's config unless given (one, for a lone
    cluster; or by cluster name)."""
    out = sys.stdout if stdout is None else stdout
    err = sys.stderr if stderr is None else stderr
    fleet = config if isinstance(config, Fleet) else Fleet((config,), config.source)
    first = fleet.members[0]
    scrub = Scrubber([first.wandb.api_key_env])
    try:
        text, name, base_dir = read_script(path, stdin)
    except ValueError as exc:
        print(scrub.text(f"phantom: cannot read script {path!r}: {exc}"), file=err)
        return exit_codes.USAGE
    from console.wiring import unbuilt_services

    # The services the script runs against, decided now and built at its first step that
    # needs the cluster: what the script is checked against comes with them.
    members = {member.name: member for member in fleet.members}
    services = {n: unbuilt_services(c, services_factory) for n, c in members.items()}
    probes: dict[str, PathExists | None] = {}
    for n, member in members.items():
        probes[n] = None
        if member.is_gke:
            from console.wiring import storage_probe

            probes[n] = storage_probe(member)
    try:
        script = parse_script(
            text,
            services,
            name=name,
            base_dir=base_dir,
            path_exists=probes,
            cluster=cluster,
            source=fleet.source,
        )
    except ScriptError as exc:
        for issue in exc.issues:
            print(scrub.text(issue.render(exc.name)), file=err)
        print(
            f"phantom: {len(exc.issues)} problem(s) in {exc.name}; nothing was run "
            "(`phantom --script-help` prints the language reference)",
            file=err,
        )
        return exit_codes.USAGE

    targets = {
        n: Target(
            member,
            services[n],
            _control(pod_control, n, member, _pod_control),
            _control(gke_control, n, member, _gke_control),
        )
        for n, member in members.items()
    }
    runner = ScriptRunner(script, targets, stdout=out, stderr=err)
    return asyncio.run(runner.run())


C = TypeVar("C")


def _control(
    given: C | Mapping[str, C] | None,
    name: str,
    config: Config,
    make: Callable[[Config], C | None],
) -> C | None:
    """A cluster's emulator client: the one given (by name, or the lone cluster's), else
    made from its config."""
    if isinstance(given, Mapping):
        return given.get(name)
    return given if given is not None else make(config)


def _pod_control(config: Config) -> PodControl | None:
    from console.wiring import pod_control

    return pod_control(config)


def _gke_control(config: Config) -> GkeControl | None:
    if not (config.is_gke and config.is_emulated):
        return None
    from console.wiring import gke_control

    return gke_control(config)
